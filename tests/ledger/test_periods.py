"""History does not move (issue 8, item 5): versioned rate cards, `period close`, corrections.

The month: October 2026, 31 days = 744 h. Two whole GPUs on reserved hosts, each held by one job
from Oct 1 00:00 to Oct 11 00:00 (240 h) and idle the remaining 504 h:
  H100 (job alpha-1, project alpha) at 2.00 /h, A100 (job beta-1, project beta) at 1.00 /h.

Issued at close (config v1):            alpha 240 × 2.00 = 480.00    beta 240 × 1.00 = 240.00
                                        idle H100 504 × 2.00 = 1008.00, idle A100 504 × 1.00 = 504.00
                                        total 2232.00 (= 744 × 2.00 + 744 × 1.00)
Config v2 adds prices from Oct 6 00:00 (day 5, 120 h in): H100 2.50, A100 0.80. Recomputed:
  alpha 120 × 2.00 + 120 × 2.50 = 540.00 (+60.00)    beta 120 × 1.00 + 120 × 0.80 = 216.00 (−24.00)
  idle H100 504 × 2.50 = 1260.00 (+252.00)           idle A100 504 × 0.80 = 403.20 (−100.80)
  total 2419.20; net correction +187.20.
A job on Nov 2 makes the data reach past October, so October's statement is final, not provisional.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.errors import RunError
from gpuledger.ledger import periods
from gpuledger.ledger.audit import audit_rows
from gpuledger.ledger.config_versions import config_versions, rate_card_version, stored_config
from tests.helpers.ledger_fixtures import CONFIG_V1, devices, job, load

V2_EXTRA = """  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "2.50", effective_from: 2026-10-06}
  - {gpu_model: A100, tier: reserved, price_per_gpu_hour: "0.80", effective_from: 2026-10-06}
