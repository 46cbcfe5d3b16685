#!/usr/bin/env python3
"""astsearch: list where a Python symbol is defined and where it is used, by parsing the AST.

Why it exists: the T1/T2 workloads model a coding agent's "find the definition and the callers"
step, which agents do with AST-aware tools rather than grep. It is copied into every environment
(the local template, the runner image), so it uses only the standard library and imports nothing
of rtax.

    python3 astsearch.py PATH [PATH ...] SYMBOL [--defs-only] [--max N]

Output, one hit per line, sorted by file then position::

    src/attr/_make.py:1234:4: def evolve   (function)
    src/attr/__init__.py:12:0: use evolve  (import)

Exit code 0 when at least one hit was found, 1 when none, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections.abc import Iterator


def python_files(roots: list[str]) -> Iterator[str]:
    """Every .py file under the given files or folders, in a stable order."""
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def _definitions(node: ast.AST, symbol: str) -> Iterator[tuple[int, int, str]]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == symbol:
        yield node.lineno, node.col_offset, "function"
    elif isinstance(node, ast.ClassDef) and node.name == symbol:
        yield node.lineno, node.col_offset, "class"
    elif isinstance(node, ast.Name) and node.id == symbol and isinstance(node.ctx, ast.Store):
        yield node.lineno, node.col_offset, "assignment"
    elif isinstance(node, ast.arg) and node.arg == symbol:
        yield node.lineno, node.col_offset, "parameter"


def _uses(node: ast.AST, symbol: str) -> Iterator[tuple[int, int, str]]:
    if isinstance(node, ast.Name) and node.id == symbol and not isinstance(node.ctx, ast.Store):
        yield node.lineno, node.col_offset, "name"
    elif isinstance(node, ast.Attribute) and node.attr == symbol:
        yield node.end_lineno or node.lineno, node.col_offset, "attribute"
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            if symbol in (alias.name, alias.asname) or alias.name.endswith("." + symbol):
                yield node.lineno, node.col_offset, "import"


def search(path: str, symbol: str) -> list[tuple[int, int, str, str]]:
    """Hits in one file as (line, column, 'def'|'use', detail); unparsable files yield none."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (SyntaxError, UnicodeDecodeError, OSError):
        return []
    hits = []
    for node in ast.walk(tree):
        hits.extend((line, col, "def", what) for line, col, what in _definitions(node, symbol))
        hits.extend((line, col, "use", what) for line, col, what in _uses(node, symbol))
    return sorted(set(hits))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="astsearch", description=__doc__.splitlines()[1])
    parser.add_argument("paths", nargs="+", help="files or folders to search, then the symbol")
    parser.add_argument("--defs-only", action="store_true", help="list definitions only")
    parser.add_argument("--max", type=int, default=0, help="stop after N hits (0: no limit)")
    args = parser.parse_args(argv)
    if len(args.paths) < 2:
        parser.error("give at least one PATH and a SYMBOL")
    *roots, symbol = args.paths
    missing = [r for r in roots if not os.path.exists(r)]
    if missing:
        parser.error(f"no such file or folder: {missing[0]}")
    count = 0
    for path in python_files(roots):
        for line, col, kind, what in search(path, symbol):
            if args.defs_only and kind != "def":
                continue
            print(f"{path}:{line}:{col}: {kind} {symbol}  ({what})")
            count += 1
            if args.max and count >= args.max:
                return 0
    return 0 if count else 1


if __name__ == "__main__":
    sys.exit(main())
