"""The /what-if page (issue 13 §1) in AppTest: on a result file written by the real
`gpuledger whatif schedule --format json --out` over the dashboards' small simulated warehouse (16 GPUs × 2 days,
tests/helpers/dashboard_rig.py), the figures it shows equal `frames_from_json` of that file; a
sweep file draws the sweep chart; without a file it says what to run."""

from __future__ import annotations

import json

import polars as pl
import pytest
import streamlit as st
from gpuledger.dashboards import queries
from streamlit.testing.v1 import AppTest

from gpuledger.whatif.compare import frames_from_json
from tests.helpers.dashboard_rig import APP, run_cli


def charts_drawn(at) -> int:
    """Charts on the page: ui.chart's SVGs (drawn on the server; no Vega element)."""
    assert not at.get("vega_lite_chart")
    return sum(c.proto.component_name == "gpuledger_chart" and '"<svg ' in c.proto.json for c in at.get("bidi_component"))


@pytest.fixture(autouse=True)
def fresh_cache():
    st.cache_data.clear()  # process-global across AppTest instances
    yield
    st.cache_data.clear()


@pytest.fixture(scope="module")
def whatif_files(dashboard_warehouse, tmp_path_factory):
    """A folder with the default run's file (and an older non-what-if JSON that the page skips),
    and a folder with a sweep's file."""
    folder = tmp_path_factory.mktemp("whatif")
    (folder / "zz-other.json").write_text('{"format": "something else"}')
    run_cli(dashboard_warehouse, "whatif", "schedule", "--format", "json", "--out", str(folder / "schedule.json"), "--no-progress")
    sweeps = tmp_path_factory.mktemp("whatif-sweep")
    run_cli(dashboard_warehouse, "whatif", "schedule", "--policies", "reclaim", "--sweep",
            "idle_threshold_ratio=0.01,0.2", "--format", "json", "--out", str(sweeps / "sweep.json"), "--no-progress")
    return folder, sweeps


def open_page(rig, monkeypatch, folder) -> AppTest:
    monkeypatch.setenv("GPULEDGER_WAREHOUSE", str(rig.warehouse))
    monkeypatch.setenv("GPULEDGER_CONFIG", str(rig.config))
    monkeypatch.setenv("GPULEDGER_WHATIF_DIR", str(folder))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("app_pages/what_if.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.title[0].value == "What-if"
    return at


@pytest.mark.slow
def test_the_page_shows_the_files_figures(dashboard_warehouse, whatif_files, monkeypatch):
    folder, _ = whatif_files
    # the newest what-if file, not the newer-named JSON of another format
    assert queries.newest_whatif(folder) == folder / "schedule.json"
    at = open_page(dashboard_warehouse, monkeypatch, folder)
    frames = frames_from_json((folder / "schedule.json").read_text())
    frames["titles"] = {p["policy"]: p["title"] for p in json.loads((folder / "schedule.json").read_text())["policies"]}
    summary = {row["metric"]: row for row in frames["summary"].iter_rows(named=True)}
    policies = [c for c in frames["summary"].columns if c not in ("metric", "label")]
    assert policies == ["priority", "slot-limits", "fair-share", "reclaim", "quick-lane"]
    # two figures per policy, in the policies' order: worst project, occupancy
    shown = [(m.label, m.value) for m in at.metric]
    assert [label for label, _ in shown] == ["worst project", "occupancy"] * len(policies)
    for i, policy in enumerate(policies):
        worst = float(summary["worst_delivery_ratio"][policy])
        occupancy = float(summary["occupancy_ratio"][policy])
        assert shown[2 * i][1] == f"{100 * worst:.1f} %"
        assert shown[2 * i + 1][1] == f"{100 * occupancy:.1f} %"
        # the worst shown is the worst project's ratio in the projects frame
        assert worst == pytest.approx(frames["projects"][f"{policy}_delivery_ratio"].min(), abs=5e-4)
    # first the outcome table (issue 34): a row per figure, the target, a column per policy's title;
    # one seed here, so each cell is the value alone, as the file has it
    shown_outcome = pl.from_pandas(at.dataframe[0].value.reset_index(drop=True))
    doc = json.loads((folder / "schedule.json").read_text())["outcome"]
    assert doc["seeds"] == [1]
    assert shown_outcome["label"].to_list() == [r["label"] for r in doc["rows"]]
    assert shown_outcome.columns == ["label", "target", *(frames["titles"][p] for p in policies)]
    aggregate = next(r for r in doc["rows"] if r["figure"] == "delivery_ratio")
    row = shown_outcome.filter(pl.col("label") == "aggregate delivered ÷ owed").row(0, named=True)
    for policy in policies:
        assert row[frames["titles"][policy]] == f"{aggregate[policy]['median']:.3f}"
    assert any("one seed (1)" in c.value for c in at.caption)
    table = pl.from_pandas(at.dataframe[1].value.reset_index(drop=True))
    assert table["label"].to_list() == frames["summary"]["label"].to_list()  # every figure, with its unit
    assert table.width == 1 + len(policies)
    delivery = pl.from_pandas(at.dataframe[2].value.reset_index(drop=True))
    for policy, title in zip(policies, table.columns[1:], strict=True):
        mine = delivery.filter(pl.col("policy") == title).sort("project")
        want = frames["projects"].sort("project")
        assert mine["project"].to_list() == want["project"].to_list()
        assert mine["delivery_ratio"].to_list() == pytest.approx(want[f"{policy}_delivery_ratio"].to_list())
    assert charts_drawn(at) == 2  # delivery and waits; no sweep in this file
    captions = " ".join(c.value for c in at.caption)
    assert "delivered" in captions and "90th percentile" in captions


@pytest.mark.slow
def test_a_sweep_file_draws_the_sweep(dashboard_warehouse, whatif_files, monkeypatch):
    _, sweeps = whatif_files
    at = open_page(dashboard_warehouse, monkeypatch, sweeps)
    frames = frames_from_json((sweeps / "sweep.json").read_text())
    assert frames["sweep"].height == 2
    assert charts_drawn(at) == 3
    assert any("idle_threshold_ratio" in s.value for s in at.subheader)
    # the file ran one policy: its two figures alone, named in their help
    assert [m.label for m in at.metric] == ["worst project", "occupancy"]
    assert all(m.help.startswith("reclaim: ") for m in at.metric)


def test_without_a_file_it_says_what_to_run(dashboard_warehouse, tmp_path, monkeypatch):
    at = open_page(dashboard_warehouse, monkeypatch, tmp_path / "none-here")
    assert not at.metric
    assert any("gpuledger whatif schedule --format json --out reports/whatif/schedule.json" in i.value for i in at.info)
