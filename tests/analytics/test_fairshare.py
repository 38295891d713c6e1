"""Usage over time (window vs decay), hierarchical fair share, Ai2 occupancy and delivery ratio."""

from __future__ import annotations

import math
from datetime import timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.analytics.attribution import allocated_pieces
from gpuledger.analytics.fairshare import delivery, fair_share
from gpuledger.analytics.intervals import clip_pieces
from gpuledger.analytics.usage import USAGE_PIECE, decay_weight, node_usage, project_usage
from tests.helpers.analytics_frames import allocations, at, gpus, jobs, org

DAY = timedelta(days=1)
H = timedelta(hours=1)
AS_OF = at(0) + 10 * DAY

TREE = org([
    ("acme", None, 1),
    ("A", "acme", 60), ("a1", "A", 50), ("a2", "A", 50),
    ("B", "acme", 40), ("b1", "B", 3), ("b2", "B", 1),
])


def test_window_versus_decay():
    inv = gpus([{"gpu_id": g} for g in (1, 2, 3, 4)])
    al = allocations([
        ("X", 1, AS_OF - 8 * DAY, AS_OF - 8 * DAY + 2 * H),          # outside the 7-day window
        ("Y", 2, AS_OF - 7 * DAY - H, AS_OF - 7 * DAY + H),          # straddles the window start
        ("Y", 3, AS_OF - 7 * DAY - H, AS_OF - 7 * DAY + H),
        ("Z", 4, AS_OF - 3 * H, None),                               # running up to as_of
    ])
    jb = jobs([{"job_id": "X", "project": "p"}, {"job_id": "Y", "project": "p"}, {"job_id": "Z", "project": "p"}])
    got = project_usage(al, inv, jb, as_of=AS_OF).collect().to_dicts()[0]
    # Window: Y's last hour on 2 GPUs (2 GPU-h) + Z's 3 h = 5 GPU-h.
    assert got["gpu_hours_window"] == pytest.approx(5.0)
    # Decay, H = 168 h; each hour weighted at its midpoint age (the exact integral differs by ~1e-6):
    # X: 2 h at ages 192..190 h -> midpoint 191 h; Y: 2 GPUs × (hour at 168.5 h + hour at 167.5 h);
    # Z: 3 h, midpoint 1.5 h.
    expected = (2 * 2 ** (-191 / 168)
                + 2 * (2 ** (-168.5 / 168) + 2 ** (-167.5 / 168))
                + 3 * 2 ** (-1.5 / 168))
    assert got["gpu_hours_decayed"] == pytest.approx(expected, rel=1e-5)
    # Restricted to the same 7 days, decay only sees Y's inside hour and Z.
    inside = project_usage(al, inv, jb, as_of=AS_OF, decay_horizon=7 * DAY).collect().to_dicts()[0]
    assert inside["gpu_hours_decayed"] == pytest.approx(2 * 2 ** (-167.5 / 168) + 3 * 2 ** (-1.5 / 168), rel=1e-5)


def _usage(**per_project):
    return pl.LazyFrame({"node": list(per_project), "u": [float(v) for v in per_project.values()]},
                        schema={"node": pl.String, "u": pl.Float64})


