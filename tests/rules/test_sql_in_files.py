"""Long SQL lives in ``.sql`` files beside the module that runs it, read through the one loader
(gpuledger.sql.load_sql; issue 22 §5): no string in Python of 5 lines or more holds a statement.
Short SQL (a count, a DESCRIBE, a query built from identifiers) stays where it is used."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("gpuledger", "warehouse", "enforce", "pipelines", "dashboards")
STATEMENT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|WITH|MERGE|COPY)\b")
LONG = 5  # lines
# a literal not yet moved would be listed here: file -> how many
KNOWN: dict[str, int] = {}


def long_sql_literals(source: str) -> list[int]:
    """Lines where a string (or f-string) of LONG lines or more starts with a SQL statement."""
    out = []
    nodes = list(ast.walk(ast.parse(source)))
    pieces = {id(v) for n in nodes if isinstance(n, ast.JoinedStr) for v in n.values}  # an f-string's parts
    for node in nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in pieces:
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
        else:
            continue
        if node.end_lineno - node.lineno + 1 >= LONG and STATEMENT.match(text):
            out.append(node.lineno)
    return out


def test_the_finder_finds_a_long_statement_and_not_a_docstring():
    long = 'Q = """\nSELECT a,\n  b\nFROM t\nWHERE c\n"""\n'
    f_long = 'Q = (f"SELECT {x} "\n "FROM t "\n "JOIN u USING (k) "\n "WHERE c "\n "ORDER BY a")\n'
    short = 'Q = """SELECT a\nFROM t\nWHERE c\n"""\n'
    doc = 'def f():\n    """Select the rows:\n\n    with care, one\n    update at a time."""\n'
    assert long_sql_literals(long) == [1] and long_sql_literals(f_long) == [1]
    assert long_sql_literals(short) == [] and long_sql_literals(doc) == []


def test_no_long_sql_in_python():
    found: dict[str, int] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("gpuledger/") and rel.split("/")[1] in FOLDERS:  # (links to the folders)
                continue
            lines = long_sql_literals(path.read_text(encoding="utf-8"))
            if lines:
                found[rel] = len(lines)
    assert {f: n for f, n in found.items() if KNOWN.get(f) != n} == {}
