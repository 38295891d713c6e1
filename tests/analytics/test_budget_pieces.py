"""Budget burn cuts allocations into UTC-day pieces when no rate-card weight changes inside a day,
and into hours otherwise (analytics.budget.piece_length, issue 41): the same consumed and burn as
hourly pieces, from a fraction of the rows. Org: acme → p, q; November budgets; as_of Nov 21 10:37."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.analytics import budget as bg
from gpuledger.analytics.intervals import HOUR
from gpuledger.analytics.tree import Tree, closure
from tests.helpers.analytics_frames import allocations, budgets, gpus, jobs, org, rate_card

NOV = lambda d, h=0, m=0: datetime(2026, 11, d, h, m)
AS_OF = NOV(21, 10, 37)
TREE = org([("acme", None, 1), ("p", "acme", 1), ("q", "acme", 1)])
MONTH = (date(2026, 11, 1), date(2026, 12, 1))
BUDGETS = budgets([("p", *MONTH, "1000"), ("q", *MONTH, "1000")])
INV = gpus([{"gpu_id": 1, "model": "B200"}, {"gpu_id": 2, "model": "H100"}])


def _burn(al, jb, rates, *, every=None):
    """budget_burn, or (``every``) its stages with pieces of that length: the reference."""
    if every is None:
        out = bg.budget_burn(al, INV, jb, TREE, BUDGETS, rates, as_of=AS_OF, default_tier="reserved")
    else:
        nodes = bg.rolled_budgets(Tree.from_frame(TREE), bg.own_budgets(BUDGETS, as_of=AS_OF)).lazy()
        use = bg.project_hourly_use(al, INV, jb, rates, start=datetime(2026, 11, 1), as_of=AS_OF,
                                    default_tier="reserved", every=every)
        consumed = bg.consumed_per_node(nodes, closure(TREE), use, burn_start=AS_OF - bg.BURN_WINDOW)
        out = bg.burn_status(nodes, consumed, as_of=AS_OF, burn_window=bg.BURN_WINDOW)
    return {r["node"]: r for r in out.collect().iter_rows(named=True)}


def test_a_weight_that_changes_at_midnight_allows_day_pieces_one_that_changes_mid_day_does_not():
    # B200 weight 2.0 from January; 3.0 from Nov 20 00:00 (midnight) or from Nov 20 13:00 (mid-day).
    # J holds the B200 Nov 19 22:00 - Nov 20 16:00 (18 h).
    midnight = rate_card([("B200", "reserved", datetime(2026, 1, 1), "3.60", 2.0),
                          ("B200", "reserved", NOV(20), "3.60", 3.0)])
    midday = rate_card([("B200", "reserved", datetime(2026, 1, 1), "3.60", 2.0),
                        ("B200", "reserved", NOV(20, 13), "3.60", 3.0)])
    assert bg.piece_length(midnight, start=NOV(1), as_of=AS_OF) == timedelta(days=1)
    assert bg.piece_length(midday, start=NOV(1), as_of=AS_OF) == HOUR
    jb = jobs([{"job_id": "J", "project": "p", "start": NOV(19, 22)}])
    al = allocations([("J", 1, NOV(19, 22), NOV(20, 16))])
    # midnight: 2 h x 2.0 + 16 h x 3.0 = 52; mid-day: 15 h x 2.0 + 3 h x 3.0 = 39 (a day piece
    # weighed as of 00:00 would say 16 h x 2.0 + 2 h x 2.0 = 36: wrong)
    assert _burn(al, jb, midnight)["p"]["consumed_gpu_hours"] == pytest.approx(52.0)
    assert _burn(al, jb, midday)["p"]["consumed_gpu_hours"] == pytest.approx(39.0)
    # a change outside (start, as_of) does not matter
    assert bg.piece_length(midday, start=NOV(21), as_of=AS_OF) == timedelta(days=1)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-3 * 24 * 60, 20 * 24 * 60), st.integers(1, 80 * 60), st.sampled_from(["p", "q"]),
                       st.sampled_from([1, 2]), st.booleans()), min_size=1, max_size=8),
    st.booleans(),
)
def test_day_pieces_give_the_hourly_pieces_burn(allocs, weight_changes):
    # allocations from before the period (Oct 29) to past the burn window's start (Nov 14 10:37),
    # across midnights, some still running at as_of; weights by model, changing at a midnight or not
    rows = [("B200", "reserved", datetime(2026, 1, 1), "3.60", 2.0), ("H100", "reserved", datetime(2026, 1, 1), "2", 1.0)]
    if weight_changes:
        rows.append(("H100", "reserved", NOV(16), "2", 1.5))
    rates = rate_card(rows)
    assert bg.piece_length(rates, start=NOV(1), as_of=AS_OF) == timedelta(days=1)
    al = allocations([(f"j{i}", g, NOV(1) + timedelta(minutes=m), None if running else NOV(1) + timedelta(minutes=m + d))
                      for i, (m, d, _, g, running) in enumerate(allocs)])
    jb = jobs([{"job_id": f"j{i}", "project": p, "start": NOV(1) + timedelta(minutes=m)}
               for i, (m, _, p, _, _) in enumerate(allocs)])
    got, want = _burn(al, jb, rates), _burn(al, jb, rates, every=HOUR)
    assert set(got) == set(want)
    for node, row in want.items():
        for figure in ("consumed_gpu_hours", "burn_gpu_hours_per_day", "remaining_gpu_hours"):
            assert got[node][figure] == pytest.approx(row[figure], rel=1e-9, abs=1e-9), (node, figure)
        assert got[node]["projected_exhaustion"] == row["projected_exhaustion"] or abs(
            (got[node]["projected_exhaustion"] - row["projected_exhaustion"]).total_seconds()) <= 1, node
        assert got[node]["status"] == row["status"]
