"""The dashboards in streamlit.testing.v1.AppTest on a small simulated warehouse (16 GPUs × 2 days,
materialized by `gpuledger pipelines run-once`, one enforcement plan): every page runs without an
exception and its headline figures equal the analytics' own output on the same data; who sees
what follows the config's roles; an empty or missing warehouse says what to run. The pure helpers
(access, queue reasons, utilization totals) are checked against hand-derived values."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal

import polars as pl
import pytest
import streamlit as st
from gpuledger.dashboards import access, queries
from streamlit.testing.v1 import AppTest

from gpuledger import warehouse
from gpuledger.analytics import queries as query_layer
from gpuledger.facts.budget_outlook import with_outlook
from gpuledger.config import DashboardAccess
from gpuledger.ledger.periods import statement_lines
from tests.helpers.dashboard_rig import APP, LEADS, run_cli

AUTH = {"redirect_uri": "http://127.0.0.1:8501/oauth2callback", "cookie_secret": "test-secret",
        "client_id": "gpuledger", "client_secret": "x",
        "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration"}
PAGES = ["utilization", "fair_share", "budgets", "chargeback", "squatters", "my_team", "enforcement"]


def charts_drawn(at) -> int:
    """Charts on the page: ui.chart's SVGs (drawn on the server; no Vega element)."""
    assert not at.get("vega_lite_chart")
    return sum(c.proto.component_name == "gpuledger_chart" and '"<svg ' in c.proto.json for c in at.get("bidi_component"))


@pytest.fixture(autouse=True)
def fresh_cache():
    st.cache_data.clear()  # process-global across AppTest instances
    yield
    st.cache_data.clear()


@pytest.fixture
def on_rig(dashboard_warehouse, monkeypatch):
    monkeypatch.setenv("GPULEDGER_WAREHOUSE", str(dashboard_warehouse.warehouse))
    monkeypatch.setenv("GPULEDGER_CONFIG", str(dashboard_warehouse.config))
    return dashboard_warehouse


def app(email: str | None = None) -> AppTest:
    """The app in local mode, or with sign-in configured and ``email`` signed in."""
    at = AppTest.from_file(str(APP), default_timeout=120)
    if email is not None:
        at.secrets["auth"] = AUTH
        at.user = {"is_logged_in": True, "email": email}
    return at.run()