def test_three_level_tree_ranking_like_sshare():
    df = fair_share(TREE, _usage(a1=30, a2=10, b1=0, b2=60), usage_col="u").collect()
    rows = {r["node"]: r for r in df.to_dicts()}
    # Level 1: A s=0.6 u=40/100 -> LF 1.5; B s=0.4 u=0.6 -> LF 2/3: A's subtree first.
    assert rows["A"]["level_fs"] == pytest.approx(1.5)
    assert rows["B"]["level_fs"] == pytest.approx(2 / 3)
    # Under A: a1 s=0.5 u=0.75 -> 2/3; a2 s=0.5 u=0.25 -> 2. Under B: b1 no usage -> inf; b2 s=0.25 u=1.
    assert rows["a1"]["level_fs"] == pytest.approx(2 / 3)
    assert rows["a2"]["level_fs"] == pytest.approx(2.0)
    assert math.isinf(rows["b1"]["level_fs"])
    assert rows["b2"]["level_fs"] == pytest.approx(0.25)
    # Depth first, children by descending LF: a2, a1, b1, b2. b1 never used a GPU and still ranks
    # after a1, because its parent B is over its share.
    leaves = df.filter(pl.col("fs_rank").is_not_null()).sort("order")
    assert leaves["node"].to_list() == ["a2", "a1", "b1", "b2"]
    assert leaves["fs_rank"].to_list() == [1, 2, 3, 4]
    assert leaves["fairshare_factor"].to_list() == pytest.approx([1.0, 0.75, 0.5, 0.25])
    assert df.sort("order")["node"].to_list() == ["acme", "A", "a2", "a1", "B", "b1", "b2"]
    # sshare -l columns for a1: norm shares 0.5 among siblings, 0.6 × 0.5 = 0.3 globally,
    # raw usage 30, norm usage 30/100, effective usage 30/40.
    a1 = rows["a1"]
    assert (a1["shares_raw"], a1["shares_norm"], a1["share_global"]) == pytest.approx((50, 0.5, 0.3))
    assert (a1["usage_raw_gpu_hours"], a1["usage_norm"], a1["usage_effective"]) == pytest.approx((30, 0.3, 0.75))
    assert rows["B"]["usage_raw_gpu_hours"] == pytest.approx(60)


def test_node_usage_feeds_fair_share():
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2}])
    al = allocations([("j1", 1, AS_OF - 2 * H, AS_OF), ("j2", 2, AS_OF - H, AS_OF)])
    jb = jobs([{"job_id": "j1", "project": "a1"}, {"job_id": "j2", "project": "b2"}])
    usage = node_usage(al, inv, jb, TREE, as_of=AS_OF).collect()
    by_node = dict(usage.select("node", "gpu_hours_window").iter_rows())
    # a1 2 GPU-h, b2 1 GPU-h, A 2, B 1, acme 3, untouched nodes 0.
    assert by_node == pytest.approx({"acme": 3, "A": 2, "a1": 2, "a2": 0, "B": 1, "b1": 0, "b2": 1})
    fs = fair_share(TREE, usage.lazy(), usage_col="gpu_hours_window").collect()
    # A: 0.6/(2/3) = 0.9, B: 0.4/(1/3) = 1.2 -> B first; b1 (no usage) before b2; a2 before a1.
    assert fs.filter(pl.col("fs_rank").is_not_null()).sort("order")["node"].to_list() == ["b1", "b2", "a2", "a1"]


def test_delivery_ratio_and_occupancy():
    inv = gpus([{"gpu_id": g} for g in (1, 2, 3, 4)])  # capacity 4 GPU-h per hour
    tree = org([("root", None, 1), ("p1", "root", 75), ("p2", "root", 25)])
    jb = jobs([
        # p1 wants 4 GPUs from 00:00, waits an hour, runs 01:00-02:00 on all four.
        {"job_id": "J1", "project": "p1", "gpus": 4, "submit": at(0), "start": at(1), "end": at(2)},
        # p2 wants 1 GPU at 00:30 and gets it at once until 01:00.
        {"job_id": "J2", "project": "p2", "gpus": 1, "submit": at(0, 30), "start": at(0, 30), "end": at(1)},
    ])
    al = allocations([*(("J1", g, at(1), at(2)) for g in (1, 2, 3, 4)), ("J2", 1, at(0, 30), at(1))])
    df = delivery(jb, al, inv, tree, start=at(0), end=at(2), now=at(3)).collect()
    rows = {r["node"]: r for r in df.to_dicts()}
    # p1: entitled 0.75 × 4 = 3 GPU-h each hour; demand 4 and 4 -> owed 3 + 3 = 6; allocated 0
    # then 4. Settled over the range (one period): delivered min(4, 6) = 4 -> 4/6; hour by hour
    # min(0,3) + min(4,3) = 3 -> 0.5. Occupancy 4 / 6.
    p1 = rows["p1"]
    assert (p1["gpu_hours_owed"], p1["gpu_hours_delivered"], p1["delivery_ratio"]) == pytest.approx((6, 4, 4 / 6))
    assert (p1["gpu_hours_delivered_hourly"], p1["delivery_ratio_hourly"]) == pytest.approx((3, 0.5))
    assert p1["occupancy_ratio"] == pytest.approx(4 / 6)
    # p2: entitled 1 per hour; demand 0.5 in hour 0 -> owed 0.5, delivered 0.5 -> 1.0; occupancy 0.5/2.
    p2 = rows["p2"]
    assert (p2["gpu_hours_owed"], p2["delivery_ratio"], p2["occupancy_ratio"]) == pytest.approx((0.5, 1.0, 0.25))
    assert rows["root"]["delivery_ratio"] == pytest.approx(4.5 / 6.5)
    assert rows["root"]["delivery_ratio_hourly"] == pytest.approx(3.5 / 6.5)
    # Settled hour by hour instead, delivered is the hourly figure.
    hourly = {r["node"]: r for r in delivery(jb, al, inv, tree, start=at(0), end=at(2), now=at(3),
                                             settle=timedelta(hours=1)).collect().to_dicts()}
    assert hourly["p1"]["delivery_ratio"] == pytest.approx(0.5)


