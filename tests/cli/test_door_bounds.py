"""Numeric options and times are range-checked before any work starts: one line naming the option
and its limit, exit 2, no warehouse file made. Real subprocesses, run a few at a time."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuledger.errors import UsageError
from gpuledger.whatif.trace import inventory_from_file

CASES = [  # (id, arguments, words the one line must hold)
    ("seed-negative", ["simulate", "warehouse", "--gpus", "16", "--days", "0.01", "--seed", "-1"], ["--seed", "0"]),
    ("keep-days-inf", ["warehouse", "prune", "--keep-days", "inf"], ["--keep-days", "36500"]),
    ("keep-days-1e12", ["warehouse", "prune", "--keep-days", "1e12"], ["--keep-days", "36500"]),
    ("spot-rate-1e9", ["whatif", "procurement", "--spot-interruptions-per-hour", "1e9"],
     ["--spot-interruptions-per-hour", "60"]),
    ("policies-empty", ["whatif", "schedule", "--policies", ""], ["--policies", "give at least one of"]),
    ("start-year-1", ["ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start", "0001-01-01",
                      "--end", "2026-01-01"], ["--start", "from 1970-01-01 to before 9999-12-01"]),
    ("end-year-9999", ["ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start", "2026-01-01",
                       "--end", "9999-12-31"], ["--end", "from 1970-01-01"]),
    ("epoch-1e30", ["ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start", "1e30", "--end", "1"],
     ["--start"]),
    ("period-9999-12", ["period", "close", "9999-12"], ["9999-12", "1970-01 to 9999-11"]),
    ("outbox-unknown-status", ["alerts", "outbox", "--status", "sending"], ["--status", "pending, sent or failed"]),
    ("quarantine-limit-huge", ["quarantine", "--limit", str(10**30)], ["--limit"]),
    ("scrape-timeout-huge", ["ingest", "scrape", "http://127.0.0.1:9/metrics", "--timeout", "1e12"], ["--timeout"]),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bounds")

    def run(case):
        name, args, _ = case
        warehouse_file = folder / f"{name}.duckdb"
        done = subprocess.run([sys.executable, "-m", "gpuledger.cli", *args, "-w", str(warehouse_file)],
                              cwd=folder, capture_output=True, text=True, timeout=120, check=False,
                              env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        return name, (done.returncode, done.stderr, warehouse_file.exists())

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(run, CASES))


@pytest.mark.parametrize("name,args,says", CASES, ids=[c[0] for c in CASES])
def test_an_option_out_of_range_is_one_line_exit_2_before_any_work(corpus, name, args, says):
    code, stderr, made_warehouse = corpus[name]
    assert code == 2, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    words = " ".join(stderr.split())
    assert all(w in words for w in says), stderr
    if name != "period-9999-12":  # (period close opens the warehouse before reading the month)
        assert not made_warehouse, name


def test_a_binary_inventory_file_is_a_usage_error(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(UsageError, match="not a text file"):
        inventory_from_file(path)
