"""The month's statement benchmark (benchmarks/month_statement_bench.py) on a small simulated month:
every step runs as its own process under /usr/bin/time -v and reports wall, CPU and peak RSS; the
closed month is read back with the open month's total."""

from __future__ import annotations

import json
import shutil
from datetime import datetime

import pytest

from benchmarks import month_statement_bench
from gpuledger import warehouse
from gpuledger.simulator import build_cluster
from gpuledger.simulator.to_warehouse import write_simulation


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("/usr/bin/time") is None, reason="needs GNU time at /usr/bin/time")
def test_the_month_is_read_open_closed_and_through_the_page(tmp_path):
    path = tmp_path / "month.duckdb"
    sim = build_cluster(seed=5, gpus=8, start=datetime(2026, 11, 1), days=2, interval_s=300)
    with warehouse.open_writer(path) as con:
        write_simulation(con, sim)
    out = tmp_path / "bench" / "month.json"
    # two days of November: the month closes only provisionally
    month_statement_bench.main(["--warehouse", str(path), "--period", "2026-11", "--close", "--provisional",
                                "--json", str(out)])
    res = json.loads(out.read_text())
    assert list(res["steps"]) == ["report statement (open)", "chargeback page statement (open)", "period close",
                                  "report statement (closed)", "chargeback page statement (closed)"]
    for name, step in res["steps"].items():
        assert step["wall_s"] > 0 and step["cpu_s"] > 0 and step["peak_rss_mib"] > 50, name
    assert res["steps"]["report statement (open)"]["files"] >= 5  # CSV, Parquet, XLSX, HTML, FOCUS at least
    assert "reconciles to the cent" in res["steps"]["report statement (closed)"]["output"]
    assert res["closed_total_equals_open"] is True
    assert "closed" in res["steps"]["chargeback page statement (closed)"]["output"]
    with warehouse.open_reader(path) as con:
        assert con.execute("SELECT count(*) FROM statement_revisions WHERE period = '2026-11'").fetchall()[0][0] == 1
