"""rtax: live, honest measurement of the rollout infrastructure tax.

The library is the product; the CLI (`rtax.cli`) and the dashboard only call into it.
See docs/measurement.md for what every number means.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rtax")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.1.0+checkout"
