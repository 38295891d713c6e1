"""One set of filters every page honours: under each sidebar filter (none, a cluster, one day, an
org node) each page's headline figures agree with the table drawn under them, in AppTest on the
dashboards' rig (two clusters). Plus the orders a reader relies on: queued jobs in queue order."""

from __future__ import annotations

from datetime import date

import polars as pl
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.helpers.dashboard_rig import APP

pytestmark = pytest.mark.slow  # ~20 page runs in AppTest

FILTERS = {"none": {}, "cluster": {"clusters": ["east"]}, "one day": {"period": (date(2026, 11, 2), date(2026, 11, 2))},
           "org node": {"node": "llm"}}


@pytest.fixture(scope="module", autouse=True)
def on_rig(dashboard_warehouse):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPULEDGER_WAREHOUSE", str(dashboard_warehouse.warehouse))
        mp.setenv("GPULEDGER_CONFIG", str(dashboard_warehouse.config))
        st.cache_data.clear()
        yield
        st.cache_data.clear()


@pytest.fixture(scope="module")
def apps():
    """One AppTest per filter set, its sidebar set once, kept across the pages (as a user clicks)."""
    return {}


def on(page: str, filters: dict, apps: dict) -> AppTest:
    key = repr(filters)
    at = apps.get(key)
    if at is None:
        at = apps[key] = AppTest.from_file(str(APP), default_timeout=120).run()
        at.switch_page(f"app_pages/{page}.py").run()
        for name, value in filters.items():
            widget = {"clusters": at.sidebar.multiselect, "period": at.sidebar.date_input,
                      "node": at.sidebar.selectbox}[name]
            widget(key=name).set_value(value).run()
    else:
        at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def number(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


def table(at: AppTest, key_column: str) -> pl.DataFrame:
    """The first table on the page that has ``key_column``."""
    for df in at.dataframe:
        frame = pl.from_pandas(df.value.reset_index(drop=True))
        if key_column in frame.columns:
            return frame
    raise AssertionError(f"no table with {key_column}")


@pytest.mark.parametrize("name", list(FILTERS))
def test_my_team_waste_equals_its_table_and_queue_is_in_order(name, apps):
    at = on("my_team", FILTERS[name], apps)
    at.selectbox(key="team_node").set_value("llm").run()
    figures = {m.label: m.value for m in at.metric}
    waste = table(at, "gpu_hours_idle")
    # the figure is the table's sum, under every filter (the cluster filter once left it whole)
    assert number(figures["Idle GPU-hours (waste)"]) == pytest.approx(round(waste["gpu_hours_idle"].sum(), 1), abs=0.051)
    queued = table(at, "queue_position")
    prio = queued["planned_priority"].fill_null(-(10**18)).to_list()
    assert prio == sorted(prio, reverse=True), "queued jobs must be in priority order"
    assert queued["queue_position"].to_list() == list(range(1, queued.height + 1))
    if name == "cluster":
        assert set(table(at, "job_id")["cluster"]) <= {"east"}


@pytest.mark.parametrize("name", list(FILTERS))
def test_squatters_figures_equal_their_table(name, apps):
    at = on("squatters", FILTERS[name], apps)
    figures = {m.label: m.value for m in at.metric}
    rows = table(at, "gpu_hours_idle") if at.dataframe else pl.DataFrame({"gpu_hours_idle": [], "cluster": []})
    assert int(number(figures["Open findings"])) == rows.height
    assert number(figures["Wasted"]) == pytest.approx(round(rows["gpu_hours_idle"].sum() or 0.0, 1), abs=0.051)
    if name == "cluster":
        assert set(rows["cluster"]) <= {"east"}


@pytest.mark.parametrize("name", list(FILTERS))
def test_enforcement_figures_count_its_rows(name, apps):
    at = on("enforcement", FILTERS[name], apps)
    figures = {m.label: m.value for m in at.metric}
    if not figures:
        return  # nothing in the period: the page says so
    rows = table(at, "action")
    shown = int(number(figures["Actions shown"]))
    assert rows.height == min(shown, 200)
    assert int(number(figures["Planned"])) + int(number(figures["Applied"])) <= shown
    if name == "cluster":
        assert set(rows["cluster"]) <= {"east"}
    if name == "org node":
        assert set(rows["project"]) <= {"llm-pretrain", "llm-posttrain"}


@pytest.mark.parametrize("name", list(FILTERS))
def test_budgets_and_fair_share_counts_equal_their_tables(name, apps):
    at = on("budgets", FILTERS[name], apps)
    figures = {m.label: m.value for m in at.metric}
    budgets = table(at, "status")
    assert int(number(figures["Funded"])) == int((budgets["status"] == "funded").sum())
    if name == "org node":
        assert set(budgets["node"]) <= {"llm", "llm-pretrain", "llm-posttrain"}
    at = on("fair_share", FILTERS[name], apps)
    tree = table(at, "fs_rank")
    projects = [n for n, r in zip(tree["node"], tree["fs_rank"], strict=True) if r not in ("", None)]
    assert int(number({m.label: m.value for m in at.metric}["Projects ranked"])) == len(projects)
    if name == "org node":  # the node's subtree and the path above it, nothing of other programs
        assert {n.strip("\u2003") for n in tree["node"]} == {"acme", "research", "llm", "llm-pretrain", "llm-posttrain"}


@pytest.mark.parametrize("name", list(FILTERS))
def test_utilization_idle_jobs_follow_the_filters(name, apps):
    at = on("utilization", FILTERS[name], apps)
    figures = {m.label: m.value for m in at.metric}
    jobs = int(number(figures["Jobs that held idle GPUs"]))
    if not jobs:
        return
    rows = table(at, "gpu_hours_idle")
    assert rows.height == min(jobs, 24)
    assert rows["gpu_hours_idle"].to_list() == sorted(rows["gpu_hours_idle"].to_list(), reverse=True)  # most idle first
    assert number(figures["GPU-hours held while idle"]) >= round(rows["gpu_hours_idle"].sum(), 1) - 0.051
    if name == "cluster":
        assert set(rows["cluster"]) <= {"east"}
    if name == "org node":
        assert set(rows["project"]) <= {"llm-pretrain", "llm-posttrain"}
