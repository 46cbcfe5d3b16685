"""The public API (`rtax.__all__`, docs/library.md): the documented script runs as written and
stores what it says, every exported name resolves, and `import rtax` stays cheap."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import rtax
from rtax.store import Store

DOC = Path(__file__).resolve().parent.parent / "docs" / "library.md"


def _script() -> str:
    return re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)


def test_the_documented_script_runs_and_stores_what_it_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], attrs_fixture
) -> None:
    db = tmp_path / "library.db"
    lines = [line for line in _script().splitlines() if line.strip()]
    assert len(lines) <= 11  # the import and ten lines, as the page says
    exec(compile(_script(), str(DOC), "exec"), {"DB": db})
    out = capsys.readouterr().out
    assert "3 rollouts, 3 ok" in out and "local · T0 3 " in out
    with Store(db) as store:
        assert len(store.runs.read(substrate="local")) == 3


def test_every_exported_name_resolves_and_is_listed_in_the_docs() -> None:
    documented = DOC.read_text()
    for name in rtax.__all__:
        assert getattr(rtax, name) is not None
        if name != "__version__":
            assert f"`{name}`" in documented, f"{name} is exported but not in docs/library.md"
    assert set(rtax.__all__) == {"__version__", *rtax._API}
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        rtax.nothing  # noqa: B018


def test_importing_rtax_imports_no_heavy_library() -> None:
    """Lazy on purpose: a Ray task or a page imports only the corner it needs."""
    code = (
        "import sys, rtax; "
        "print(sorted(m for m in ('pandas', 'docker', 'boto3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
