"""The documentation matches the tree and the code: README.md and docs/ (docs/measurement.md is
the reference, the README the short version).

Why tests: the reference moved out of the README into docs/, and docstrings link into it. A link
to a file or heading that is gone, a path that was renamed, a module without its line in the
README's layout, a substrate parameter that was added or a record field that changed must fail
here, not mislead a reader later.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from rtax.core import record
from rtax.substrates import REGISTRY, substrate_class

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Where code, comments and configuration refer to the documentation by path.
SOURCES = [
    *(p for p in (ROOT / "rtax").rglob("*") if p.is_file() and p.suffix not in (".pyc",)),
    *(ROOT / "tests").rglob("*.py"),
    *(ROOT / "pages").rglob("*.py"),
    *(ROOT / "benchmarks").rglob("*.py"),
    *(ROOT / "scripts").iterdir(),
    *(ROOT / "examples").iterdir(),
    *(ROOT / ".ci").iterdir(),
    *(ROOT / name for name in ("app.py", "Dockerfile", "Makefile", "rtax.toml", "pyproject.toml")),
]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]+`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)
_DOC_REF = re.compile(r"(?<![\w/.-])((?:README|docs/[\w./-]+?)\.md)(?:#([\w-]+))?")
_REPO_PATH = re.compile(r"`((?:rtax|tests|pages|scripts|benchmarks|examples|docs)/[^`\s]*)`")


def prose(text: str) -> str:
    """`text` without fenced code blocks (whose lines are not headings or links)."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page (a repeated heading gets -1, -2, ...)."""
    found: set[str] = set()
    for heading in _HEADING.findall(prose(page.read_text())):
        base = slug(heading)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def broken(target: Path, anchor: str | None, cache: dict[Path, set[str]]) -> str | None:
    """Why a reference to `target`#`anchor` does not resolve, or None if it does."""
    if not target.exists():
        return "no such file"
    if anchor:
        if target.suffix != ".md":
            return "an anchor into a file that is not Markdown"
        if target not in cache:
            cache[target] = anchors(target)
        if anchor not in cache[target]:
            return f"no heading #{anchor}"
    return None


def test_slugs_follow_github() -> None:
    assert (
        slug("The `docker` substrate (runc and gVisor)") == "the-docker-substrate-runc-and-gvisor"
    )
    assert slug("Configuration, budgets, scheduler, retention") == (
        "configuration-budgets-scheduler-retention"
    )
    assert slug("What each models, and what it doesn't") == "what-each-models-and-what-it-doesnt"


def test_every_relative_link_in_the_docs_resolves() -> None:
    """Every relative Markdown link in README.md and docs/ names an existing file, and every
    #anchor an existing heading of it (the same page when the link is only an anchor)."""
    problems, cache = [], {}
    for page in PAGES:
        text = _CODE.sub("", prose(page.read_text()))
        for target in _LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            why = broken(resolved, anchor or None, cache)
            if why:
                problems.append(f"{page.relative_to(ROOT)}: ({target}): {why}")
    assert problems == []


def test_every_reference_to_the_docs_from_the_code_resolves() -> None:
    """Docstrings, comments, help texts and configuration files name README.md or docs/ pages
    (``docs/measurement.md#resolution``); each must name an existing file and heading."""
    problems, cache = [], {}
    for source in SOURCES:
        try:
            text = source.read_text()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        for path, anchor in _DOC_REF.findall(text):
            why = broken(ROOT / path, anchor or None, cache)
            if why:
                problems.append(f"{source.relative_to(ROOT)}: {path}#{anchor}: {why}")
    assert problems == []


def test_every_path_the_docs_name_exists() -> None:
    """A file or folder of this repository named in backquotes (`rtax/substrates/poll.py`)
    exists: a renamed module must not leave its old path in the docs."""
    problems = []
    for page in PAGES:
        for path in _REPO_PATH.findall(page.read_text()):
            if any(c in path for c in "*<{"):  # a pattern, not a path
                continue
            if not (ROOT / path).exists():
                problems.append(f"{page.relative_to(ROOT)}: `{path}` does not exist")
    assert problems == []


def _toml_default(value: object) -> str:
    """A constructor default as the docs' tables spell it (TOML, or "unset" for None)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


def _parameter_rows(page: Path) -> dict[str, str]:
    """parameter -> default cell of the page's "Parameters" table."""
    section = page.read_text().split("\n## Parameters\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", section, flags=re.M)
    return dict(rows)


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_each_substrate_page_lists_its_constructor_parameters(kind: str) -> None:
    """docs/substrates/<kind>.md's Parameters table is the constructor: every parameter a
    configuration entry can set (`params`), none that it can't, each with its real default."""
    signature = inspect.signature(substrate_class(kind).__init__)
    expected = {
        name: _toml_default(p.default)
        for name, p in signature.parameters.items()
        if name not in ("self", "name")
    }
    assert _parameter_rows(ROOT / "docs" / "substrates" / f"{kind}.md") == expected


def test_the_data_reference_is_what_the_record_prints() -> None:
    """docs/data.md carries the field tables that `python -m rtax.core.record` prints."""
    page = (ROOT / "docs" / "data.md").read_text()
    assert record.reference(record.RUN_FIELDS) in page
    assert record.reference(record.ACTION_FIELDS) in page


def _table(text: str, heading: str) -> list[tuple[str, str]]:
    """The rows (first cell, second cell) of the first table under `heading`."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| (.+?) \| (.+?) \|$", section, flags=re.M)[1:]  # not the header


def _packages() -> set[str]:
    """rtax's packages (`rtax/core/`) and its top-level modules (`rtax/compose.py`)."""
    found = {f"rtax/{p.parent.name}/" for p in (ROOT / "rtax").glob("*/__init__.py")}
    return found | {f"rtax/{p.name}" for p in (ROOT / "rtax").glob("*.py")}


def test_the_layout_table_is_one_row_per_package() -> None:
    """The README's Layout table names every package of `rtax/` and each top-level module,
    one row each, in at most 20 rows; every path it names exists."""
    rows = _table((ROOT / "README.md").read_text(), "Layout")
    assert len(rows) <= 20
    named = {path for first, _ in rows for path in re.findall(r"`([^`]+)`", first)}
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
    assert sorted(_packages() - named) == []


def test_the_architecture_names_every_package_and_twenty_features() -> None:
    """docs/architecture.md's package table covers every package, its "Where is" table at least
    20 features (each file exists), and its layers are tests/test_layers.py's, in order."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = {re.search(r"`([^`]+)`", first).group(1) for first, _ in _table(text, "Packages")}
    assert sorted(_packages() - packages - {"rtax/__init__.py", "rtax/__main__.py"}) == []
    features = _table(text, "Where is")
    assert len(features) >= 20
    files = [re.search(r"`([^`]+)`", cell).group(1) for _, cell in features]
    assert [f for f in files if not (ROOT / f).is_file()] == []
    from test_layers import LAYERS

    drawn = re.findall(r'^    (\w+)\["', text.split("```mermaid", 1)[1], flags=re.M)
    assert drawn == [name for name, _ in LAYERS if name != "api"]
