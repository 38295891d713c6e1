"""Every benchmark script's imports of gpuledger resolve. Benchmarks run only under `make bench`
(hours, not the test suite), so a module moved or renamed breaks one silently until then:
benchmarks/freshness_bench.py imported `gpuledger.warehouse.read_model.facts` long after it moved."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _gpuledger_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of each `import gpuledger...` / `from gpuledger... import name`,
    top-level or inside a function (where the heavy ones are)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpuledger":
            out += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "gpuledger"]
    return out


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package missing
        return False


def _resolves(module: str, name: str | None) -> bool:
    if not _found(module):
        return False
    return name is None or hasattr(importlib.import_module(module), name) or _found(f"{module}.{name}")


@pytest.mark.parametrize("script", sorted(BENCHMARKS.glob("*.py")), ids=lambda p: p.name)
def test_a_benchmarks_gpuledger_imports_resolve(script):
    missing = [f"{script.name}:{line}: {module}{'.' + name if name else ''}"
               for line, module, name in _gpuledger_imports(script) if not _resolves(module, name)]
    assert not missing, "imports that no longer resolve:\n" + "\n".join(missing)


def test_the_check_sees_a_moved_module(tmp_path):
    # the check itself can fail: the import freshness_bench.py had
    bad = tmp_path / "b.py"
    bad.write_text("def f():\n    from gpuledger.warehouse.read_model.facts import data_now\n")
    (line, module, name), = _gpuledger_imports(bad)
    assert (line, module, name) == (2, "gpuledger.warehouse.read_model.facts", "data_now")
    assert not _resolves(module, name)
    assert _resolves("gpuledger.warehouse.clock", "data_now")