def page(at: AppTest, name: str) -> AppTest:
    at.switch_page(f"app_pages/{name}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def frame(at: AppTest, i: int) -> pl.DataFrame:
    return pl.from_pandas(at.dataframe[i].value.reset_index(drop=True))


def counted(n: int, noun: str) -> str:
    """What a page writes for n things: "1 job", "2 jobs", "6,562 rows"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def window(at: AppTest) -> tuple[datetime, datetime, datetime]:
    ctx = at.session_state["gpuledger_ctx"]
    return ctx.start, ctx.end, ctx.state.data_now


# --- every page, local mode -------------------------------------------------------------------

@pytest.mark.slow
def test_every_page_runs_in_local_mode_with_a_banner(on_rig):
    at = app()
    assert any("Local mode" in i.value for i in at.info)
    for name in PAGES:
        page(at, name)
        assert at.title[0].value, name
        assert at.metric, f"{name} shows no headline figure"


@pytest.mark.slow
def test_utilization_headline_equals_the_analytics(on_rig):
    at = page(app(), "utilization")
    start, end, now = window(at)
    # the default period: the data's first day to its "now" (2 simulated days, under the 7-day default)
    assert start == datetime(2026, 11, 1) and end == datetime(2026, 11, 3) and now <= end
    with warehouse.open_reader(on_rig.warehouse) as con:
        by_model = query_layer.utilization_report(con, start=start, end=end, by="model", now=now)
        by_kind = query_layer.utilization_report(con, start=start, end=end, by="kind", now=now)
    cap, alloc = by_model["gpu_hours_capacity"].sum(), by_model["gpu_hours_allocated"].sum()
    active = by_model["gpu_hours_active"].sum()
    shown = metrics(at)
    assert shown["Allocated of capacity"] == f"{100 * alloc / cap:.1f} %"
    assert shown["Active of capacity"] == f"{100 * active / cap:.1f} %"
    assert shown["Active of allocated"] == f"{100 * active / alloc:.1f} %"
    assert shown["Unallocated capacity (GPU-h)"] == f"{cap - alloc:,.1f}"
    kinds = frame(at, 0).sort("kind")
    expected = by_kind.sort("kind")
    assert kinds["kind"].to_list() == expected["kind"].to_list()
    for got, want in zip(kinds["gpu_hours_allocated"], expected["gpu_hours_allocated"], strict=True):
        assert got == pytest.approx(want, abs=1e-6)
    # the heatmap's idle device-hours are the devices' own evidence; one chart per section + caption
    # (capacity over time, the heatmap; the workload kinds' hourly chart on request)
    assert charts_drawn(at) == 2
    assert len(at.caption) >= 4
    at.toggle(key="kind_chart").set_value(True).run()
    assert charts_drawn(at) == 3 and not at.exception


@pytest.mark.slow
def test_fair_share_tree_equals_the_analytics(on_rig):
    at = page(app(), "fair_share")
    _, _, now = window(at)
    with warehouse.open_reader(on_rig.warehouse) as con:
        expected = query_layer.fairshare_report(con, as_of=now)
    tree = frame(at, 0)
    assert [n.strip("\u2003") for n in tree["node"]] == expected["node"].to_list()
    # programs have no rank: an empty cell (a number column with empty cells is shown as text)
    shown_ranks = [None if v in ("", None) else int(v) for v in tree["fs_rank"]]
    assert shown_ranks == expected["fs_rank"].to_list()
    for got, want in zip(tree["gpu_hours_window"], expected["gpu_hours_window"], strict=True):
        assert got == pytest.approx(want, abs=1e-9)
    projects = expected.filter(pl.col("kind") == "project")
    assert metrics(at)["Projects ranked"] == str(projects.height)
    assert metrics(at)["GPU-hours in the window"] == f"{projects['gpu_hours_window'].sum():,.1f} GPU-h"
    # the delivery balance: `report balance`'s running period, node for node
    with warehouse.open_reader(on_rig.warehouse) as con:
        balance = query_layer.balance_report(con, as_of=now)
    newest = balance.filter(pl.col("period_start") == pl.col("period_start").max())
    shown = frame(at, 1)
    assert shown["node"].to_list() == newest["node"].to_list()
    for col in ("gpu_hours_owed", "gpu_hours_carried_in", "gpu_hours_balance"):
        assert shown[col].to_list() == pytest.approx(newest[col].to_list(), abs=1e-9)
    # the queue: projects in the analytics' order, each with one reason step per level below the root
    queue = frame(at, 2)
    assert queue["project"].to_list() == projects["node"].to_list()
    depth = dict(zip(expected["node"], expected["depth"], strict=True))
    for project, why in zip(queue["project"], queue["why"], strict=True):
        assert why.count("→ LF") == depth[project]


@pytest.mark.slow
def test_budgets_equal_the_analytics(on_rig):
    at = page(app(), "budgets")
    _, _, now = window(at)
    with warehouse.open_reader(on_rig.warehouse) as con:
        expected = query_layer.budget_report(con, as_of=now)
    shown = metrics(at)
    for status, label in (("funded", "Funded"), ("at-risk", "At risk (exhausts before period end)"),
                          ("exhausted", "Exhausted")):
        assert shown[label] == counted(int((expected['status'] == status).sum()), "node")
    table = frame(at, 0).sort("node", "period_start")
    want = expected.sort("node", "period_start")
    assert table["node"].to_list() == want["node"].to_list()
    for got, w in zip(table["consumed_gpu_hours"], want["consumed_gpu_hours"], strict=True):
        assert got == pytest.approx(float(w), abs=1e-9)
    # runs out only inside the period; what the burn rate leaves at its end (facts.budget_outlook)
    outlook = with_outlook(want, as_of=now)
    assert table["runs_out"].to_list() == outlook["runs_out"].to_list()
    assert table["left_at_period_end"].to_list() == pytest.approx(outlook["left_at_period_end"].to_list(), abs=1e-6)
    row = outlook.filter(pl.col("node") == at.selectbox(key="burn_node").value).row(0, named=True)
    said = " ".join(c.value for c in at.caption)
    assert (f"runs out {row['runs_out']:%Y-%m-%d}" if row["runs_out"] else "lasts the period at this rate") in said
    assert f"with {row['left_at_period_end']:,.1f} normalised GPU-h left" in said, said


@pytest.mark.slow
def test_chargeback_total_equals_the_statement_and_files_equal_the_finance_set(on_rig, tmp_path):
    at = page(app(), "chargeback")
    period = at.selectbox(key="cb_period").value
    assert period == "2026-11"
    with warehouse.open_reader(on_rig.warehouse) as con:
        lines = statement_lines(con, period)
    billed = lines.filter(pl.col("line_kind").is_in(["charge", "idle", "credit", "debit"]))
    total = sum((Decimal(a) for a in billed["amount"]), Decimal(0))
    shown = metrics(at)
    assert shown["Total billed"] == f"{total:,.2f} USD"
    assert shown["Reconciliation (to the cent)"] == "reconciles"
    assert shown["Status"] == "provisional"  # November is not over at the data's "now"
    # energy and emissions per project: the statement's charge lines summed, the example config's
    # site (PUE 1.2, 0.35 kgCO2e/kWh), so kgCO2e = facility kWh × 0.35 and facility = GPU kWh × 1.2
    energy = next(f for f in (frame(at, i) for i in range(len(at.dataframe))) if "kg_co2e" in f.columns)
    with warehouse.open_reader(on_rig.warehouse) as con:
        from gpuledger.reports.statement.build import build_statement

        st_lines = build_statement(con, period, history=False).lines.filter(pl.col("line_kind") == "charge")
    for r in energy.iter_rows(named=True):
        mine = st_lines.filter(pl.col("project") == r["project"])
        kg, kwh = mine["kg_co2e"].drop_nulls(), mine["energy_kwh_facility"].drop_nulls()
        assert r["kg_co2e"] == (f"{kg.sum():,.3f}" if kg.len() else "unknown")
        assert r["facility_kwh"] == (f"{kwh.sum():,.3f}" if kwh.len() else "unknown")
    # cluster sim has the example's site figures, cluster east none: its hours are in the unknown
    # GPU-hours, never in kgCO2e as 0; a line of sim only has kgCO2e = facility kWh × 0.35
    assert st_lines["kg_co2e"].drop_nulls().len() and st_lines["gpu_hours_co2_unknown"].sum() > 0
    assert (st_lines["kg_co2e"] - st_lines["energy_kwh_facility"] * 0.35).abs().max() < 1e-5
    # downloads: byte for byte what `gpuledger report statement` writes for finance
    run_cli(on_rig, "report", "statement", "--period", period, "--out", str(tmp_path / "finance"))
    view = queries.statement(str(on_rig.warehouse), period, None)
    assert view.source == "materialized"  # the pipeline's statement view: the files are built on asking
    assert "files" not in vars(view)  # written when a download asks, not with the page
    assert view.files and {n.rsplit(".", 1)[1] for n in view.files} >= {"csv", "parquet", "xlsx", "html"}
    assert list(view.file_names) == list(view.files)  # the buttons' names are the files written
    for name, data in view.files.items():
        assert (tmp_path / "finance" / name).read_bytes() == data, name


def test_the_server_warms_every_module_the_statement_is_built_with(on_rig):
    # A fresh interpreter: after queries.warm_imports() (ui.warm_server's background thread),
    # building the month's statement view imports no further gpuledger module, so the chargeback
    # page's first load does not wait on imports. A module missing from STATEMENT_MODULES fails.
    # The warehouse's reader is opened first, as every page's first read does before.
    import subprocess
    import sys

    script = ("import sys; from gpuledger import warehouse; from gpuledger.dashboards import queries; "
              f"warehouse.kept_reader({str(on_rig.warehouse)!r}).__enter__(); queries.warm_imports(); "
              "before = set(sys.modules); "
              f"queries.statement({str(on_rig.warehouse)!r}, '2026-11', None); "
              "print(sorted(m for m in set(sys.modules) - before if m.startswith('gpuledger')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.slow
def test_chargeback_for_any_period_equals_the_ledger(on_rig):
    at = page(app(), "chargeback")
    at.radio(key="cb_mode").set_value("the sidebar's period (lines only)").run()
    assert not at.exception
    start, end, _ = window(at)
    with warehouse.open_reader(on_rig.warehouse) as con:
        from gpuledger.ledger.config_versions import stored_config

        lines = query_layer.chargeback_report(con, f"{start.isoformat()}..{end.isoformat()}",
                                          policy=stored_config(con).config.policy)
    total = sum((Decimal(a) for a, b in zip(lines["amount"], lines["billed"], strict=True) if b), Decimal(0))
    assert metrics(at)["Total"] == f"{total:,.2f} USD"
    assert frame(at, 0).height == lines.height


def test_a_findings_history_shows_its_events_alerts_and_enforcement(on_rig):
    with warehouse.open_reader(on_rig.warehouse) as con:
        cluster, job = con.execute("SELECT cluster, job_id FROM squatting_findings WHERE resolved_at IS NULL "
                                   "ORDER BY job_id DESC LIMIT 1").fetchall()[0]
        events = con.execute("SELECT count(*) FROM squatting_finding_events WHERE cluster = ? AND job_id = ?",
                             [cluster, job]).fetchall()[0][0]
        # the job of this cluster: the rig's two clusters were simulated from one start, so their
        # Kubernetes job ids can be the same
        alerts = con.execute("SELECT count(*) FROM alert_outbox WHERE kind = 'squatting' AND "
                             "json_extract_string(payload_json, '$.job_id') = ? AND "
                             "json_extract_string(payload_json, '$.cluster') = ?", [job, cluster]).fetchall()[0][0]
        actions = con.execute("SELECT count(*) FROM enforcement_audit WHERE cluster = ? AND job_id = ?",
                              [cluster, job]).fetchall()[0][0]
    assert events and alerts, "the rig's squatter should have lifecycle events and an alert in the outbox"
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.query_params["cluster"], at.query_params["job"] = cluster, job  # the link an alert carries
    page(at, "squatters")
    assert at.selectbox(key="sq_job").value == f"{cluster}/{job}"
    assert frame(at, 1).height == events
    assert frame(at, 2).height == alerts
    if actions:
        assert frame(at, 3).height == actions


def test_squatters_equal_the_analytics_at_the_last_evaluation(on_rig):
    at = page(app(), "squatters")
    with warehouse.open_reader(on_rig.warehouse) as con:
        last = con.execute("SELECT max(evaluated_at) FROM squatting_evaluations").fetchall()[0][0]
        expected = query_layer.squatters_report(con, now=last)
    shown = metrics(at)
    assert shown["Open findings"] == counted(expected.height, "job")
    assert shown["Wasted"] == f"{expected['gpu_hours_idle'].sum():,.1f} GPU-h"
    assert expected.height > 0, "the simulated week should hold a squatter"
    assert shown["Wasted cost"] == f"{Decimal(expected['idle_cost'].sum()):,.2f} USD"
    assert set(frame(at, 0)["job_id"]) == set(expected["job_id"])
    # a finding idle for the whole 6-h evidence window is a floor: the page says so when one is shown
    capped = expected.filter(pl.col("idle_minutes") >= 359).height
    said = " ".join(c.value for c in at.caption)
    assert ("idle at least that long" in said) == (capped > 0), said
    if capped:
        assert f"last 6 h: {counted(capped, 'finding')} at 360 min" in said, said


def test_enforcement_lists_every_audit_row(on_rig):
    at = page(app(), "enforcement")
    with warehouse.open_reader(on_rig.warehouse) as con:
        count = con.execute("SELECT count(*) FROM enforcement_audit").fetchall()[0][0]
    assert count > 0
    assert metrics(at)["Actions shown"] == counted(count, "row")
    # the page sends one page of rows (paged in SQL), newest first
    assert frame(at, 0).height == min(count, queries.ENFORCEMENT_PAGE_ROWS)


# --- who sees what ----------------------------------------------------------------------------

def _open_jobs(rig, projects, now) -> set[str]:
    with warehouse.open_reader(rig.warehouse) as con:
        rows = con.execute(
            "SELECT job_id FROM jobs WHERE list_contains(?::VARCHAR[], project) AND (end_time IS NULL OR end_time > ?) "
            "AND coalesce(submit_time, start_time) <= ?", [list(projects), now, now]).fetchall()
    return {r[0] for r in rows}


@pytest.mark.slow
@pytest.mark.parametrize("lead", sorted(LEADS))
def test_a_lead_sees_their_team_and_not_another(on_rig, lead):
    at = page(app(lead.upper() if lead.startswith("llm") else lead), "my_team")  # e-mails match case-insensitively
    start, end, now = window(at)
    mine = LEADS[lead]
    running, queued = frame(at, 0), frame(at, 1)
    shown_jobs = set(running["job_id"]) | set(queued["job_id"])
    assert shown_jobs == _open_jobs(on_rig, mine, now) and shown_jobs
    assert set(running["project"]) | set(queued["project"]) <= set(mine)
    others = {p for ps in LEADS.values() for p in ps} - set(mine)
    # job ids are unique per cluster: another cluster's job of another team may share an id with
    # one of ours (both simulated clusters number from the same window start), never a job of theirs alone
    assert not (shown_jobs & _open_jobs(on_rig, others, now)) - _open_jobs(on_rig, mine, now)
    with warehouse.open_reader(on_rig.warehouse) as con:
        budgets = query_layer.budget_report(con, as_of=now)
        usage = query_layer.usage_report(con, start=start, end=end, by="project", now=now)
    program = {"vision-lead@example.com": "vision", "llm-lead@example.com": "llm"}[lead]
    left = budgets.filter(pl.col("node") == program)["remaining_gpu_hours"].sum()
    idle = usage.filter(pl.col("project").is_in(list(mine)))["gpu_hours_idle"].sum()
    shown = metrics(at)
    assert shown["Budget left (normalised GPU-h)"] == f"{left:,.1f}"
    assert shown["Idle GPU-hours (waste)"] == f"{idle:,.1f} GPU-h"
    assert shown["Running jobs"] == counted(running.height, "job")
    # other pages: only their projects' rows; the org-level tree stays whole
    page(at, "enforcement")
    assert set(frame(at, 0)["project"]) <= set(mine)
    page(at, "squatters")
    if at.dataframe:
        assert set(frame(at, 0)["project"]) <= set(mine)
    page(at, "budgets")
    assert not set(frame(at, 0)["node"]) & others
    page(at, "fair_share")
    with warehouse.open_reader(on_rig.warehouse) as con:
        assert frame(at, 0).height == query_layer.fairshare_report(con, as_of=now).height


@pytest.mark.slow
@pytest.mark.parametrize("email", ["finance@example.com", "admin@example.com"])
def test_finance_and_admins_see_everything(on_rig, email):
    at = page(app(email), "enforcement")
    with warehouse.open_reader(on_rig.warehouse) as con:
        count = con.execute("SELECT count(*) FROM enforcement_audit").fetchall()[0][0]
        projects = {r[0] for r in con.execute("SELECT DISTINCT project FROM enforcement_audit").fetchall()}
    assert metrics(at)["Actions shown"] == counted(count, "row")
    assert frame(at, 0).height == min(count, queries.ENFORCEMENT_PAGE_ROWS)
    assert set(frame(at, 0)["project"]) <= projects
    page(at, "my_team")  # a team picker instead of the lead's own team
    assert at.selectbox(key="team_node").options


def test_signed_out_sees_only_the_login(on_rig):
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.secrets["auth"] = AUTH
    at.run()
    assert not at.exception
    assert [b.label for b in at.button] == ["Log in"]
    assert not at.metric and not at.dataframe


def test_someone_not_in_the_config_sees_aggregates_only(on_rig):
    at = page(app("stranger@example.com"), "enforcement")
    assert metrics(at).get("Actions shown", "0 rows") == "0 rows" or not at.dataframe
    page(at, "my_team")
    assert any("not listed as a lead" in i.value for i in at.info)
    page(at, "utilization")
    assert metrics(at)["Allocated of capacity"].endswith("%")


# --- nothing to show ---------------------------------------------------------------------------

def test_a_missing_warehouse_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULEDGER_WAREHOUSE", str(tmp_path / "none.duckdb"))
    monkeypatch.delenv("GPULEDGER_CONFIG", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    for name in PAGES:
        page(at, name)
        assert any("make demo" in w.value for w in at.warning), name
    assert not (tmp_path / "none.duckdb").exists()  # the dashboard never creates it


def test_a_warehouse_without_analytics_says_run_the_pipelines(tmp_path, monkeypatch):
    path = tmp_path / "raw.duckdb"
    with warehouse.open_writer(path):
        pass  # migrated, empty
    monkeypatch.setenv("GPULEDGER_WAREHOUSE", str(path))
    at = page(AppTest.from_file(str(APP), default_timeout=60).run(), "budgets")
    assert any("no GPU samples or jobs" in w.value for w in at.warning)
    from gpuledger.config import load_config
    from gpuledger.simulator import build_cluster
    from gpuledger.simulator.to_warehouse import write_simulation

    with warehouse.open_writer(path) as con:
        write_simulation(con, build_cluster(seed=1, gpus=2, start=datetime(2026, 11, 1), days=0.05,
                                            config=load_config(None)))
    st.cache_data.clear()
    at = page(AppTest.from_file(str(APP), default_timeout=60).run(), "fair_share")
    assert any("gpuledger pipelines run-once" in w.value for w in at.warning)


# --- pure helpers, hand-derived --------------------------------------------------------------

TREE = {"acme": None, "research": "acme", "platform": "acme", "llm": "research", "vision": "research",
        "llm-a": "llm", "llm-b": "llm", "vis-a": "vision", "ci": "platform"}


def test_roles_from_config():
    cfg = DashboardAccess(admins=["Root@x.org"], finance=["money@x.org"], leads={"lead@x.org": ["llm", "ci"]})
    assert access.viewer_for("root@X.org", cfg, TREE).sees_everything
    assert access.viewer_for("money@x.org", cfg, TREE).role == "finance"
    lead = access.viewer_for("LEAD@x.org", cfg, TREE)
    assert lead.role == "lead" and lead.projects == {"llm-a", "llm-b", "ci"}  # leaves under llm and ci
    assert lead.may_see("ci") and not lead.may_see("vis-a") and not lead.may_see(None)
    nobody = access.viewer_for("who@x.org", cfg, TREE)
    assert nobody.role == "viewer" and nobody.projects == frozenset()
    assert access.viewer_for(None, cfg, TREE, local=True).sees_everything


def test_a_lead_of_an_unknown_node_is_a_config_error():
    from gpuledger.config import Config

    with pytest.raises(ValueError, match=r"dashboards.leads\['a@x'\]: 'nope' not in the org tree"):
        Config.model_validate({"org": {"name": "acme", "children": [{"name": "p"}]},
                               "dashboards": {"leads": {"a@x": ["nope"]}}})


def test_queue_reasons_walk_the_tree_level_by_level():
    # acme -> research (s .6, u .3: LF 2), platform (s .4, u .7: LF .571); research -> llm-a (s .5,
    # u .25: LF 2), llm-b (s .5, u .75: LF .667). Depth-first, descending LF: llm-a, llm-b, ci.
    rows = [("acme", None, 0, "org", 1.0, 1.0, 1.0, None, 0),
            ("research", "acme", 1, "program", 0.6, 0.3, 2.0, None, 1),
            ("llm-a", "research", 2, "project", 0.5, 0.25, 2.0, 1, 2),
            ("llm-b", "research", 2, "project", 0.5, 0.75, 0.5 / 0.75, 2, 3),
            ("platform", "acme", 1, "program", 0.4, 0.7, 0.4 / 0.7, None, 4),
            ("ci", "platform", 2, "project", 1.0, 0.0, float("inf"), 3, 5)]
    tree = pl.DataFrame(rows, schema=["node", "parent", "depth", "kind", "shares_norm", "usage_effective",
                                      "level_fs", "fs_rank", "queue_order"],
                        orient="row").with_columns(fairshare_factor=pl.lit(0.5),
                                                   usage_norm=pl.lit(0.01))  # org-wide: never the sentence's
    out = queries.queue_reasons(tree)
    assert out["project"].to_list() == ["llm-a", "llm-b", "ci"]
    assert out["why"][1] == ("research: share 60% vs usage 30% of acme → LF 2.00, 1 of 2; "
                             "llm-b: share 50% vs usage 75% of research → LF 0.67, 2 of 2")
    assert out["why"][2].endswith("ci: share 100% vs usage 0% of platform → LF ∞ (no usage), 1 of 1")


def test_utilization_totals_by_hand():
    # two hours of 8 GPUs: 6 then 2 held, 3 then 1 busy -> allocated 8/16 = 50 %, active 4/16 = 25 %,
    # active of allocated 4/8 = 50 %, unallocated 8 GPU-h
    hourly = pl.DataFrame({"gpu_hours_capacity": [8.0, 8.0], "gpu_hours_allocated": [6.0, 2.0],
                           "gpu_hours_active": [3.0, 1.0]})
    t = queries.utilization_totals(hourly)
    assert (t["allocation_pct"], t["active_pct"], t["active_of_allocated_pct"], t["gpu_hours_unallocated"]) == (
        50.0, 25.0, 50.0, 8.0)


def test_heat_bins_by_hand():
    # at most 56 columns: a week (168 h) in 3-hour bins, 2 days (48 h) in 1-hour bins, 30 days in 13-hour bins
    t0 = datetime(2026, 11, 1)
    assert queries.heat_bin_hours(t0, t0 + timedelta(days=7)) == 3  # 168 / 56
    assert queries.heat_bin_hours(t0, t0 + timedelta(days=2)) == 1
    assert queries.heat_bin_hours(t0, t0 + timedelta(days=30)) == 13  # 720 / 56 = 12.9 -> 13
    assert queries.heat_bin_hours(t0, t0 + timedelta(minutes=5)) == 1


def test_idle_heatmap_rows_are_the_most_idle_jobs_with_their_cost(on_rig):
    """idle_jobs against the hourly job usage read here in plain polars, priced by hand from the
    rate card (the rig's jobs name no tier: the policy's default, reserved)."""
    start, end = datetime(2026, 11, 1), datetime(2026, 11, 3)
    with warehouse.open_reader(on_rig.warehouse) as con:
        usage = con.sql("SELECT u.cluster, u.job_id, u.project, u.hour, u.gpu_hours_idle, j.gpu_model "
                        "FROM usage_hourly_jobs u JOIN jobs j USING (cluster, job_id)").pl()
        prices = dict(con.execute("SELECT gpu_model, price_per_gpu_hour FROM rate_card WHERE tier = 'reserved'").fetchall())
        projects = tuple(r[0] for r in con.execute("SELECT DISTINCT project FROM jobs").fetchall())
    per_job = (usage.filter(pl.col("gpu_hours_idle") > 0).group_by("cluster", "job_id")
               .agg(pl.col("gpu_hours_idle").sum(), pl.col("gpu_model").first()).sort("gpu_hours_idle", descending=True))
    assert per_job.height >= 3, "the rig should hold jobs that idle"
    got = queries.idle_jobs(str(on_rig.warehouse), start, end, projects, (), "reserved", 3)
    assert got["gpu_hours_idle"].to_list() == pytest.approx(per_job["gpu_hours_idle"].head(3).to_list())  # most idle first
    assert got["job_key"].to_list() == (per_job["cluster"] + "/" + per_job["job_id"]).head(3).to_list()
    assert got["jobs_idle"][0] == per_job.height
    assert got["gpu_hours_idle_all"][0] == pytest.approx(per_job["gpu_hours_idle"].sum())
    for row in got.iter_rows(named=True):
        hours = usage.filter((pl.col("cluster") == row["cluster"]) & (pl.col("job_id") == row["job_id"])
                             & (pl.col("gpu_hours_idle") > 0))
        want = sum((Decimal(str(h)).quantize(Decimal("0.000001")) * prices[m]
                    for h, m in zip(hours["gpu_hours_idle"], hours["gpu_model"], strict=True)), Decimal(0))
        assert abs(Decimal(row["idle_cost"]) - want) <= Decimal("0.01"), row
    # each row by the name people gave the job (the id only when it has none), one row per job
    with warehouse.open_reader(on_rig.warehouse) as con:
        names = dict(((c, j), n) for c, j, n in con.execute("SELECT cluster, job_id, name FROM jobs").fetchall())
    for row in got.iter_rows(named=True):
        assert row["label"].startswith(names[(row["cluster"], row["job_id"])] or row["job_id"]), row
    assert got["label"].n_unique() == got.height
    # the heatmap's cells add up to each row's idle GPU-hours
    cells = queries.idle_job_cells(str(on_rig.warehouse), start, end, got, 2)
    for row in got.iter_rows(named=True):
        assert cells.filter(pl.col("label") == row["label"])["gpu_hours_idle"].sum() == pytest.approx(row["gpu_hours_idle"])
    # a cluster filter naming no cluster of the rig keeps nothing
    assert queries.idle_jobs(str(on_rig.warehouse), start, end, projects, ("nowhere",), "reserved", 3).height == 0


def test_mig_summary_by_hand():
    # one A100 split into two 3g instances (3/7 of a GPU each) over 2 hours: instance a held the
    # whole first hour, b half of the second -> held 3/7 × (1 + 0.5) = 9/14 GPU-h of a capacity of
    # 2 instances × 3/7 × 2 h = 12/7 GPU-h, i.e. 37.5 %; 6/7 GPU equivalents
    devices = pl.DataFrame({"device": ["a", "a", "b", "b", "whole"], "model": ["A100"] * 5,
                            "mig_profile": ["3g.40gb"] * 4 + [None], "gpu_fraction": [3 / 7] * 4 + [1.0],
                            "held_fraction": [1.0, 0.0, 0.0, 0.5, 1.0]})
    row = queries.mig_summary(devices).row(0, named=True)
    assert row["instances"] == 2
    assert row["gpu_equivalents"] == pytest.approx(6 / 7)
    assert row["gpu_hours_held"] == pytest.approx(9 / 14)
    assert row["held_pct"] == pytest.approx(37.5)


def test_months_between():
    assert queries.months_between(datetime(2026, 11, 28), datetime(2027, 1, 2)) == ["2026-11", "2026-12", "2027-01"]
    assert queries.months_between(datetime(2026, 11, 1), datetime(2026, 11, 1) + timedelta(days=30)) == ["2026-11"]


@pytest.mark.parametrize("rows", [0, 1, 3, queries.SMALL_ROWS - 1, queries.SMALL_ROWS, queries.SMALL_ROWS + 5])
def test_result_frames_equal_arrows_at_every_size_and_type(rows):
    """result_frame builds short results from tuples; it must equal the Arrow conversion exactly
    (types, nulls, decimals, both timestamp kinds), below, at and above SMALL_ROWS."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    query = ("SELECT range::BIGINT AS n, range::INTEGER AS i, 'p' || range AS project, "
             "CASE WHEN range % 2 = 0 THEN NULL ELSE range / 3 END AS ratio, "
             "(range / 7)::DECIMAL(38, 2) AS cost, TIMESTAMP '2026-11-01' + INTERVAL (range) MINUTE AS ts, "
             "TIMESTAMPTZ '2026-11-01 00:00:00+00' AS tz, DATE '2026-11-01' AS day, range % 2 = 0 AS even "
             f"FROM range({rows})")
    got = queries.result_frame(con.execute(query))
    want = pl.from_arrow(con.sql(query).to_arrow_table())  # the relation path: no copy warning
    assert got.schema == want.schema
    assert got.equals(want) and got.height == rows