def test_delivery_time_slicing_settles_over_the_period_not_the_hour():
    # Fair share time-slices a backlogged cluster: p and q (50/50 of 2 GPUs, both wanting 2 GPUs
    # for 4 h) are served in turn, p hours 0 and 2, q hours 1 and 3, both GPUs each time.
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2}])
    tree = org([("root", None, 1), ("p", "root", 1), ("q", "root", 1)])
    jb = jobs([{"job_id": f"{x}{h}", "project": x, "gpus": 2, "submit": at(0), "start": at(h), "end": at(h + 1)}
               for x, hours in (("p", (0, 2)), ("q", (1, 3))) for h in hours])
    al = allocations([(f"{x}{h}", g, at(h), at(h + 1)) for x, hours in (("p", (0, 2)), ("q", (1, 3)))
                      for h in hours for g in (1, 2)])
    # Entitled 1 GPU-h each hour. p wants 4 GPUs in hour 0 (p0 runs, p2 waits), 2 in hours 1-2,
    # none in hour 3 -> owed 1+1+1+0 = 3; q wants 4, 4, 2, 2 -> owed 4. Allocated 4 each.
    # Settled over 2 h periods: p min(2, 2) + min(2, 1) = 3 -> 1.0; q min(2, 2) + min(2, 2) = 4 -> 1.0.
    # Hour by hour: p min(2,1) + 0 + min(2,1) = 2 -> 2/3; q 0 + 1 + 0 + 1 = 2 -> 0.5, though each
    # got its half of every 2 h.
    rows = {r["node"]: r for r in delivery(jb, al, inv, tree, start=at(0), end=at(4), now=at(5),
                                           settle=timedelta(hours=2)).collect().to_dicts()}
    assert (rows["p"]["gpu_hours_owed"], rows["q"]["gpu_hours_owed"]) == pytest.approx((3, 4))
    assert (rows["p"]["delivery_ratio"], rows["p"]["delivery_ratio_hourly"]) == pytest.approx((1.0, 2 / 3))
    assert (rows["q"]["delivery_ratio"], rows["q"]["delivery_ratio_hourly"]) == pytest.approx((1.0, 0.5))
    # A surplus in one period does not pay for a shortfall in the next: p served hours 0 and 1,
    # q hours 2 and 3.
    jb2 = jobs([{"job_id": f"{x}{h}", "project": x, "gpus": 2, "submit": at(0), "start": at(h), "end": at(h + 1)}
                for x, hours in (("p", (0, 1)), ("q", (2, 3))) for h in hours])
    al2 = allocations([(f"{x}{h}", g, at(h), at(h + 1)) for x, hours in (("p", (0, 1)), ("q", (2, 3)))
                       for h in hours for g in (1, 2)])
    rows2 = {r["node"]: r for r in delivery(jb2, al2, inv, tree, start=at(0), end=at(4), now=at(5),
                                            settle=timedelta(hours=2)).collect().to_dicts()}
    # p: hours 0-1 owed 1 + 1 (demand 4 then 2), allocated 4 -> delivered 2; hours 2-3 no demand
    # (its jobs ended at 02:00), owed 0 -> 2 of 2, 1.0. q: hours 0-1 owed 1 + 1 (waiting),
    # allocated 0; hours 2-3 owed 2, allocated 4 -> 2. Delivered 2 of 4 -> 0.5.
    assert (rows2["p"]["gpu_hours_owed"], rows2["p"]["delivery_ratio"]) == pytest.approx((2, 1.0))
    assert (rows2["q"]["gpu_hours_owed"], rows2["q"]["delivery_ratio"]) == pytest.approx((4, 0.5))
    with pytest.raises(ValueError, match="settle"):
        delivery(jb, al, inv, tree, start=at(0), end=at(4), now=at(5), settle=timedelta(0))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20 * 24), st.integers(1, 72), st.sampled_from(["p", "q"])),
             min_size=1, max_size=6),
    st.integers(1, 10),
    st.integers(1, 20),
)
def test_decayed_never_exceeds_window_for_equal_windows(allocs, window_days, half_life_days):
    inv = gpus([{"gpu_id": 1}])
    al = allocations([(f"j{i}", 1, at(s), at(s + d)) for i, (s, d, _) in enumerate(allocs)])
    jb = jobs([{"job_id": f"j{i}", "project": p} for i, (_, _, p) in enumerate(allocs)])
    window = timedelta(days=window_days)
    df = project_usage(al, inv, jb, as_of=at(15 * 24, 17), window=window,
                       half_life=timedelta(days=half_life_days), decay_horizon=window).collect()
    assert (df["gpu_hours_decayed"] <= df["gpu_hours_window"] + 1e-9).all()
    assert (df["gpu_hours_decayed"] >= 0).all()


