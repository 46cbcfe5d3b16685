"""`python -m rtax` runs the CLI."""

import sys

from rtax.cli import main

sys.exit(main())
