"""The import layers (issue 22 §1–2): the rules kernel sits below everything and imports nothing of
gpuledger above it; each package imports cleanly on its own in a fresh interpreter.

A small AST walk over the source folders, every import counted (function-level ones too: a cycle
hidden inside a function is still a cycle). grimp would be the library for it, but it finds a
package's modules on disk under the package's folder and so misses the folders pyproject maps
into ``gpuledger`` (``warehouse/``, ``enforce/``, ``pipelines/``, ``dashboards/``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"gpuledger": "gpuledger", "warehouse": "gpuledger.warehouse", "enforce": "gpuledger.enforce",
           "pipelines": "gpuledger.pipelines", "dashboards": "gpuledger.dashboards"}


@cache
def module_imports() -> dict[str, set[str]]:
    """module -> the gpuledger modules (or packages) it imports anywhere in its body."""
    out: dict[str, set[str]] = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if folder == "gpuledger" and parts and parts[0] in {"warehouse", "enforce", "pipelines", "dashboards"}:
                continue
            name = ".".join([package, *parts])
            is_pkg = path.name == "__init__.py"
            found: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found |= {a.name for a in node.names if a.name.startswith("gpuledger")}
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = name.split(".") if is_pkg else name.split(".")[:-1]
                        base = base[: len(base) - node.level + 1]
                        target = ".".join(base + ([node.module] if node.module else []))
                    else:
                        target = node.module or ""
                    if target.startswith("gpuledger"):
                        found.add(target)
                        found |= {f"{target}.{a.name}" for a in node.names}
            out[name] = found
    return out


def _resolved(target: str, modules: set[str]) -> str | None:
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def imports_of(prefix: str) -> dict[str, set[str]]:
    graph = module_imports()
    modules = set(graph)
    return {m: {r for t in deps if (r := _resolved(t, modules))} for m, deps in graph.items()
            if m == prefix or m.startswith(prefix + ".")}


def test_the_walk_sees_every_folder():
    modules = set(module_imports())
    for package in FOLDERS.values():
        assert package in modules
    assert "gpuledger.rules.clock" in modules and "gpuledger.warehouse.db" in modules


def test_rules_import_nothing_above_them():
    allowed = ("gpuledger.rules", "gpuledger.errors")
    above = {m: sorted(d for d in deps if not d.startswith(allowed) and d != "gpuledger")
             for m, deps in imports_of("gpuledger.rules").items()}
    assert {m: d for m, d in above.items() if d} == {}


@pytest.mark.parametrize("module", ["gpuledger.rules.clock", "gpuledger.rules.hosts", "gpuledger.rules.mig",
                                    "gpuledger.rules.model_keys", "gpuledger.rules.activity",
                                    "gpuledger.rules.billing", "gpuledger.rules.periods", "gpuledger.rules.money"])
def test_each_rule_imports_alone(module):
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
