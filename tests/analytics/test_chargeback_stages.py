"""The named stages of chargeback_lines (issue 22, split from one 267-line function), each on its
own. A day, Oct 1 2026 00:00–24:00, cluster c1, whole H100s reserved at 2.00 /h:
  GPU 1 held by J 00:00–06:00 (6 h = 12.00); K holds 0.5 of GPU 1 too and L GPU 2, 02:00–03:00
  (1.00 and 2.00); GPU 3 (A100) has no rate. The pool balances per hour, not per GPU: at 02:00 the
  2 H100s carry 1 + 0.5 + 1 = 2.5 GPUs, 0.5 GPU-h over-allocated (1.00, a memo); idle is GPU 2 in
  00–02 and 03–06 (5 h) and both GPUs 06–24 (36 h): 41 h = 82.00. Σ billed 12 + 1 + 2 + 82 =
  97.00 = capacity 48 h × 2.00 (96.00) + over-allocated 1.00."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import polars as pl

from gpuledger.analytics import chargeback as cb
from tests.helpers.analytics_frames import allocations, gpus, jobs, org, rate_card

D = Decimal
START, END = datetime(2026, 10, 1), datetime(2026, 10, 2)
RATES = rate_card([("H100", "reserved", datetime(2026, 1, 1), "2.00")])
INV = gpus([{"gpu_id": 1}, {"gpu_id": 2, "uuid": "G2"}, {"gpu_id": 3, "uuid": "G3", "model": "A100"}])
JOBS = jobs([{"job_id": "J", "project": "alpha"}, {"job_id": "K", "project": "beta"},
             {"job_id": "L", "project": "beta"}])
ALLOC = allocations([("J", 1, START, START + timedelta(hours=6)),
                     ("K", 1, START + timedelta(hours=2), START + timedelta(hours=3), 0.5),
                     ("L", 2, START + timedelta(hours=2), START + timedelta(hours=3))])


def _stages():
    cap, pieces, prices = cb.priced_pieces(ALLOC, INV, JOBS, RATES, start=START, end=END, now=END, billed_end=END,
                                           default_tier="reserved", retire_grace=timedelta(hours=24))
    return cap, pieces, prices, cb.hourly_balance(cap, pieces, prices)


def test_priced_pieces_and_the_hourly_balance():
    cap, pieces, _, per_hour = _stages()
    # 3 GPUs × 24 h of capacity; J's 6 hourly pieces, K's and L's one, each priced 2.00
    assert cap.collect()["cap_raw"].sum() == D(72)
    got = pieces.collect().group_by("job_id").agg(pl.col("a_raw").sum(), pl.col("price_per_gpu_hour").unique())
    assert {j: (h, list(p)) for j, h, p in got.iter_rows()} == {"J": (D(6), [D(2)]), "K": (D("0.5"), [D(2)]),
                                                                          "L": (D(1), [D(2)])}
    ph = per_hour.collect()
    h100 = ph.filter(pl.col("model") == "H100")
    assert h100["idle_h"].sum() == D(41) and h100["over_h"].sum() == D("0.5")
    assert ph.filter(pl.col("model") == "A100")["price_per_gpu_hour"].is_null().all()  # no rate


def test_charge_idle_over_capacity_unknown_and_unpriced_lines():
    _, pieces, _, per_hour = _stages()
    charges = cb.charge_lines(pieces).collect()
    assert {r["job_id"]: r["amount_raw"] for r in charges.iter_rows(named=True)} == {"J": D(12), "K": D(1), "L": D(2)}
    (idle,) = cb.idle_lines(per_hour).collect().iter_rows(named=True)
    assert (idle["model"], idle["gpu_hours_allocated"], idle["amount_raw"]) == ("H100", 41.0, D(82))
    (over,) = cb.over_lines(per_hour, pieces).collect().iter_rows(named=True)
    assert (over["amount_raw"], over["note"]) == (D(1), "jobs: J, K, L")
    assert cb.capacity_unknown_lines(cb.charge_lines(pieces)).collect().is_empty()  # c1 has an inventory
    (unpriced,) = cb.unpriced_lines(pieces, per_hour).collect().iter_rows(named=True)
    assert (unpriced["model"], unpriced["gpu_hours_allocated"]) == ("A100", 24.0)
    assert unpriced["note"] == "no price for A100/reserved in the rate card (idle capacity)"


def test_spread_idle_in_proportion_to_charges():
    """Idle 82.00 over J 12.00, K 1.00, L 2.00: J takes 82 × 12/15 = 65.60; nothing left idle."""
    _, pieces, _, per_hour = _stages()
    charges = cb.charge_lines(pieces).drop("_known").with_columns(_idle_raw=pl.lit(0).cast(cb.RAW))
    spread, idle = cb.spread_idle(charges, cb.idle_lines(per_hour))
    got = spread.collect()
    assert got["_idle_raw"].sum() == D(82) and idle.collect().is_empty()
    j = got.filter(pl.col("job_id") == "J").row(0, named=True)
    assert abs(j["_idle_raw"] - D("65.6")) < D("1e-9")


def test_rounded_billed_and_memo_trees_add_up_at_every_level():
    _, pieces, _, per_hour = _stages()
    charges = cb.charge_lines(pieces).drop("_known").with_columns(_idle_raw=pl.lit(0).cast(cb.RAW))
    tree = org([("acme", None, 1), ("alpha", "acme", 1), ("beta", "acme", 1)])
    levels, _, path, depth, _ = cb.rounded_billed(charges, cb.idle_lines(per_hour), JOBS, tree)
    assert depth == 2 and path == ["_pool", "p1", "p2", "_leaf"]  # a tree per pool
    # billed (charges and idle, the memo apart): 12.00 + 1.00 + 2.00 + 82.00 = 97.00, root and leaves
    assert levels[0].collect()["amount"].sum() == D("97.00")  # the pools' roots
    assert levels[-1].collect()["amount"].sum() == D("97.00")
    memo_levels, _, memo_path = cb.rounded_memo(cb.over_lines(per_hour, pieces),
                                                cb.capacity_unknown_lines(cb.charge_lines(pieces)))
    assert memo_path[0] == "line_kind" and memo_levels[-1].collect()["amount"].to_list() == [D("1.00")]