LEAVES = ["a1", "a2", "b1", "b2"]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(1, 100), min_size=6, max_size=6),
    st.lists(st.sampled_from([0.0, 1.0, 5.0, 17.5, 100.0]), min_size=4, max_size=4),
    st.sampled_from(LEAVES),
    st.floats(0.01, 500),
)
def test_adding_usage_never_raises_fair_share_rank(shares, usage, target, extra):
    tree = org([("acme", None, 1), ("A", "acme", shares[0]), ("a1", "A", shares[1]), ("a2", "A", shares[2]),
                ("B", "acme", shares[3]), ("b1", "B", shares[4]), ("b2", "B", shares[5])])
    before_u = dict(zip(LEAVES, usage, strict=True))
    after_u = {**before_u, target: before_u[target] + extra}
    rank = lambda u: dict(fair_share(tree, _usage(**u), usage_col="u").collect()
                          .select("node", "fs_rank").drop_nulls().iter_rows())[target]
    # rank 1 is served first; more usage may only move the project down (a larger number).
    assert rank(after_u) >= rank(before_u)


# --- issue 8, item 12: Fair Tree ties (slurm.schedmd.com/fair_tree.html, "Ties") ---------------

def test_tied_sibling_accounts_have_their_children_ranked_together():
    tree = org([("acme", None, 1), ("A", "acme", 1), ("a1", "A", 1), ("a2", "A", 1),
                ("B", "acme", 1), ("b1", "B", 1), ("b2", "B", 1)])
    df = fair_share(tree, _usage(a1=40, a2=10, b1=30, b2=20), usage_col="u").collect()
    rows = {r["node"]: r for r in df.to_dicts()}
    # A and B: s = 0.5, u = 50/100 = 0.5 -> LF 1.0 each: tied, so their children are merged.
    assert rows["A"]["level_fs"] == rows["B"]["level_fs"] == 1.0
    # Within their own parent: a1 0.5/0.8 = 0.625, a2 0.5/0.2 = 2.5, b1 0.5/0.6 = 0.8333, b2 0.5/0.4 = 1.25.
    # Ranked together: a2 (2.5), b2 (1.25), b1 (0.833), a1 (0.625). By name (today) A's two would
    # come first: a2, a1, b2, b1.
    leaves = df.filter(pl.col("fs_rank").is_not_null()).sort("order")
    assert leaves["node"].to_list() == ["a2", "b2", "b1", "a1"]
    assert leaves["fs_rank"].to_list() == [1, 2, 3, 4]
    assert leaves["fairshare_factor"].to_list() == pytest.approx([1.0, 0.75, 0.5, 0.25])
    assert df.sort("order")["node"].to_list() == ["acme", "A", "B", "a2", "b2", "b1", "a1"]


