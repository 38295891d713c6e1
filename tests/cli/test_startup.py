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
PROBE = """
import contextlib, io, json, sys
from gpuledger.cli import main
sys.argv = ["gpuledger", *{path!r}, "--help"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main()
    except SystemExit:
        pass
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