"""
CONFIG_V2 = CONFIG_V1 + V2_EXTRA
NOV5, NOV20 = datetime(2026, 11, 5), datetime(2026, 11, 20)


@pytest.fixture
def october(warehouse_file):
    with warehouse.open_writer(warehouse_file) as con:
        load(con, CONFIG_V1, at=datetime(2026, 9, 30))
        ids = devices(con, [("GPU-h", "node-h", "H100"), ("GPU-a", "node-a", "A100")])
        job(con, "alpha-1", "alpha", ids["GPU-h"], datetime(2026, 10, 1), datetime(2026, 10, 11))
        job(con, "beta-1", "beta", ids["GPU-a"], datetime(2026, 10, 1), datetime(2026, 10, 11), model="A100")
        # November data, so October is wholly covered (its statement is not provisional).
        job(con, "beta-2", "beta", ids["GPU-a"], datetime(2026, 11, 2), datetime(2026, 11, 3), model="A100")
    return warehouse_file


def _amounts(frame: pl.DataFrame) -> dict[tuple, Decimal]:
    keep = frame.filter(pl.col("line_kind").is_in(["charge", "idle", "credit", "debit"]))
    return {(r["line_kind"], r["project"], r["gpu_model"]): r["amount"] for r in keep.iter_rows(named=True)}


def test_close_freezes_the_month_and_a_later_price_change_does_not_move_it(october):
    with warehouse.open_writer(october) as con:
        done = periods.close_period(con, "2026-10", by="alice", now=NOV5)
        assert done["totals"] == {"USD": "2232.00"} and done["revision"] == 0 and done["config_version"] == 1
        result = load(con, CONFIG_V2, by="carol", at=datetime(2026, 11, 10))
    # v2 is a new version, and says it touches the closed month (which keeps its statement).
    assert result.added and result.version == 2 and result.closed_periods_affected == ["2026-10"]
    assert "price added: H100/reserved from 2026-10-06 2.50 USD" in result.changes
    with warehouse.open_reader(october) as con:
        issued = periods.statement_lines(con, "2026-10")
        computed = queries.chargeback_report(con, "2026-10")
        # both versions are kept, with their own rate cards
        assert config_versions(con)["version"].to_list() == [1, 2]
        assert rate_card_version(con, 1).height == 4 and rate_card_version(con, 2).height == 6
        assert stored_config(con).version == 2
    assert _amounts(issued) == {
        ("charge", "alpha", "H100"): Decimal("480.00"), ("charge", "beta", "A100"): Decimal("240.00"),
        ("idle", "(idle)", "H100"): Decimal("1008.00"), ("idle", "(idle)", "A100"): Decimal("504.00"),
    }
    assert set(issued["revision"].to_list()) == {0}
    # What today's code would print for October instead: re-priced silently by v2.
    assert _amounts(computed)[("charge", "alpha", "H100")] == Decimal("540.00")


@pytest.mark.slow
def test_correction_adds_credit_and_debit_lines_with_who_when_and_why(october):
    with warehouse.open_writer(october) as con:
        periods.close_period(con, "2026-10", by="alice", now=NOV5)
        load(con, CONFIG_V2, by="carol", at=datetime(2026, 11, 10))
        done = periods.correct_period(con, "2026-10", reason="October rates revised by the provider",
                                      by="bob", now=NOV20)
        assert done["revision"] == 1 and done["net"] == {"USD": "187.20"}
        assert done["credit_lines"] == 2 and done["debit_lines"] == 2
        # Re-issuing again with nothing new changes nothing and stores nothing.
        assert periods.correct_period(con, "2026-10", reason="again", by="bob", now=NOV20) is None
    with warehouse.open_reader(october) as con:
        lines = periods.statement_lines(con, "2026-10")
        jobs = periods.statement_lines(con, "2026-10", level="job")
        listed = periods.period_list(con)
        trail = audit_rows(con)
    corrections = lines.filter(pl.col("revision") == 1)
    assert _amounts(corrections) == {
        ("debit", "alpha", "H100"): Decimal("60.00"), ("credit", "beta", "A100"): Decimal("-24.00"),
        ("debit", "(idle)", "H100"): Decimal("252.00"), ("credit", "(idle)", "A100"): Decimal("-100.80"),
    }
    assert set(corrections["correction_of"].to_list()) == {"charge", "idle"}
    # The issued lines are still there, unchanged; issued + corrections = the re-priced month.
    assert lines.filter(pl.col("revision") == 0)["amount"].sum() == Decimal("2232.00")
    assert lines["amount"].sum() == Decimal("2419.20")
    assert jobs["amount"].sum() == Decimal("2419.20")
    assert jobs.filter((pl.col("job_id") == "alpha-1") & (pl.col("revision") == 1))["amount"].to_list() == [
        Decimal("60.00")]
    row = listed.row(0, named=True)
    assert (row["period"], row["revisions"], row["closed_by"], row["last_issued_by"], row["total"]) == (
        "2026-10", 2, "alice", "bob", "USD 2419.20")
    assert row["last_reason"] == "October rates revised by the provider"
    actions = [(who, action, subject, reason) for _, who, action, subject, reason, _ in trail]
    assert actions == [
        ("alice", "config-load", "config v1", None),
        ("alice", "period-close", "2026-10", None),
        ("carol", "config-load", "config v2", None),
        ("bob", "period-correct", "2026-10", "October rates revised by the provider"),
    ]


def test_a_month_not_over_or_already_closed_is_refused_with_the_fix(october):
    with warehouse.open_writer(october) as con:
        with pytest.raises(periods.PeriodError, match=r"period 2026-11 is not over \(it ends 2026-12-01"):
            periods.close_period(con, "2026-11", now=NOV20)
        periods.close_period(con, "2026-10", now=NOV5)
        with pytest.raises(periods.PeriodError, match="already closed .* `gpuledger period correct 2026-10"):
            periods.close_period(con, "2026-10", now=NOV20)
        with pytest.raises(periods.PeriodError, match="--reason"):
            periods.correct_period(con, "2026-10", reason="  ", now=NOV20)
        with pytest.raises(periods.PeriodError, match="2026-09 is not closed"):
            periods.correct_period(con, "2026-09", reason="x", now=NOV20)
        with pytest.raises(periods.PeriodError, match="give YYYY-MM"):
            periods.close_period(con, "2026-W41", now=NOV20)


def test_frozen_lines_are_checked_against_their_checksum(october):
    with warehouse.open_writer(october) as con:
        periods.close_period(con, "2026-10", now=NOV5)
        con.execute("UPDATE statement_lines SET line_json = replace(line_json, '480.00', '380.00') "
                    "WHERE period = '2026-10'")
    with warehouse.open_reader(october) as con, pytest.raises(RunError, match="do not match their sha256"):
        periods.statement_lines(con, "2026-10")


@pytest.mark.parametrize("column,edit", [("currency", "currency = 'EUR'"), ("amount", "amount = amount + 100"),
                                         ("line_kind", "line_kind = 'credit'")])
def test_every_column_beside_a_frozen_line_is_checked_against_it(october, column, edit):
    # issue 36: the currency beside the checksummed JSON was read by `period list` unchecked
    with warehouse.open_writer(october) as con:
        periods.close_period(con, "2026-10", now=NOV5)
        con.execute(f"UPDATE statement_lines SET {edit} WHERE period = '2026-10' AND level = 'project' "
                    "AND line_no = 0")
    with warehouse.open_reader(october) as con:
        with pytest.raises(RunError, match=f"the {column} of project line 0 differs from its checksummed line"):
            periods.period_list(con)
        with pytest.raises(RunError, match=f"the {column} of project line 0 differs"):
            periods.statement_lines(con, "2026-10")


def test_open_periods_are_priced_by_the_latest_version_and_loading_says_so(october):
    with warehouse.open_writer(october) as con:
        result = load(con, CONFIG_V2, at=NOV5)
    # October is over and not closed: v2 re-prices it, and the load names it.
    assert result.closed_periods_affected == [] and result.open_periods_repriced == ["2026-10"]
    with warehouse.open_reader(october) as con:
        lines = periods.statement_lines(con, "2026-10")
    assert lines["revision"].null_count() == lines.height  # computed, not issued
    assert _amounts(lines)[("charge", "beta", "A100")] == Decimal("216.00")


def test_loading_the_same_content_is_not_a_new_version(october):
    with warehouse.open_writer(october) as con:
        again = load(con, CONFIG_V1 + "\n# a comment changes nothing\n", at=NOV5)
        assert not again.added and again.version == 1
        assert config_versions(con).height == 1


def test_library_writers_store_a_config_once_and_refuse_a_different_one(warehouse_file, example_config):
    from gpuledger.ledger.config_versions import ConfigMismatch, ensure_config, fingerprint

    with warehouse.open_writer(warehouse_file) as con:
        assert ensure_config(con, example_config) == 1
        assert ensure_config(con, example_config) == 1  # the same content: no new version
        # the stored text (generated: no file) parses back to the same content
        assert fingerprint(stored_config(con).config) == fingerprint(example_config)
        with pytest.raises(ConfigMismatch, match="gpuledger config load --config FILE"):
            ensure_config(con, example_config.model_copy(update={"currency": "EUR"}))
