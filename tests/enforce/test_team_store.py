"""A lead's changes in a real warehouse (enforce.team_store): funding within the budget left, each
change audited before -> after, and enforcement's situation funding what the lead funded.

The october fixture (tests/helpers/statement_fixtures.py): project alpha has 1,000 normalised
GPU-hours for October; alpha-1 holds 1 H100 (weight 1.0) from Oct 1 00:00, so at Oct 5 10:00 it
has used 4 d 10 h = 106 GPU-hours: 894 are left. Two alpha jobs wait for 64 H100 each."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest
from gpuledger.enforce import inputs, team_store

from gpuledger import warehouse
from gpuledger.config import parse_config_text
from gpuledger.errors import UsageError
from tests.helpers.statement_fixtures import CONFIG, october

NOW = datetime(2026, 10, 5, 10, 0)
LEAD = "research-lead@example.org"


def _queued(con, job_id: str, gpus: float = 64) -> None:
    warehouse.upsert(con, "jobs", pl.DataFrame(
        {"cluster": ["c1"], "job_id": [job_id], "project": ["alpha"], "user_name": ["u"], "gpu_model": ["H100"],
         "gpus": [gpus], "submit_time": [datetime(2026, 10, 5, 9, 0)], "state": ["PENDING"], "source": ["test"],
         "updated_at": [datetime(2026, 10, 5, 9, 0)]},
        schema_overrides={"submit_time": pl.Datetime("us"), "updated_at": pl.Datetime("us")}))


@pytest.fixture
def team(warehouse_file):
    october(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        _queued(con, "q1")
        _queued(con, "q2")
    return team_store.Team(node="research", projects=frozenset({"alpha", "gamma"}), lead=LEAD, identity="oidc")


def test_funding_fits_the_budget_left_less_what_the_team_committed(warehouse_file, team):
    cfg = parse_config_text(CONFIG)
    with warehouse.open_writer(warehouse_file) as con:
        # q1: 64 GPUs x 8 h x 1.0 = 512 of the 894 left
        job, before, after = team_store.set_funding(con, team, "q1", 8, now=NOW, at=NOW, cfg=cfg)
        assert (job, before, after) == ("c1/q1", "not funded by the team",
                                        "funded by the team for 8 h (512.00 normalised GPU-h)")
        # q2 asks 512 too: 894 - 512 = 382 free
        with pytest.raises(UsageError) as refused:
            team_store.set_funding(con, team, "q2", 8, now=NOW, at=NOW, cfg=cfg)
        assert str(refused.value) == ("job c1/q2 needs 512.00 normalised GPU-hours (8 h) but budget alpha has 894.00 "
                                      "left, 512.00 of it already committed to the team's other funded jobs: 382.00 "
                                      "free; unfund another job first or fund fewer hours")
        # 5 h: 64 x 5 = 320 <= 382
        team_store.set_funding(con, team, "q2", 5, now=NOW, at=NOW, cfg=cfg)
        with pytest.raises(UsageError, match="at most 8 h"):
            team_store.set_funding(con, team, "q1", 9, now=NOW, at=NOW, cfg=cfg)
        team_store.set_funding(con, team, "q1", None, now=NOW, at=NOW, cfg=cfg)
        audit = con.execute("SELECT changed_by, identity, change, job_id, before, after FROM team_audit "
                            "ORDER BY rowid").fetchall()
    assert audit == [
        (LEAD, "oidc", "fund", "q1", "not funded by the team", "funded by the team for 8 h (512.00 normalised GPU-h)"),
        (LEAD, "oidc", "fund", "q2", "not funded by the team", "funded by the team for 5 h (320.00 normalised GPU-h)"),
        (LEAD, "oidc", "unfund", "q1", "funded by the team for 8 h (512.00 normalised GPU-h)", "not funded by the team"),
    ]  # the refusals changed nothing and left no row
    # enforcement's situation: q2 funded by the lead (it declares no minimum runtime of its own), q1 not
    with warehouse.open_reader(warehouse_file) as con:
        jobs = {j.job_id: j for j in inputs.gather(con, cfg, now=NOW).jobs}
    assert (jobs["q2"].funded, jobs["q2"].funded_by) == (True, f"team research's lead {LEAD}")
    assert (jobs["q1"].funded, jobs["q1"].unfunded_reason) == (False, "no minimum runtime declared")


def test_order_and_hold_name_only_queued_jobs_of_the_team(warehouse_file, team):
    with warehouse.open_writer(warehouse_file) as con:
        assert team_store.set_order(con, team, ["q2", "q1"], now=NOW, at=NOW) == [
            ("c1/q1", "no place in the lead's order", "position 2"),
            ("c1/q2", "no place in the lead's order", "position 1")]
        assert team_store.set_order(con, team, ["q2", "q1"], now=NOW, at=NOW) == []  # nothing changed: no row
        with pytest.raises(UsageError, match="already running: a lead orders queued jobs only"):
            team_store.set_order(con, team, ["alpha-1"], now=NOW, at=NOW)
        with pytest.raises(UsageError, match="named twice"):
            team_store.set_order(con, team, ["q1", "c1/q1"], now=NOW, at=NOW)
        beta = team_store.Team(node="product", projects=frozenset({"beta"}), lead="p@example.org", identity="oidc")
        with pytest.raises(UsageError, match="is not a running or queued job of team product"):
            team_store.set_hold(con, beta, "q1", True, now=NOW, at=NOW)
        assert team_store.set_hold(con, team, "q1", True, now=NOW, at=NOW) == ("c1/q1", "not held", "held")
        assert con.execute("SELECT count(*) FROM team_audit").fetchone()[0] == 3
    with warehouse.open_reader(warehouse_file) as con:
        choices = team_store.load_choices(con)
    assert {k: (c.position, c.held) for k, c in choices.items()} == {("c1", "q1"): (2, True), ("c1", "q2"): (1, False)}
