"""The config is never replaced behind the user's back (issue 8, item 6), through the real CLI.

Today an import without --config, run in a folder without gpuledger.yaml, loads the packaged
example over the warehouse's config: the custom H100 price 9.99 becomes 2.10 and the project
"zeta" vanishes (its job is quarantined). Here the warehouse keeps the config it was loaded from,
commands use it, and only `config load` replaces it, printing what changed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import duckdb
import pytest

from gpuledger.config_files import example_config_text

CSV = "job_id,cluster,project,user,gpu_model,gpus,start_time,end_time\nz-1,c1,zeta,ann,H100,1,2026-10-01T00:00:00Z,2026-10-01T04:00:00Z\n"


def _custom(price: str = "9.99", zeta: bool = True, pretrain_budget: str = "102000") -> str:
    text = example_config_text().replace('price_per_gpu_hour: "2.10"', f'price_per_gpu_hour: "{price}"')
    text = text.replace("{node: llm-pretrain, period: 2026-11, gpu_hours: 102000}",
                        f"{{node: llm-pretrain, period: 2026-11, gpu_hours: {pretrain_budget}}}")
    if zeta:
        text = text.replace("- {name: ci-evals, shares: 40}", "- {name: ci-evals, shares: 40}\n        - {name: zeta, shares: 10}")
    return text


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GPULEDGER_CONFIG", "GPULEDGER_WAREHOUSE")}
    env["GPULEDGER_WAREHOUSE"] = str(tmp_path / "w.duckdb")
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _query(tmp_path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_import_without_config_keeps_the_stored_config_and_only_config_load_replaces_it(tmp_path):
    (tmp_path / "custom.yaml").write_text(_custom())
    (tmp_path / "jobs.csv").write_text(CSV)
    loaded = _run(tmp_path, "config", "load", "--config", "custom.yaml", "--by", "finance-bot")
    assert loaded.returncode == 0, loaded.stderr
    assert "loaded as config version 1" in loaded.stdout and "first config: 17 org nodes" in loaded.stdout

    # No --config, no ./gpuledger.yaml: the stored config is used, not the packaged example.
    imported = _run(tmp_path, "ingest", "jobs-csv", "jobs.csv")
    assert imported.returncode == 0, imported.stderr
    assert "1 jobs imported, 0 quarantined" in imported.stderr
    assert _query(tmp_path, "SELECT price_per_gpu_hour::VARCHAR FROM rate_card "
                            "WHERE gpu_model = 'H100' AND tier = 'reserved'") == [("9.990000",)]
    assert _query(tmp_path, "SELECT count(*) FROM org_nodes WHERE node = 'zeta'") == [(1,)]
    assert _query(tmp_path, "SELECT count(*) FROM quarantine") == [(0,)]
    assert _query(tmp_path, "SELECT version, source_path, loaded_by FROM config_versions") == [
        (1, "custom.yaml", "finance-bot")]

    # An explicit, different --config is refused in one line that names the fix.
    (tmp_path / "example.yaml").write_text(example_config_text())
    refused = _run(tmp_path, "ingest", "jobs-csv", "jobs.csv", "--config", "example.yaml")
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "differs from the warehouse's config version 1" in lines[0]
    assert "gpuledger config load --config example.yaml" in lines[0]

    # config load of a changed file: a new version, and it says what changed.
    (tmp_path / "custom.yaml").write_text(_custom(price="8.00", zeta=False, pretrain_budget="50000"))
    changed = _run(tmp_path, "config", "load", "--config", "custom.yaml")
    assert changed.returncode == 0, changed.stderr
    out = " ".join(changed.stdout.split())
    assert "loaded as config version 2" in out
    assert "price changed: H100/reserved from 2026-01-01 9.99 USD -> 8.00 USD" in out
    assert "node removed: zeta" in out
    assert "budget changed: llm-pretrain 2026-11-01: 102000 h -> 50000 h" in out
    again = _run(tmp_path, "config", "load", "--config", "custom.yaml")
    assert "unchanged" in again.stdout
    assert _query(tmp_path, "SELECT count(*) FROM config_versions") == [(2,)]
    assert [r[0] for r in _query(tmp_path, "SELECT action FROM ledger_audit ORDER BY acted_at")] == [
        "config-load", "config-load"]


@pytest.mark.slow
def test_first_use_of_an_empty_warehouse_loads_the_example_and_says_so(tmp_path):
    (tmp_path / "jobs.csv").write_text(CSV.replace("zeta", "notebooks"))
    first = _run(tmp_path, "ingest", "jobs-csv", "jobs.csv")
    assert first.returncode == 0, first.stderr
    assert "the warehouse had no config: loaded" in first.stderr and "(the packaged example config)" in first.stderr
    assert _query(tmp_path, "SELECT version FROM config_versions") == [(1,)]


@pytest.mark.slow
def test_closing_a_month_that_is_not_over_is_one_line_naming_when(tmp_path):
    (tmp_path / "jobs.csv").write_text(CSV.replace("zeta", "notebooks"))
    assert _run(tmp_path, "ingest", "jobs-csv", "jobs.csv").returncode == 0
    refused = _run(tmp_path, "period", "close", "2099-01")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "gpuledger: period 2099-01 is not over (it ends 2099-02-01 00:00 UTC); close it after that"]
    provisional = _run(tmp_path, "period", "close", "2026-10")  # the data ends on Oct 1, 04:00
    assert provisional.returncode == 2 and "statement is provisional" in provisional.stderr
    (tmp_path / "nov.csv").write_text(CSV.replace("zeta", "notebooks").replace("z-1", "z-2")
                                      .replace("2026-10-01", "2026-11-02"))
    assert _run(tmp_path, "ingest", "jobs-csv", "nov.csv").returncode == 0
    closed = _run(tmp_path, "period", "close", "2026-10", "--by", "alice")
    assert closed.returncode == 0, closed.stderr
    # 4 h of H100 on a cluster without inventory at the example's reserved 2.10: 8.40
    assert "period 2026-10 closed" in closed.stdout and "USD 8.40" in closed.stdout
    listed = _run(tmp_path, "period", "list")
    assert "2026-10" in listed.stdout and "alice" in listed.stdout
    report = _run(tmp_path, "report", "chargeback", "--period", "2026-10", "--format", "csv")
    assert report.returncode == 0, report.stderr
    assert "revision" in report.stdout.splitlines()[0] and ",8.40," in report.stdout
