"""analytics.pool_pressure against the pairs it replaces: every (wait, job) pair checked one by one
(the range joins waits.py made before), on random small pools (Hypothesis), and one pool by hand."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.analytics.pool_pressure import pressure, quadrant_sums

T0 = datetime(2026, 12, 1)
FOREVER = datetime(9999, 12, 31)
points = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(1, 8)), max_size=200)
queries = st.lists(st.tuples(st.integers(-1, 31), st.integers(-1, 31)), min_size=1, max_size=50)


@settings(max_examples=200, deadline=None)
@given(points, queries)
def test_quadrant_sums_are_the_brute_force_sums(pts, qs):
    a, b, w = (np.array([p[i] for p in pts], dtype=np.int64 if i < 2 else np.float64) for i in range(3))
    above, upto = (np.array([q[i] for q in qs], dtype=np.int64) for i in range(2))
    got = quadrant_sums(a, b, w, above, upto)
    want = [sum(p[2] for p in pts if p[0] > x and p[1] <= y) for x, y in qs]
    assert got.tolist() == want


def test_quadrant_sums_at_thousands_of_points_with_fractional_weights():
    # many levels of the block decomposition (5,000 points: 13 of them), ties in a and b, and
    # fractional weights (MIG slices, shared GPUs), against numpy's direct masks per query
    rng = np.random.default_rng(7)
    a, b = rng.integers(0, 400, 5000), rng.integers(0, 400, 5000)
    w = rng.choice([1 / 7, 0.5, 1.0, 8.0], 5000)
    above, upto = rng.integers(-1, 401, 300), rng.integers(-1, 401, 300)
    want = np.array([w[(a > x) & (b <= y)].sum() for x, y in zip(above, upto, strict=True)])
    np.testing.assert_allclose(quadrant_sums(a, b, w, above, upto), want, rtol=1e-12, atol=1e-9)


def _brute(waits, others):
    out = {}
    for row, s, e in waits:
        over = [o for o in others if o[0] > s and s <= o[1] < e]
        held = sum(o[3] for o in others if o[1] <= s < o[2]) + sum(o[3] for o in others if o[0] <= s < o[1] < e)
        out[row] = (len(over) or None, float(held))
    return out


jobs = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 10), st.one_of(st.none(), st.integers(0, 10)),
                          st.integers(1, 8)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(jobs, st.lists(st.tuples(st.integers(0, 20), st.integers(0, 15)), min_size=1, max_size=30))
def test_pressure_is_what_pairing_each_wait_with_each_job_gives(raw, raw_waits):
    # others: submit, start = submit + d, end = start + d2 (None: still held), GPUs; waits: S, E = S + d
    others = [(s, s + d, FOREVER if d2 is None else s + d + d2, g) for s, d, d2, g in raw]
    waits = [(i, s, s + d) for i, (s, d) in enumerate(raw_waits)]
    minute = lambda m: m if isinstance(m, datetime) else T0 + timedelta(minutes=m)  # noqa: E731
    frame = pl.DataFrame({"_row": [w[0] for w in waits], "submit_time": [minute(w[1]) for w in waits],
                          "_end": [minute(w[2]) for w in waits]}, schema_overrides={"_row": pl.Int64})
    theirs = pl.DataFrame({"_other_submit": [minute(o[0]) for o in others],
                           "_other_start": [minute(o[1]) for o in others],
                           "_other_end": [minute(o[2]) for o in others], "_other_gpus": [float(o[3]) for o in others]},
                          schema={"_other_submit": pl.Datetime("us"), "_other_start": pl.Datetime("us"),
                                  "_other_end": pl.Datetime("us"), "_other_gpus": pl.Float64})
    got = {r["_row"]: (r["_overtaken"], r["_held"]) for r in pressure(frame, theirs).iter_rows(named=True)}
    big = [(o[0], o[1], 10**9 if o[2] is FOREVER else o[2], o[3]) for o in others]
    assert got == _brute(waits, big)


def test_one_pool_by_hand():
    # others (minutes): x submit 0 start 0 end 10 (4 GPUs); y submit 6 start 12 held on (2); z submit 3
    # start 15 end 20 (1). A wait S=5, E=16: overtaken by y (6 > 5, 12 in [5, 16)) only -> 1;
    # held at 5: x's 4; taken during [5, 16) by work submitted by 5: z (3 <= 5, 15 in (5, 16)) -> 1;
    # _held 5
    t = lambda m: T0 + timedelta(minutes=m)  # noqa: E731
    theirs = pl.DataFrame({"_other_submit": [t(0), t(6), t(3)], "_other_start": [t(0), t(12), t(15)],
                           "_other_end": [t(10), FOREVER, t(20)], "_other_gpus": [4.0, 2.0, 1.0]})
    got = pressure(pl.DataFrame({"_row": [0], "submit_time": [t(5)], "_end": [t(16)]}), theirs)
    assert got.row(0) == (0, 1, 5.0)
