"""A team lead manages their own queue in a real browser (issue 38): Debian's headless Chromium
signs in through the mock OIDC provider as the vision lead, moves a queued job above another and
funds it from the team's budget on the My team page; the warehouse's audit records both with the
sign-in e-mail, enforcement's next plan gives the two jobs their new order, and the llm lead sees
and can change none of vision's jobs.

On a copy of the session's small simulated warehouse (the other dashboard tests read the original)."""

from __future__ import annotations

import shutil

import pytest

from gpuledger import warehouse
from tests.dashboards.test_browser import ERRORS, _provider, _sign_in, browser, settled  # noqa: F401 - fixture
from tests.helpers.dashboard_rig import LEADS, Server, free_port, run_cli

pytestmark = pytest.mark.slow
VISION, LLM = "vision-lead@example.com", "llm-lead@example.com"
HOURS = "Hours to fund (its minimum runtime)"


def _queue(path, projects):
    """The team's queued jobs as the section lists them (its order), at the data's now."""
    from gpuledger.enforce import team_store

    from gpuledger.analytics.queries import data_now

    with warehouse.open_reader(path) as con:
        now = data_now(con)
        return [r for r in team_store.queue(con, projects, now) if r["queued"]], now


def _label(r) -> str:
    return f"{r['name'] or r['job_id']} ({r['cluster']}/{r['job_id']})"


def _open(page) -> None:
    """Open the job picker's list (a react-aria combo box: the arrow key opens it)."""
    box = page.locator("input[aria-label='Queued job']")
    box.click()
    box.press("ArrowDown")
    page.get_by_role("option").first.wait_for(timeout=30_000)


def _pick(page, label: str) -> None:
    _open(page)
    page.get_by_role("option", name=label, exact=True).click()
    settled(page)


def _options(page) -> list[str]:
    _open(page)
    shown = [t.strip() for t in page.get_by_role("option").all_text_contents()]
    page.keyboard.press("Escape")
    return shown


