"""The simulator's week of 256 GPUs through the CLI: chargeback reconciles to the cent, the
planted squatters are found and busy jobs are not, fair share and budgets cover every project.

One simulation (about a minute) serves every test in this module."""

from __future__ import annotations

import csv
import subprocess
import sys
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest

from gpuledger import warehouse
from gpuledger.analytics import queries

pytestmark = pytest.mark.slow
WEEK_START = datetime(2026, 11, 1)
WEEK_END = WEEK_START + timedelta(days=7)
BUSY_KINDS = ("training", "fine-tune", "batch", "inference")


def _gpuledger(*args, env_file):
    result = subprocess.run([sys.executable, "-m", "gpuledger.cli", *args, "--warehouse", str(env_file)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    path = tmp_path_factory.mktemp("week") / "gpuledger.duckdb"
    _gpuledger("simulate", "warehouse", "--gpus", "256", "--days", "7", "--seed", "42",
               "--start", WEEK_START.isoformat(), env_file=path)
    return path


def test_chargeback_csv_from_the_cli_reconciles_to_the_cent(week, tmp_path):
    out = tmp_path / "chargeback.csv"
    period = f"{WEEK_START.date()}..{WEEK_END.date()}"
    _gpuledger("report", "chargeback", "--period", period, "--format", "csv", "--out", str(out),
               env_file=week)
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert {"period", "project", "gpu_model", "gpu_hours", "amount", "currency"} <= set(rows[0])
    # The total is the billed lines (charge, idle); memo lines (over-allocated, unpriced, capacity
    # unknown) stand outside it, and the simulator makes none.
    assert {r["line_kind"] for r in rows} <= {"charge", "idle"}
    total = sum(Decimal(r["amount"]) for r in rows if r["billed"] == "true")
    assert all(Decimal(r["amount"]) == Decimal(r["amount"]).quantize(Decimal("0.01")) for r in rows)
    # The data ends at the last sample (23:59:30 on the 7th), so the week is provisional and its
    # capacity is billed to then: 167 h 59.5 min (issue 7: no idle billed past the newest data).
    [through] = {datetime.fromisoformat(r["billed_through"]) for r in rows}
    hours = Decimal(int((through - WEEK_START).total_seconds())) / 3600
    assert {r["provisional"] for r in rows} == {"true" if through < WEEK_END else "false"}
    # Independently: every physical GPU (MIG-split ones once) × those hours × its model's price in
    # its tier; rounding is pool first (chargeback.py): each GPU pool (model × tier) its exact sum
    # rounded half-up to the cent, the total the sum of the pools.
    with warehouse.open_reader(week) as con:
        prices = con.execute(
            """SELECT g.model, g.pricing_tier, r.price_per_gpu_hour FROM
                 (SELECT DISTINCT cluster, gpu_uuid, model, pricing_tier FROM gpus) g
               JOIN rate_card r ON r.gpu_model = g.model AND r.tier = g.pricing_tier"""
        ).fetchall()
        physical = con.execute("SELECT count(DISTINCT gpu_uuid) FROM gpus").fetchall()[0][0]
    assert physical == 256 == len(prices)
    pools: dict[tuple, Decimal] = {}
    for model, tier, price in prices:
        pools[model, tier] = pools.get((model, tier), Decimal(0)) + hours * Decimal(price)
    assert total == sum(p.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP) for p in pools.values())
    charged = [r for r in rows if r["line_kind"] == "charge"]
    assert {r["currency"] for r in rows} == {"USD"} and len(charged) > 10


def test_planted_squatters_are_found_and_busy_jobs_are_not(week):
    with warehouse.open_reader(week) as con:
        # the simulator's squatters (four planted, the rest notebook sessions left idle) that held
        # their GPUs long enough to be seen past 120 idle minutes by a look every 2 h: 30 min grace
        # + 120 min + 2 h between looks = 4.5 h inside the week (one starting late cannot be)
        planted = {r[0] for r in con.execute(
            "SELECT job_id FROM jobs WHERE name LIKE 'squat-%' AND start_time IS NOT NULL "
            "AND coalesce(end_time, ?) - start_time >= INTERVAL 270 MINUTE", [WEEK_END]).fetchall()}
        busy = {r[0] for r in con.execute(
            "SELECT job_id FROM jobs WHERE kind IN ('training', 'fine-tune', 'batch', 'inference') "
            "AND name NOT LIKE 'squat-%' AND start_time IS NOT NULL").fetchall()}
        flagged: dict[str, str] = {}
        rank = {"info": 0, "warning": 1, "second-warning": 2, "preempt-eligible": 3}
        # Look every 2 hours across the week (an on-call cycle would look more often; squatters
        # idle 4-12 h).
        now = WEEK_START + timedelta(hours=2)
        while now <= WEEK_END:
            found = queries.squatters_report(con, now=now)
            for row in found.filter(found["finding"] == "squatting").iter_rows(named=True):
                best = flagged.get(row["job_id"], "info")
                flagged[row["job_id"]] = max(best, row["severity"], key=rank.get)
            now += timedelta(hours=2)
    assert len(planted) >= 50  # 256 GPUs for a week: dozens of sessions left idle
    # Every such squatter idles for hours: each reaches preemption eligibility (120 min).
    assert {j: flagged.get(j) for j in planted} == {j: "preempt-eligible" for j in planted}
    # No busy job is ever called a squatter.
    assert busy and not (busy & set(flagged))


def test_fair_share_and_budgets_cover_every_project(week, example_config):
    with warehouse.open_reader(week) as con:
        tree = queries.fairshare_report(con)
        burn = queries.budget_report(con)
    projects = set(example_config.projects())
    ranked = tree.filter(tree["fs_rank"].is_not_null())
    assert set(ranked["node"]) == projects
    assert sorted(ranked["fs_rank"].to_list()) == list(range(1, len(projects) + 1))
    assert set(burn["node"]) >= projects
    assert burn["status"].is_in(["funded", "at-risk", "exhausted"]).all()
    # The planted end-of-week squatter is running at the data's "now".
    with warehouse.open_reader(week) as con:
        live = queries.squatters_report(con)
    assert live.filter(live["finding"] == "squatting").height >= 1