def test_result_frames_of_other_types_go_through_arrow():
    import duckdb

    con = duckdb.connect()
    query = "SELECT [1, 2] AS gpus, {'a': 1} AS s, 'x' AS name"  # a list and a struct: not by tuples
    got = queries.result_frame(con.execute(query))
    assert got.schema == {"gpus": pl.List(pl.Int32), "s": pl.Struct({"a": pl.Int32}), "name": pl.String}
    assert got.row(0) == ([1, 2], {"a": 1}, "x")


WHY_STEP = re.compile(r"^(?P<node>[^:]+): share (?P<share>\d+)% vs usage (?P<usage>\d+)% of (?P<parent>\S+) → "
                      r"LF (?P<lf>[0-9.]+|∞ \(no usage\)), (?P<place>\d+) of (?P<of>\d+)$")


def check_queue_sentences(sentences: list[str], tree: pl.DataFrame) -> int:
    """Recompute every step of every "why" sentence from the snapshot's raw figures: a node's usage
    is its subtree's GPU-hours over its siblings' together (the same parent as its share), LF the
    share over that usage. Returns the number of steps checked."""
    rows = {r["node"]: r for r in tree.iter_rows(named=True)}
    checked = 0
    for sentence in sentences:
        for step in sentence.split("; "):
            m = WHY_STEP.match(step)
            assert m, step
            node, parent = rows[m["node"]], m["parent"]
            assert node["parent"] == parent, step
            siblings = [r for r in rows.values() if r["parent"] == parent]
            total = sum(r["usage_raw_gpu_hours"] for r in siblings)
            usage = node["usage_raw_gpu_hours"] / total if total else 0.0
            assert int(m["usage"]) == round(100 * usage), (step, usage)
            assert int(m["share"]) == round(100 * node["shares_norm"]), step
            if usage > 0:
                assert float(m["lf"]) == pytest.approx(node["shares_norm"] / usage, abs=0.006), step
            checked += 1
    return checked


