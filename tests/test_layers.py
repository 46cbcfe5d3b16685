"""Imports only point down (docs/architecture.md#layers): every import in rtax, app.py and pages/,
at module level or inside a function, goes to its own layer or one below, and no two modules
import each other, however long the loop.

Why a test and not a convention: the last round's bugs came from concepts that lived in several
places, and upward imports are how a second home starts (a "pure" module reaching into the store
for a column list). The check reads the source (`ast`), so it sees imports that only run inside
a function too, and names the file and line of each one that breaks the order.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tree import plant

ROOT = Path(__file__).resolve().parent.parent

#: The layers, bottom first: a module may import its own layer and those before it. The same
#: order, with what each layer is for, is docs/architecture.md's diagram.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("rtax.core",)),
    ("analysis", ("rtax.analysis",)),
    ("planning", ("rtax.planning",)),
    ("settings", ("rtax.settings",)),
    ("store", ("rtax.store",)),
    ("assets", ("rtax.assets",)),
    ("substrates", ("rtax.substrates",)),
    ("emulation", ("rtax.emulation",)),
    ("compose", ("rtax.compose",)),
    ("rollouts", ("rtax.rollouts",)),
    ("service", ("rtax.service",)),
    ("dashboard", ("rtax.dashboard", "app", "pages")),
    ("faultsuite", ("rtax.faultsuite",)),
    ("cli", ("rtax.cli",)),
    ("api", ("rtax", "rtax.__main__")),
)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources(root: Path = ROOT) -> dict[str, Path]:
    """Every module the order applies to: rtax's, app.py and the pages."""
    files = [*sorted((root / "rtax").rglob("*.py")), root / "app.py"]
    files += sorted((root / "pages").glob("*.py"))
    return {module_name(p, root): p for p in files if p.is_file()}


def layer_of(module: str) -> int | None:
    """The index of `module`'s layer (the longest matching prefix), None outside rtax."""
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or module.startswith(prefix + ".")
            if inside and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return None if best is None else best[0]


def imports(module: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """(imported rtax module, line) for every import in `path`, wherever it stands: a name
    imported from a package is the submodule when there is one, else the package itself."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in known else target), node.lineno


def graph(root: Path = ROOT) -> tuple[dict[str, list[tuple[str, int]]], dict[str, Path]]:
    """Each module's rtax imports (module, line); the modules by name."""
    mods = sources(root)
    known = set(mods)
    edges: dict[str, list[tuple[str, int]]] = {}
    for name, path in mods.items():
        found = []
        for target, line in imports(name, path, known):
            while target and target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known and target != name and layer_of(target) is not None:
                found.append((target, line))
        edges[name] = found
    return edges, mods


def upward(root: Path = ROOT) -> list[str]:
    """Every import that points to a higher layer, as "file:line: a (layer) imports b (layer)"."""
    edges, mods = graph(root)
    found: list[str] = []
    for name, targets in sorted(edges.items()):
        mine = layer_of(name)
        if mine is None:
            continue
        for target, line in targets:
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                said = (
                    f"{mods[name].relative_to(root)}:{line}: {name} ({LAYERS[mine][0]}) "
                    f"imports {target} ({LAYERS[theirs][0]}), a layer above it"
                )
                if said not in found:
                    found.append(said)
    return found


def cycles(root: Path = ROOT) -> list[str]:
    """Every loop of imports, as "a (file:line) -> b (file:line) -> ... -> a"."""
    edges, mods = graph(root)
    found: list[str] = []
    seen: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[tuple[str, int]] = []

    def visit(name: str) -> None:
        state[name] = 1
        for target, line in edges.get(name, []):
            if state.get(target) == 1:
                start = next(i for i, (n, _) in enumerate(path) if n == target)
                loop = [*path[start:], (name, line)]
                key = frozenset(n for n, _ in loop)
                if key not in seen:
                    seen.add(key)
                    steps = [f"{n} ({mods[n].relative_to(root)}:{at})" for n, at in loop]
                    found.append(" -> ".join([*steps, target]))
            elif state.get(target) is None:
                path.append((name, line))
                visit(target)
                path.pop()
        state[name] = 2

    for name in sorted(edges):
        if name not in state:
            path.clear()
            visit(name)
    return found


def test_every_module_has_a_layer() -> None:
    missing = [name for name in sources() if layer_of(name) is None]
    assert not missing, f"modules outside every layer of LAYERS: {missing}"


def test_imports_only_point_down() -> None:
    found = upward()
    assert not found, "imports that point up:\n" + "\n".join(found)


def test_no_import_cycles() -> None:
    found = cycles()
    assert not found, "import cycles:\n" + "\n".join(found)


def test_a_planted_upward_import_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "rtax/__init__.py": "",
            "rtax/core/__init__.py": "",
            "rtax/core/record.py": "import json\n\n\ndef f():\n    from rtax.store import x\n",
            "rtax/store/__init__.py": "",
            "rtax/store/x.py": "from rtax.core import record\n",
            "app.py": "",
        },
    )
    assert upward(root) == [
        "rtax/core/record.py:5: rtax.core.record (core) imports rtax.store.x (store), "
        "a layer above it"
    ]


def test_a_planted_cycle_is_named(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "rtax/__init__.py": "",
            "rtax/analysis/__init__.py": "",
            "rtax/analysis/a.py": "from rtax.analysis import b\n",
            "rtax/analysis/b.py": "x = 1\n\n\ndef g():\n    from rtax.analysis.a import y\n",
            "app.py": "",
        },
    )
    assert cycles(root) == [
        "rtax.analysis.a (rtax/analysis/a.py:1) -> "
        "rtax.analysis.b (rtax/analysis/b.py:5) -> rtax.analysis.a"
    ]
    assert upward(root) == []


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("rtax.core.series", "core"),
        ("rtax.store", "store"),
        ("rtax.substrates.docker.daemon", "substrates"),
        ("pages.overview", "dashboard"),
        ("rtax", "api"),
    ],
)
def test_layer_of(module: str, layer: str) -> None:
    rank = layer_of(module)
    assert rank is not None and LAYERS[rank][0] == layer
