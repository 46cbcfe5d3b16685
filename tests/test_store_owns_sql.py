"""Only the store writes SQL (docs/data.md): no module of rtax outside `rtax/store/`, no page and
not app.py runs a statement against the database, opens a SQLite connection, reaches into a
sqlite-utils table or even spells a SQL statement.

Why a test (issue 21): "the store is the only module that writes SQL" had stopped being true
(five modules did), and a second place that writes SQL is where a second column list, a second
filter rule and a second transaction rule start. The check reads the source (`ast`), so it sees
code that only runs inside a function too, and names the file and line of each breach. Tests
and benchmarks are outside it (tests plant old files by hand); an emulation's own in-memory
store (`rtax/emulation/kubernetes/store.py`: pods and watch events in dicts) is not SQLite and
holds no SQL, so the check passes it by what it finds, not by a list of exceptions.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tree import plant

ROOT = Path(__file__).resolve().parent.parent

#: A SQL statement in a string: upper-case keywords in statement order (prose rarely writes
#: them so; the store's own queries always do).
SQL = re.compile(
    r"\b(SELECT\b[\s\S]*\bFROM|INSERT\s+(OR\s+[A-Z]+\s+)?INTO|UPDATE\s+\[?\w+\]?\s+SET"
    r"|DELETE\s+FROM|CREATE\s+(TABLE|(UNIQUE\s+)?INDEX)|ALTER\s+TABLE|DROP\s+(TABLE|INDEX)"
    r"|PRAGMA\s+\w+|BEGIN(\s+IMMEDIATE)?\s*$|VACUUM\s*$)"
)
#: Calls that run SQL or open a database whatever their arguments.
SQL_CALLS = {"executemany", "executescript", "read_sql", "read_sql_query", "read_sql_table"}
#: Constructors of a connection: ``sqlite3.connect``, ``sqlite_utils.Database``.
CONNECTS = {("sqlite3", "connect"), ("sqlite_utils", "Database")}


def sources(root: Path = ROOT) -> list[Path]:
    """The modules the rule applies to: rtax's outside its store, the pages and app.py."""
    store = root / "rtax" / "store"
    files = [p for p in sorted((root / "rtax").rglob("*.py")) if store not in p.parents]
    return [*files, *sorted((root / "pages").glob("*.py")), root / "app.py"]


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes (prose, which may name a statement to explain it)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _text(node: ast.AST) -> str | None:
    """The literal text of a string or f-string (its formatted parts as ``?``), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) or "?" for v in node.values)
    return None


def breaches(path: Path, root: Path = ROOT) -> Iterator[str]:
    """``file:line: what`` for every piece of SQL work in `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    prose = _docstrings(tree)
    name = path.relative_to(root)
    inside_fstring = {
        id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr, owner = node.func.attr, node.func.value
            if attr in SQL_CALLS:
                yield f"{name}:{node.lineno}: calls .{attr}()"
            elif attr == "execute" and node.args and _text(node.args[0]) is not None:
                yield f"{name}:{node.lineno}: executes a statement"
            elif isinstance(owner, ast.Name) and (owner.id, attr) in CONNECTS:
                yield f"{name}:{node.lineno}: opens a connection ({owner.id}.{attr})"
        elif isinstance(node, ast.Subscript) and _text(node.slice) is not None:
            value = node.value
            if (isinstance(value, ast.Name) and value.id == "db") or (
                isinstance(value, ast.Attribute) and value.attr == "db"
            ):
                yield f"{name}:{node.lineno}: reaches into a sqlite-utils table"
        elif isinstance(node, ast.Attribute) and node.attr == "conn":
            yield f"{name}:{node.lineno}: uses a database connection (.conn)"
        elif (
            isinstance(node, ast.Constant | ast.JoinedStr)
            and id(node) not in prose
            and id(node) not in inside_fstring
        ):
            text = _text(node)
            if text is not None and SQL.search(text):
                yield f"{name}:{node.lineno}: spells a SQL statement: {text.strip()[:60]!r}"


def found(root: Path = ROOT) -> list[str]:
    return [b for path in sources(root) if path.is_file() for b in breaches(path, root)]


def test_only_the_store_writes_sql() -> None:
    breached = found()
    assert not breached, "SQL outside rtax/store/:\n" + "\n".join(breached)


def test_the_rule_covers_the_whole_tree() -> None:
    names = {str(p.relative_to(ROOT)) for p in sources()}
    assert "app.py" in names and "rtax/service/alerts.py" in names
    assert "rtax/emulation/kubernetes/etcd.py" in names  # not SQLite: checked, and clean
    assert not any(n.startswith("rtax/store/") for n in names)
    assert any(n.startswith("pages/") for n in names)


def test_planted_sql_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "rtax/store/database.py": 'def ok(conn):\n    conn.execute("SELECT 1 FROM runs")\n',
            "rtax/service/sneaky.py": (
                '"""Runs SELECT x FROM runs in prose: fine."""\n'
                "import sqlite3\n\n\n"
                "def f(store, table):\n"
                '    store.db.conn.execute(f"DELETE FROM {table} WHERE 1")\n'
                '    return store.db["runs"].count\n\n\n'
                "def g(path):\n"
                "    return sqlite3.connect(path)\n"
            ),
            "pages/board.py": 'import pandas as pd\n\nQ = "SELECT * FROM incidents"\n',
            "app.py": "",
        },
    )
    assert sorted(found(root)) == [
        "pages/board.py:3: spells a SQL statement: 'SELECT * FROM incidents'",
        "rtax/service/sneaky.py:11: opens a connection (sqlite3.connect)",
        "rtax/service/sneaky.py:6: executes a statement",
        "rtax/service/sneaky.py:6: spells a SQL statement: 'DELETE FROM ? WHERE 1'",
        "rtax/service/sneaky.py:6: uses a database connection (.conn)",
        "rtax/service/sneaky.py:7: reaches into a sqlite-utils table",
    ]


def test_an_in_memory_store_and_prose_are_not_sql(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "rtax/emulation/kubernetes/store.py": (
                '"""Pods and events; a watch may SELECT nothing FROM anywhere."""\n\n\n'
                "class Store:\n"
                "    def put(self, pod):\n"
                "        self.pods[pod['name']] = pod\n\n"
                "    def execute(self, command):\n"
                "        return command\n"
            ),
            "rtax/cli.py": (
                "def f(args, frame):\n"
                '    print("select the rows from the table")\n'
                "    frame.query(args.where)\n"
                "    return args.db.parent\n"
            ),
            "app.py": "",
        },
    )
    assert found(root) == []