def test_every_queue_sentence_uses_the_share_and_usage_of_one_parent(dashboard_warehouse):
    from gpuledger.analytics.queries import data_now

    path = str(dashboard_warehouse.warehouse)
    with warehouse.open_reader(dashboard_warehouse.warehouse) as con:
        end = data_now(con)
    tree = queries.fairshare_latest(path, end)
    reasons = queries.queue_reasons(tree)
    # the org's usage split over two programs: at least one sentence where the org-wide fraction and
    # the parent's differ, so the check can fail
    assert check_queue_sentences(reasons["why"].to_list(), tree) >= reasons.height
    assert (tree["usage_norm"] - tree["usage_effective"]).abs().max() > 0.05


@pytest.mark.slow
def test_the_fair_share_page_and_the_cli_agree_right_after_config_load(dashboard_warehouse, tmp_path):
    """`config load` moves research's shares from 60 to 20 (programs research / product / platform:
    60 / 30 / 10 of 100 -> 20 / 30 / 10 of 60), so research's share among its siblings goes from
    0.6 to 20/60 = 1/3. The pipelines have not run since: the stored snapshot still says 0.6. The
    page (queries.fairshare_latest) and `report fairshare` both answer 1/3 at the same data time; the
    budget page and `report budget` both show llm-pretrain's new budget."""
    import dataclasses
    import json
    import shutil

    import yaml

    from gpuledger.facts import data_now
    from tests.helpers.dashboard_rig import run_cli

    rig = dataclasses.replace(dashboard_warehouse, warehouse=tmp_path / "w.duckdb", config=tmp_path / "changed.yaml")
    shutil.copyfile(dashboard_warehouse.warehouse, rig.warehouse)
    raw = yaml.safe_load(dashboard_warehouse.config.read_text())
    research = next(c for c in raw["org"]["children"] if c["name"] == "research")
    assert research["shares"] == 60
    research["shares"] = 20
    # and llm-pretrain's November budget 102,000 -> 51,000 normalised GPU-hours
    pretrain = next(b for b in raw["budgets"] if b["node"] == "llm-pretrain" and b["period"] == "2026-11")
    assert pretrain["gpu_hours"] == 102000
    pretrain["gpu_hours"] = 51000
    rig.config.write_text(yaml.safe_dump(raw, sort_keys=False))
    run_cli(rig, "config", "load")
    with warehouse.open_reader(rig.warehouse) as con:
        end = data_now(con)
        stored = dict(con.execute("SELECT node, shares_norm FROM fairshare_snapshots WHERE as_of = "
                                  "(SELECT max(as_of) FROM fairshare_snapshots)").fetchall())
    assert stored["research"] == pytest.approx(0.6)  # what the page showed before: the old snapshot
    cli = json.loads(run_cli(rig, "report", "fairshare", "--format", "json", stored_config=True).stdout)
    cli_rows = cli["rows"] if isinstance(cli, dict) else cli
    cli_shares = {r["node"]: r["shares_norm"] for r in cli_rows}
    page = queries.fairshare_latest(str(rig.warehouse), end)
    page_shares = dict(zip(page["node"], page["shares_norm"], strict=True))
    assert page_shares["research"] == pytest.approx(1 / 3) and cli_shares["research"] == pytest.approx(1 / 3)
    assert page_shares == pytest.approx(cli_shares)
    assert page["as_of"][0] == end
    # the budget page and `report budget` alike: the new budget, not the snapshot's
    cli_budget = json.loads(run_cli(rig, "report", "budget", "--format", "json", stored_config=True).stdout)
    cli_budget = cli_budget["rows"] if isinstance(cli_budget, dict) else cli_budget
    page_budget = queries.budgets_latest(str(rig.warehouse), end)
    mine = page_budget.filter(pl.col("node") == "llm-pretrain")
    assert mine["budget_gpu_hours"].to_list() == [51000.0]
    assert [r["budget_gpu_hours"] for r in cli_budget if r["node"] == "llm-pretrain"] == [51000.0]
    assert mine["remaining_gpu_hours"][0] == pytest.approx(
        next(r["remaining_gpu_hours"] for r in cli_budget if r["node"] == "llm-pretrain"))


