"""rtax: live, honest measurement of the rollout infrastructure tax.

The library is the product; the CLI (`rtax.cli`) and the dashboard only call into it.
See docs/measurement.md for what every number means.
"""

from rtax.core.version import __version__

__all__ = ["__version__"]
