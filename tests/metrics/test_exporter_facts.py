"""The exporter reads the facts as of the data's now through gpuledger.facts, as `gpuledger report`
does (issue 40): right after `config load` changes a share, its gauges are the CLI's figures under
the new config, not the stored snapshot's. The page's version of this test:
tests/dashboards/test_pages.py::test_the_fair_share_page_and_the_cli_agree_right_after_config_load.
Rig: tests/helpers/dashboard_rig.py (a simulated warehouse, the pipelines run once)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import yaml

from gpuledger import warehouse
from gpuledger.metrics.exporter import compute_figures
from tests.helpers.dashboard_rig import run_cli


def _rows(done) -> list[dict]:
    answer = json.loads(done.stdout)
    return answer["rows"] if isinstance(answer, dict) else answer


@pytest.mark.slow
def test_the_exporter_and_report_fairshare_agree_right_after_config_load(dashboard_warehouse, tmp_path):
    """`config load` moves research's shares from 60 to 20 (programs research / product / platform:
    60 / 30 / 10 of 100 -> 20 / 30 / 10 of 60), so research's share among its siblings goes from 0.6
    to 1/3 and its fair-share factor moves; llm-pretrain's November budget 102,000 -> 51,000
    normalised GPU-hours. The pipelines have not run since: the stored snapshot still holds the old
    tree. The exporter's fair-share factor, rank and delivery ratio per node are `report fairshare`'s,
    its remaining budget `report budget`'s (GPU-seconds = GPU-hours x 3600)."""
    rig = dataclasses.replace(dashboard_warehouse, warehouse=tmp_path / "w.duckdb", config=tmp_path / "changed.yaml")
    shutil.copyfile(dashboard_warehouse.warehouse, rig.warehouse)
    raw = yaml.safe_load(dashboard_warehouse.config.read_text())
    research = next(c for c in raw["org"]["children"] if c["name"] == "research")
    assert research["shares"] == 60
    research["shares"] = 20
    pretrain = next(b for b in raw["budgets"] if b["node"] == "llm-pretrain" and b["period"] == "2026-11")
    assert pretrain["gpu_hours"] == 102000
    pretrain["gpu_hours"] = 51000
    rig.config.write_text(yaml.safe_dump(raw, sort_keys=False))
    with warehouse.open_reader(rig.warehouse) as con:
        before = dict(con.execute("SELECT node, fairshare_factor FROM fairshare_snapshots WHERE as_of = "
                                  "(SELECT max(as_of) FROM fairshare_snapshots)").fetchall())
    run_cli(rig, "config", "load")

    cli = {r["node"]: r for r in _rows(run_cli(rig, "report", "fairshare", "--format", "json", stored_config=True))}
    budget = _rows(run_cli(rig, "report", "budget", "--format", "json", stored_config=True))
    figures = {name: {labels.get("node"): value for labels, value in series}
               for name, _, series in compute_figures(rig.warehouse)}

    def known(column: str) -> dict[str, float]:  # the exporter leaves out a node without the figure
        return {node: r[column] for node, r in cli.items() if r[column] is not None}

    exported = figures["gpuledger_fairshare_factor"]
    assert exported == pytest.approx(known("fairshare_factor")) and "llm-pretrain" in exported
    # research's projects moved: the stored snapshot's factor is not the answer any more
    assert exported["llm-pretrain"] != pytest.approx(before["llm-pretrain"], abs=1e-6)
    assert figures["gpuledger_fairshare_rank"] == pytest.approx(known("fs_rank"))
    assert figures["gpuledger_delivery_ratio"] == pytest.approx(known("delivery_ratio"))
    mine = [r for r in budget if r["node"] == "llm-pretrain"]
    assert [r["budget_gpu_hours"] for r in mine] == [51000.0]
    assert figures["gpuledger_budget_remaining_gpu_seconds"]["llm-pretrain"] == pytest.approx(
        mine[0]["remaining_gpu_hours"] * 3600.0)
