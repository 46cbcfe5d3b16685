"""The AST-search tool shipped into every environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rtax.assets.tools import astsearch

TOOL = Path(astsearch.__file__)


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "import os\n\ndef target(x):\n    return x\n\nclass Target:\n    target = 1\n"
    )
    (tmp_path / "pkg" / "b.py").write_text("from pkg.a import target\nprint(target(2), o.target)\n")
    (tmp_path / "pkg" / "broken.py").write_text("def (:\n")
    return tmp_path / "pkg"


def test_finds_definitions_and_uses(tmp_path: Path) -> None:
    hits = astsearch.search(str(_tree(tmp_path) / "a.py"), "target")
    assert (3, 0, "def", "function") in hits
    assert (7, 4, "def", "assignment") in hits
    b_hits = astsearch.search(str(tmp_path / "pkg" / "b.py"), "target")
    assert {h[3] for h in b_hits} == {"import", "name", "attribute"}


def test_cli_exit_codes(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    found = subprocess.run(
        [sys.executable, str(TOOL), str(root), "target"], capture_output=True, text=True
    )
    assert found.returncode == 0
    assert f"{root}/a.py:3:0: def target  (function)" in found.stdout
    assert "broken.py" not in found.stdout  # unparsable files are skipped, not fatal
    defs = subprocess.run(
        [sys.executable, str(TOOL), str(root), "target", "--defs-only"],
        capture_output=True,
        text=True,
    )
    assert all(" def " in line for line in defs.stdout.splitlines())
    none = subprocess.run(
        [sys.executable, str(TOOL), str(root), "nothing_here"], capture_output=True, text=True
    )
    assert none.returncode == 1 and none.stdout == ""
    bad = subprocess.run(
        [sys.executable, str(TOOL), str(tmp_path / "missing"), "x"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "no such file" in bad.stderr