def test_project_tied_with_an_account_goes_first_and_shares_the_rank():
    # acme -> x (project) and Y (account) -> y1, y2; x and Y: s = 0.5, u = 0.5 -> LF 1.0, tied.
    tree = org([("acme", None, 1), ("x", "acme", 1), ("Y", "acme", 1), ("y1", "Y", 1), ("y2", "Y", 1)])
    df = fair_share(tree, _usage(x=10, y1=5, y2=5), usage_col="u").collect()
    ranks = dict(df.filter(pl.col("fs_rank").is_not_null()).select("node", "fs_rank").iter_rows())
    # The project sorts before the tied account; Y's best project (y1, y2: LF 1.0 each, tied with
    # each other too) starts tied with x: all three share rank 1. Today "Y" < "x" by name puts Y
    # first and x gets rank 3.
    assert ranks == {"x": 1, "y1": 1, "y2": 1}
    assert df.sort("order")["node"].to_list() == ["acme", "x", "Y", "y1", "y2"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20 * 24 * 60), st.integers(1, 90 * 60), st.sampled_from(["p", "q"]),
                       st.booleans()), min_size=1, max_size=8),
    st.integers(0, 59),
    st.sampled_from([None, 3, 9]),
)
def test_usage_from_day_pieces_is_the_hourly_pieces_usage(allocs, as_of_minute, horizon_days):
    # Fair share reads 70 days of usage; cut by the hour a month at 16,384 GPUs held ~13 GiB of
    # pieces (issue 41), so usage cuts by UTC day. Reference here: the hourly pieces summed by hand
    # (window = the pieces clipped at as_of - 7 d; decay = Σ GPU-h x the piece's mean weight), on
    # allocations that start at any minute, cross midnights and may still be running at as_of.
    inv = gpus([{"gpu_id": g} for g in (1, 2)])
    al = allocations([(f"j{i}", 1 + i % 2, at(0, m), None if running else at(0, m + d))
                      for i, (m, d, _, running) in enumerate(allocs)])
    jb = jobs([{"job_id": f"j{i}", "project": p} for i, (_, _, p, _) in enumerate(allocs)])
    as_of = at(15 * 24, as_of_minute)
    horizon = None if horizon_days is None else timedelta(days=horizon_days)
    got = {r["project"]: r for r in project_usage(al, inv, jb, as_of=as_of, decay_horizon=horizon).collect().to_dicts()}

    hourly = allocated_pieces(al, inv, now=as_of, start=None if horizon is None else as_of - horizon, end=as_of,
                              jobs=jb).join(jb.select("job_id", "project"), on="job_id")
    decayed = hourly.group_by("project").agg((pl.col("gpu_hours_allocated") * decay_weight(as_of, 7 * DAY)).sum())
    window = (clip_pieces(allocated_pieces(al, inv, now=as_of, end=as_of, jobs=jb), as_of - 7 * DAY)
              .join(jb.select("job_id", "project"), on="job_id")
              .group_by("project").agg((pl.col("piece_s") / 3600.0).sum()))
    want_decayed = dict(decayed.collect().iter_rows())
    want_window = dict(window.collect().iter_rows())
    for project in set(want_decayed) | set(want_window):
        assert got[project]["gpu_hours_decayed"] == pytest.approx(want_decayed.get(project, 0.0), rel=1e-9, abs=1e-9)
        assert got[project]["gpu_hours_window"] == pytest.approx(want_window.get(project, 0.0), rel=1e-9, abs=1e-9)


def test_a_usage_piece_is_a_utc_day_not_an_hour():
    # 01:30 on day 0 to 02:00 on day 2 (48.5 h): three pieces (22.5 h, 24 h, 2 h), not 49 hourly ones.
    inv = gpus([{"gpu_id": 1}])
    al = allocations([("j", 1, at(1, 30), at(50))])
    day_pieces = allocated_pieces(al, inv, now=at(100), every=USAGE_PIECE).collect()
    assert day_pieces["piece_s"].to_list() == [22.5 * 3600, 24 * 3600, 2 * 3600]
    assert allocated_pieces(al, inv, now=at(100)).collect().height == 49
