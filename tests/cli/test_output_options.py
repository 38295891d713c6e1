"""One spelling of output everywhere: every command that prints a table takes `--format
table|csv|json|parquet` and `--out FILE` (issue 22 §4)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli.test_help import _declared_options

TABLE_COMMANDS = [
    "report usage", "report utilization", "report chargeback", "report fairshare", "report budget",
    "report squatters", "warehouse summary", "warehouse quarantine", "warehouse disk", "alerts outbox",
    "config versions", "period list", "period audit", "enforce plan", "enforce preemptions",
    "whatif schedule", "whatif procurement",
]


@pytest.mark.parametrize("command", TABLE_COMMANDS)
def test_every_table_command_takes_format_and_out(command):
    assert {"--format", "--out"} <= _declared_options(command.split())


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_the_small_tables_write_json_csv_and_parquet(tmp_path):
    import polars as pl

    wh = str(tmp_path / "w.duckdb")
    assert _run("warehouse", "migrate", "-w", wh).returncode == 0
    jobs = tmp_path / "jobs.csv"  # one bad row: one quarantined line to list
    jobs.write_text("job_id,cluster,project,user,gpu_model,gpus,start_time,end_time\n"
                    "j1,c1,nowhere,ada,H100,-1,2026-11-01T00:00:00,2026-11-01T01:00:00\n")
    assert _run("ingest", "jobs-csv", str(jobs), "-w", wh).returncode == 0
    shown = _run("warehouse", "quarantine", "--format", "json", "-w", wh)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert len(rows) == 1 and rows[0]["source"] == "jobs-csv" and rows[0]["location"].endswith(":2")
    listed = _run("config", "versions", "--format", "csv", "-w", wh)
    assert listed.returncode == 0 and listed.stdout.splitlines()[0].startswith("version,sha256,"), listed.stderr
    target = tmp_path / "disk.parquet"
    written = _run("warehouse", "disk", "--format", "parquet", "--out", str(target), "-w", wh)
    assert written.returncode == 0, written.stderr
    disk = pl.read_parquet(target)
    assert disk.columns == ["table", "rows", "disk_mib"] and "quarantine" in disk["table"].to_list()
    refused = _run("period", "list", "--format", "parquet", "-w", wh)  # parquet is a file: it needs --out
    assert refused.returncode == 2 and "parquet needs --out FILE" in refused.stderr
