"""The import layers (issue 22 §1–2): the rules kernel sits below everything and imports nothing of
gpuledger above it; each package imports cleanly on its own in a fresh interpreter.

A small AST walk over the source folders, every import counted (function-level ones too: a cycle
hidden inside a function is still a cycle; and ``lazy_import("gpuledger....")``, gpuledger/lazy.py,
is an import like any other). grimp would be the library for it, but it finds a
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
def module_imports() -> dict[str, set[tuple[str, tuple[str, ...]]]]:
    """module -> what it imports anywhere in its body: (module, names imported from it)."""
    out: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if folder == "gpuledger" and parts and parts[0] in {"warehouse", "enforce", "pipelines", "dashboards"}:
                continue
            name = ".".join([package, *parts])
            is_pkg = path.name == "__init__.py"
            found: set[tuple[str, tuple[str, ...]]] = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (lazy := _lazy_target(node)) is not None:
                    found.add((lazy, ()))
                elif isinstance(node, ast.Import):
                    found |= {(a.name, ()) for a in node.names if a.name.startswith("gpuledger")}
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = name.split(".") if is_pkg else name.split(".")[:-1]
                        base = base[: len(base) - node.level + 1]
                        target = ".".join(base + ([node.module] if node.module else []))
                    else:
                        target = node.module or ""
                    if target.startswith("gpuledger"):
                        found.add((target, tuple(a.name for a in node.names)))
            out[name] = found
    return out


def _lazy_target(node: ast.AST) -> str | None:
    """The module a ``lazy_import("gpuledger....")`` call loads (gpuledger/lazy.py), else None."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
    name = node.args[0].value
    return name if func == "lazy_import" and isinstance(name, str) and name.startswith("gpuledger") else None


def _resolved(target: str, modules: set[str]) -> str | None:
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def imports_of(prefix: str) -> dict[str, set[str]]:
    """module -> the gpuledger modules it imports (``from package import submodule`` is the
    submodule, not the package)."""
    graph = module_imports()
    modules = set(graph)
    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        if m == prefix or m.startswith(prefix + "."):
            got = set()
            for target, names in deps:
                subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
                if len(subs) < len(names) or not names:
                    got.add(_resolved(target, modules))
                got |= set(subs)
            out[m] = {d for d in got if d and d != m}
    return out


# Low to high: a module may import its own layer and the layers below, never one above.
LAYERS = [
    {"gpuledger", "gpuledger.errors", "gpuledger.lazy", "gpuledger.deadlines", "gpuledger.extras",
     "gpuledger.config_files", "gpuledger.data",
     "gpuledger.stopping", "gpuledger.pipeline_jobs", "gpuledger.heap"},
    {"gpuledger.rules"},
    {"gpuledger.config", "gpuledger.sql"},
    {"gpuledger.config_store", "gpuledger.warehouse"},
    {"gpuledger.ingest"},
    # where alerts and finance statements are delivered: below both alerts and reports, which share it
    {"gpuledger.channels"},
    {"gpuledger.analytics"},
    {"gpuledger.ledger"},
    {"gpuledger.reports", "gpuledger.simulator"},
    # the facts as of T: the one way every surface reads fair share, budgets, usage, findings, statements
    {"gpuledger.facts"},
    # the surfaces, each reading through facts
    {"gpuledger.enforce", "gpuledger.metrics"},
    {"gpuledger.alerts", "gpuledger.whatif"},
    {"gpuledger.pipelines", "gpuledger.dashboards", "gpuledger.cli"},
]
FACTS = "gpuledger.facts"
DOMAIN = {"gpuledger.analytics", "gpuledger.ledger", "gpuledger.reports"}
SURFACES = {"gpuledger.cli", "gpuledger.dashboards", "gpuledger.pipelines", "gpuledger.alerts", "gpuledger.enforce",
            "gpuledger.metrics"}
# arrows known to point up and not yet gone (was: analytics.reports -> read_model.facts for data_now,
# now in gpuledger.warehouse.clock below both; reports.weekly -> alerts.plan for the severity order,
# now gpuledger.rules.severity; reports.delivery -> alerts.channels, now gpuledger.channels)
KNOWN_UP: list[str] = []
# cycles known and not yet gone (was: exposition <-> exposition_bulk, now one package,
# gpuledger.ingest.metrics.exposition, whose modules import downwards only; reports.files ->
# showback -> weekly -> files, now through reports.table_files and rules.money below them)
KNOWN_CYCLES: list[set[str]] = []


