"""A source tree written into a temporary folder, for the tests that read rtax's own source
(tests/test_layers.py, tests/test_store_owns_sql.py) and must show they catch a planted
breach, not only pass on the real tree."""

from __future__ import annotations

from pathlib import Path


def plant(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path -> text) under `root`; return `root`."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
