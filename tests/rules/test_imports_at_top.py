"""Imports sit at the top of their module (issue 40): an import inside a function hides what the
module depends on. Outside the command line, one that stays there says why, on its line or the
line above: ``# lazy: <why>`` (an optional extra not installed, a path measured without a heavy
library, ...). The CLI's command modules (gpuledger/cli) load their libraries when a command runs,
so that every ``--help`` starts fast: that is measured (BENCHMARKS.md "CLI start-up") and checked
(tests/cli/test_startup.py), so they need no marker. An import guarded by ``try/except
ImportError`` says why by its except clause. The layering test (test_layering.py) counts every
one of these imports as an edge."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("gpuledger", "warehouse", "enforce", "pipelines", "dashboards")
EXEMPT = ROOT / "gpuledger" / "cli"
MARKER = re.compile(r"#\s*lazy:\s*\S")


def _guards_import_error(handler: ast.ExceptHandler) -> bool:
    names = ast.unparse(handler.type) if handler.type is not None else ""
    return "ImportError" in names or "ModuleNotFoundError" in names


def unexplained_imports(source: str, where: str) -> list[str]:
    """``where:line`` of each import inside a function of ``source`` with no ``# lazy:`` reason."""
    lines = source.splitlines()
    found: list[str] = []

    def visit(node: ast.AST, in_function: bool, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True, guarded)
            elif isinstance(child, ast.Try):
                catches = any(_guards_import_error(h) for h in child.handlers)
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), in_function, guarded or catches)
                for part in (child.handlers, child.orelse, child.finalbody):
                    for stmt in part:
                        visit(ast.Module(body=[stmt], type_ignores=[]), in_function, guarded)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                here = lines[child.lineno - 1]
                above = lines[child.lineno - 2].strip() if child.lineno >= 2 else ""
                explained = MARKER.search(here) or (above.startswith("#") and MARKER.search(above))
                if in_function and not guarded and not explained:
                    found.append(f"{where}:{child.lineno}: {ast.unparse(child)}")
            else:
                visit(child, in_function, guarded)

    visit(ast.parse(source), False, False)
    return found


def test_function_level_imports_say_why():
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.is_relative_to(EXEMPT) or path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            found += unexplained_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    # was: 335 outside the CLI; 282 moved to the top, the rest marked (optional extras, the facts'
    # fast path without polars, the dashboards' background warm-up, a backend's client)
    assert found == []


def test_the_finder_sees_a_hidden_import_and_accepts_a_reason():
    source = '''
import json

def hidden():
    from decimal import Decimal
    return Decimal(1)

def optional_extra():
    import openpyxl  # lazy: optional extra gpuledger[reports]
    # lazy: the fast path reads no polars
    import polars as pl
    try:
        import pynvml
    except ImportError:
        pynvml = None
    return openpyxl, pl, pynvml

class Node:
    def method(self):
        import yaml
        return yaml

if True:
    import os  # module level: no reason needed
'''
    assert unexplained_imports(source, "m.py") == ["m.py:5: from decimal import Decimal", "m.py:20: import yaml"]


def test_a_marker_must_give_a_reason():
    source = "def f():\n    import yaml  # lazy:\n    return yaml\n"
    assert unexplained_imports(source, "m.py") == ["m.py:2: import yaml"]