def _area(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _layer(area: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if area in layer)


@pytest.mark.slow
def test_every_area_has_a_layer():
    assert {_area(m) for m in module_imports()} - set().union(*LAYERS) == set()


def test_no_import_points_up_a_layer():
    # was: analytics.queries -> ledger.periods (statement_report), ingest.tiers -> ledger.config_versions
    up = sorted(f"{m} -> {d}" for m, deps in imports_of("gpuledger").items() for d in deps
                if _layer(_area(d)) > _layer(_area(m)))
    assert [arrow for arrow in up if arrow not in KNOWN_UP] == []


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def area_imports() -> dict[str, set[str]]:
    """area -> the other areas its modules import (lazy edges included)."""
    out: dict[str, set[str]] = {}
    for m, deps in imports_of("gpuledger").items():
        out.setdefault(_area(m), set()).update(_area(d) for d in deps)
    return {area: deps - {area} for area, deps in out.items()}


def test_no_cycle_between_areas():
    # a circle at folder level hides inside one layer (was: reports -> alerts -> read_model -> reports,
    # the three on one layer): the area graph itself must have none
    assert _cycles(area_imports()) == []


def test_facts_is_one_layer_between_the_domain_and_every_surface():
    assert LAYERS[_layer(FACTS)] == {FACTS}
    assert all(_layer(area) < _layer(FACTS) for area in DOMAIN)
    assert all(_layer(area) > _layer(FACTS) for area in SURFACES)
    # and the facts read the domain: nothing of a surface
    assert area_imports()[FACTS] & SURFACES == set()


def test_the_warehouse_depends_only_on_errors_rules_config_and_sql():
    # storage only: the read model above it is gpuledger.facts (lazy is the import helper)
    allowed = {"gpuledger.errors", "gpuledger.rules", "gpuledger.config", "gpuledger.sql", "gpuledger.lazy"}
    assert area_imports()["gpuledger.warehouse"] - allowed == set()


def test_the_walk_counts_lazy_imports():
    # the report commands load the facts with lazy_import only (`gpuledger --help` needs no DuckDB)
    assert "gpuledger.facts" in imports_of("gpuledger.cli.report")["gpuledger.cli.report"]
    assert not any(t.startswith("gpuledger.facts") for t, names in module_imports()["gpuledger.cli.report"] if names)
    node = ast.parse('x = lazy_import("gpuledger.facts")').body[0].value
    assert _lazy_target(node) == "gpuledger.facts"
    assert _lazy_target(ast.parse('lazy_import("polars")').body[0].value) is None


QUERY_LAYER = "gpuledger.analytics.queries"


def surfaces_on_the_query_layer() -> list[str]:
    """Surface modules importing the analytics query layer (lazy edges included) instead of
    reading through gpuledger.facts."""
    return sorted(f"{m} -> {d}" for m, deps in imports_of("gpuledger").items() if _area(m) in SURFACES
                  for d in deps if d == QUERY_LAYER or d.startswith(QUERY_LAYER + "."))


def test_surfaces_read_through_facts_not_the_query_layer():
    # was: the exporter recomputed (fairshare/budget/squatters_report), the CLI took data_now,
    # funding_report and warehouse_summary there, the pipelines computed their snapshots there
    assert surfaces_on_the_query_layer() == []


def test_the_query_layer_finder_sees_a_lazy_edge(monkeypatch):
    graph = {"gpuledger.cli.x": {("gpuledger.analytics.queries", ())}, "gpuledger.analytics.queries": set(),
             "gpuledger.facts": {("gpuledger.analytics.queries", ())}}
    monkeypatch.setattr(sys.modules[__name__], "module_imports", lambda: graph)
    assert surfaces_on_the_query_layer() == ["gpuledger.cli.x -> gpuledger.analytics.queries"]


def test_no_import_cycles_even_inside_functions():
    # was: analytics.queries <-> ledger.periods, ingest.tiers <-> ledger.config_versions
    found = _cycles(imports_of("gpuledger"))
    assert [c for c in found if c not in KNOWN_CYCLES] == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


@pytest.mark.parametrize("package", sorted(set().union(*LAYERS) - {"gpuledger"}))
def test_each_area_imports_alone(package):
    # a fresh interpreter per area: an import that only works after some other module is loaded first
    # (the shape a cycle hidden in a function leaves behind) fails here
    done = subprocess.run([sys.executable, "-c", f"import {package}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_walk_sees_every_folder():
    modules = set(module_imports())
    for package in FOLDERS.values():
        assert package in modules
    assert "gpuledger.rules.clock" in modules and "gpuledger.warehouse.db" in modules


def test_rules_import_nothing_above_them():
    allowed = ("gpuledger.rules", "gpuledger.errors")
    above = {m: sorted(d for d in deps if not d.startswith(allowed))
             for m, deps in imports_of("gpuledger.rules").items()}
    assert {m: d for m, d in above.items() if d} == {}


@pytest.mark.parametrize("module", ["gpuledger.rules.clock", "gpuledger.rules.hosts", "gpuledger.rules.mig",
                                    "gpuledger.rules.model_keys", "gpuledger.rules.activity",
                                    "gpuledger.rules.billing", "gpuledger.rules.periods", "gpuledger.rules.money"])
def test_each_rule_imports_alone(module):
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


PROMETHEUS = "gpuledger.ingest.metrics.prometheus"


def test_the_prometheus_modules_talk_through_public_names():
    # issue 22 §5: one module's private name (_x) is its own; a sibling imports public names only
    private = sorted(f"{m} imports {target}.{n}" for m, deps in module_imports().items() if m.startswith(PROMETHEUS)
                     for target, names in deps if target.startswith(PROMETHEUS) and target != m
                     for n in names if n.startswith("_"))
    assert private == []


# A module's private names are its own (issue 22 §5); an exception would be listed here:
KNOWN_PRIVATE: list[str] = []


def private_imports() -> list[str]:
    return sorted(f"{m} imports {target}.{n}" for m, deps in module_imports().items()
                  for target, names in deps if target != m
                  for n in names if n.startswith("_") and not n.startswith("__"))


def test_no_module_imports_another_modules_private_name():
    # was: exposition_bulk imported exposition._K8S_SPELLINGS, reports.files workbook._one_currency,
    # showback and weekly files._rows, showback weekly._largest_remainder
    assert [arrow for arrow in private_imports() if arrow not in KNOWN_PRIVATE] == []


def test_the_private_import_finder_sees_one(monkeypatch):
    graph = {"gpuledger.a": {("gpuledger.b", ("_x", "y", "__version__"))}, "gpuledger.b": set()}
    monkeypatch.setattr(sys.modules[__name__], "module_imports", lambda: graph)
    assert private_imports() == ["gpuledger.a imports gpuledger.b._x"]