def test_a_lead_reorders_and_funds_in_the_browser_and_another_lead_cannot(dashboard_warehouse, browser, tmp_path):  # noqa: F811
    folder = tmp_path / "copy"
    (folder / "dagster").mkdir(parents=True)
    shutil.copy(dashboard_warehouse.warehouse, folder / "gpuledger.duckdb")
    shutil.copy(dashboard_warehouse.config, folder / "gpuledger.yaml")
    rig = type(dashboard_warehouse)(folder, folder / "gpuledger.duckdb", folder / "gpuledger.yaml")
    with warehouse.open_writer(rig.warehouse):  # migration 028 (a pre-028 session rig)
        pass
    queued, now = _queue(rig.warehouse, LEADS[VISION])
    assert len(queued) >= 2, queued  # the small simulated week leaves vision jobs waiting at its end
    first, second = queued[0], queued[1]

    provider, issuer = _provider(tmp_path)
    port = free_port()
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        'cookie_secret = "a-long-random-test-secret-0123456789"\n'
        'client_id = "gpuledger-dashboard"\n'
        'client_secret = "test-client-secret"\n'
        f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n')
    server = Server(rig, tmp_path, port=port)
    try:
        context, page = _sign_in(browser, server, VISION)
        page.goto(f"{server.url}/my-team")
        settled(page)
        page.get_by_text("Manage your team's queue").wait_for(timeout=60_000)
        assert _options(page) == [_label(r) for r in queued]  # the team's queued jobs, in its order
        _pick(page, _label(second))
        page.get_by_role("button", name="Move up").click()
        page.get_by_text("(audited)").first.wait_for(timeout=60_000)
        settled(page)
        assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).first.inner_text()
        assert _options(page)[:2] == [_label(second), _label(first)]
        _pick(page, _label(second))
        page.locator(f"input[aria-label='{HOURS}']").fill("2")
        page.keyboard.press("Enter")
        settled(page)
        page.get_by_role("button", name="Fund", exact=True).click()
        page.get_by_text("funded by the team for 2 h").first.wait_for(timeout=60_000)
        settled(page)
        page.screenshot(path=str(tmp_path / "my-team-manage.png"), full_page=True)
        context.close()

        with warehouse.open_reader(rig.warehouse) as con:
            choices = {(c, j): (pos, fund) for c, j, pos, fund in con.execute(
                "SELECT cluster, job_id, position, fund_hours FROM team_choices").fetchall()}
            audit = con.execute("SELECT changed_by, identity, node, change, cluster, job_id, before, after "
                                "FROM team_audit ORDER BY changed_at, change, job_id").fetchall()
        key1, key2 = (first["cluster"], first["job_id"]), (second["cluster"], second["job_id"])
        assert choices[key2] == (1, 2.0) and choices[key1][0] == 2
        assert {(a[0], a[1], a[2]) for a in audit} == {(VISION, "oidc", "vision")}
        assert (VISION, "oidc", "vision", "order", *key2, "no place in the lead's order", "position 1") in audit
        assert (VISION, "oidc", "vision", "order", *key1, "no place in the lead's order", "position 2") in audit
        funded = [a for a in audit if a[3] == "fund"]
        assert len(funded) == 1 and funded[0][4:6] == key2 and funded[0][6] == "not funded by the team"
        assert funded[0][7].startswith("funded by the team for 2 h")

        # enforcement's next plan: the lead's second job is now served before the first
        plan = run_cli(rig, "enforce", "plan", "--now", f"{now:%Y-%m-%dT%H:%M:%S}", "--format", "json",
                       "--no-record", stored_config=True).stdout
        import json

        priority = {(a["cluster"], a["job_id"]): a["priority"] for a in json.loads(plan)["actions"]
                    if a["action"] == "set-priority"}
        assert priority[key2] > priority[key1], (priority[key2], priority[key1])

        # the llm lead: none of vision's jobs to see or pick, and the section offers only llm's
        context, page = _sign_in(browser, server, LLM)
        page.goto(f"{server.url}/my-team")
        settled(page)
        page.get_by_text("Manage your team's queue").wait_for(timeout=60_000)
        llm_queued, _ = _queue(rig.warehouse, LEADS[LLM])
        offered = _options(page) if llm_queued else []
        assert offered == [_label(r) for r in llm_queued]
        assert not {_label(r) for r in queued} & set(offered)
        cells = {t.strip() for t in page.locator("[data-testid=stDataFrame] td").all_text_contents()}
        assert not {first["job_id"], second["job_id"], _label(first), _label(second)} & cells
        context.close()
    finally:
        server.stop()
        provider.terminate()
        provider.wait(10)


def test_a_lead_of_another_team_cannot_change_vision_jobs_through_the_store(dashboard_warehouse, tmp_path):
    """The write path itself refuses a job outside the acting lead's team (whatever a page offers)."""
    from gpuledger.enforce import team_store

    from gpuledger.errors import UsageError

    path = tmp_path / "w.duckdb"
    shutil.copy(dashboard_warehouse.warehouse, path)
    queued, now = _queue(path, LEADS[VISION]) if _migrated(path) else ([], None)
    assert queued
    llm = team_store.Team(node="llm", projects=frozenset(LEADS[LLM]), lead=LLM, identity="oidc")
    job = f"{queued[0]['cluster']}/{queued[0]['job_id']}"
    with warehouse.open_writer(path) as con:
        with pytest.raises(UsageError, match="is not a running or queued job of team llm"):
            team_store.set_order(con, llm, [job], now=now, at=now)
        with pytest.raises(UsageError, match="is not a running or queued job of team llm"):
            team_store.set_hold(con, llm, job, True, now=now, at=now)
        assert con.execute("SELECT count(*) FROM team_audit").fetchone()[0] == 0


def _migrated(path) -> bool:
    with warehouse.open_writer(path):
        return True
