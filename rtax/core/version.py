"""rtax's version, as every record's provenance states it.

Why here and not in `rtax/__init__`: the record schema (`rtax.core.record`) stamps it on every
row, and `core` imports nothing above it; the package's `__init__` re-exports it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rtax")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.1.0+checkout"