@pytest.mark.slow
@pytest.mark.parametrize("lead", sorted(LEADS))
def test_my_team_and_fair_share_show_the_wait_times_the_cli_reports(on_rig, lead):
    """The lead's wait times (their projects only, per project and class) and the fair-share page's
    (per project) are `report waits`'s figures for the period; the queued table says what the
    scheduler said beside gpuledger's rank (the simulator records no scheduler reason: empty, and
    gpuledger's own rank from the plan)."""
    at = page(app(lead), "my_team")
    start, end, _ = window(at)
    mine = LEADS[lead]
    shown = next(frame(at, i) for i in range(len(at.dataframe)) if "job_class" in frame(at, i).columns)
    with warehouse.open_reader(on_rig.warehouse) as con:
        expected = query_layer.waits_report(con, start=start, end=end, by="project-class", projects=tuple(mine))
        by_project = query_layer.waits_report(con, start=start, end=end, by="project")
    assert expected.height and set(shown["project"]) == set(expected["project"]) <= set(mine)
    got = {(r["project"], r["job_class"]): (r["jobs"], r["wait_p50_s"], r["main_cause"]) for r in shown.iter_rows(named=True)}
    assert got == {(r["project"], r["job_class"]): (r["jobs"], r["wait_p50_s"], r["main_cause"])
                   for r in expected.iter_rows(named=True)}
    queued = frame(at, 1)
    assert {"scheduler_says", "versus"} <= set(queued.columns)
    assert queued["scheduler_says"].is_null().all()
    page(at, "fair_share")
    fs = next(frame(at, i) for i in range(len(at.dataframe)) if "wait_p90_s" in frame(at, i).columns)
    assert dict(fs.select("project", "wait_p90_s").iter_rows()) == pytest.approx(
        dict(by_project.select("project", "wait_p90_s").iter_rows()))
