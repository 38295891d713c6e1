"""The warehouse connects through DuckDB's engine module without the package's Python layer (a
lighter process start); the connection methods that layer adds (``sql``, ``query``, ``table`` ...)
still work on every path, loading the package at their first use."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from gpuledger.warehouse.engine import duckdb
con = duckdb.connect()
print("before", "duckdb" in sys.modules)
print("answer", con.sql("SELECT 6 * 7 AS x").fetchall())
print("after", "duckdb" in sys.modules)
print("again", con.query("SELECT 1").fetchall())
"""


def test_a_connection_without_the_package_still_answers_sql_and_loads_the_package_then():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == ["before False", "answer [(42,)]", "after True", "again [(1,)]"]
