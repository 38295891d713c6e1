"""`--help` of every command loads no heavy library (issue 7 §4): polars, DuckDB, numpy, pyarrow,
the Kubernetes client, Dagster and Streamlit load only when a command really runs. Timing lives in
benchmarks/cli_startup_bench.py; this test checks the cause (what is imported), which is exact."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("polars", "duckdb", "numpy", "pyarrow", "kubernetes", "dagster", "streamlit", "pydantic_core")

# Runs every command's --help in ONE interpreter per command path (a fresh one each, so one
# command's imports cannot hide another's) and prints the heavy modules it loaded.
RUN_HELP = """
from gpuledger.cli import main
sys.argv = ["gpuledger", *{path!r}, "--help"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main()
    except SystemExit:
        pass
"""
PROBE = """
import contextlib, io, json, sys
""" + RUN_HELP + """
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def _command_paths() -> list[list[str]]:
    from tests.helpers.command_tree import command_paths

    return command_paths()


def test_every_command_path_is_found():
    paths = {" ".join(p) for p in _command_paths()}
    # a sample from each family, so a walk that finds nothing cannot pass the test below
    assert {"report chargeback", "ingest prometheus", "ingest kubernetes", "ingest jobs-csv",
            "simulate warehouse", "ingest agent nvml", "report fairshare"} <= paths


@pytest.mark.slow
def test_help_loads_no_heavy_library():
    loaded = {}
    for path in _command_paths():
        out = subprocess.run([sys.executable, "-c", PROBE.format(path=path, heavy=HEAVY)],
                             capture_output=True, text=True, check=True).stdout
        heavy = json.loads(out.strip().splitlines()[-1])
        if heavy:
            loaded[" ".join(path) or "(top level)"] = heavy
    assert loaded == {}


# Runs one command path's --help and prints the names of the commands typer built (its
# get_command_from_info, counted as it runs: the real function does the work).
BUILT = """
import contextlib, io, json, sys
import typer.main
built = []
real = typer.main.get_command_from_info
def counted(info, **kwargs):
    built.append(info.name or typer.main.get_command_name(info.callback.__name__))
    return real(info, **kwargs)
typer.main.get_command_from_info = counted
""" + RUN_HELP + """
print(json.dumps(built))
"""


@pytest.mark.parametrize("path", [["report", "squatters"], ["report", "usage"], ["enforce", "plan"]])
def test_a_command_builds_itself_not_its_group(path):
    # issue 41: typer reads every parameter of every command it builds (~1 ms each); the report
    # group has more than ten, and the plain-help pass over the group once built them all
    out = subprocess.run([sys.executable, "-c", BUILT.format(path=path)], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [path[-1]]


CHECK = """
import contextlib, io, json, sys
from gpuledger.cli import main
sys.argv = ["gpuledger", "config", "check", "-c", {config!r}]
out, code = io.StringIO(), None
with contextlib.redirect_stdout(out):
    try:
        main()
    except SystemExit as exit:
        code = exit.code
print(json.dumps([code, sorted(m for m in {heavy!r} if m in sys.modules), out.getvalue()]))
"""


def test_config_check_validates_without_polars_or_duckdb(tmp_path):
    # `config check` is pydantic on a YAML file: the frames the config can build (org, budgets, rate
    # card) and the squatting ladder's polars expression load polars only when used (median 0.49 s a check
    # here instead of 0.67 s, BENCHMARKS.md "CLI start-up")
    from gpuledger.config import example_config_text

    config = tmp_path / "gpuledger.yaml"
    config.write_text(example_config_text())
    out = subprocess.run([sys.executable, "-c", CHECK.format(config=str(config), heavy=HEAVY)],
                         capture_output=True, text=True, check=True).stdout
    code, heavy, said = json.loads(out.strip().splitlines()[-1])
    assert code in (0, None) and ": ok" in said, (code, said)
    assert not {"polars", "duckdb", "numpy", "pyarrow"} & set(heavy), heavy
