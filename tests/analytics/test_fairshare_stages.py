"""The named stages of fair_share and delivery (issue 22), each on its own, numbers by hand.
Org: acme → prog (3 shares) → p1, p2 (1 each); acme → p3 (1 share)."""

from __future__ import annotations

import math
from datetime import timedelta

import polars as pl
import pytest

from gpuledger.analytics import fairshare as fs
from gpuledger.analytics.tree import Tree
from tests.helpers.analytics_frames import at, gpus, org

H = timedelta(hours=1)
TREE = org([("acme", None, 1), ("prog", "acme", 3), ("p1", "prog", 1), ("p2", "prog", 1), ("p3", "acme", 1)])
T = Tree.from_frame(TREE)


def test_subtree_usage_rolls_projects_up():
    # prog = p1 3 + p2 1 = 4; acme = prog 4 + p3 4 = 8.
    assert fs.subtree_usage(T, {"p1": 3, "p2": 1, "p3": 4}) == {"acme": 8.0, "prog": 4.0, "p1": 3.0, "p2": 1.0,
                                                               "p3": 4.0}
    # A rolled-up frame already holding more for prog (5 > 4) keeps it; None counts as 0.
    assert fs.subtree_usage(T, {"p1": 3, "p2": None, "prog": 5, "p3": 4})["prog"] == 5.0


def test_level_fair_share_compares_siblings():
    """prog vs p3: s = 3/4 and 1/4, u = 4/8 each: LF 1.5 and 0.5. p1 vs p2: s = 1/2 each,
    u = 3/4 and 1/4: LF 2/3 and 2. acme alone: 1/1."""
    shares, usage, lf = fs.level_fair_share(T, {"acme": 8.0, "prog": 4.0, "p1": 3.0, "p2": 1.0, "p3": 4.0})
    assert (shares["prog"], shares["p3"], usage["prog"]) == (0.75, 0.25, 0.5)
    assert lf == pytest.approx({"acme": 1.0, "prog": 1.5, "p3": 0.5, "p1": 2 / 3, "p2": 2.0})
    # no usage: a share is served first (inf); p2 then has all of prog's usage (u = 1, s = 1/2)
    _, _, lf = fs.level_fair_share(T, {"acme": 4.0, "prog": 4.0, "p1": 0.0, "p2": 4.0, "p3": 0.0})
    assert lf["p1"] == math.inf and lf["p3"] == math.inf and lf["p2"] == 0.5


def test_entitled_hourly_is_the_global_share_of_capacity():
    """2 GPUs, 2 hours: 2 GPU-h an hour. Global shares: p1 = p2 = 3/4 × 1/2 = 3/8, p3 = 1/4:
    p1 0.75 and p3 0.5 each hour; all of it 4 GPU-h."""
    start = at(0)
    got = fs.entitled_hourly(TREE, gpus([{"gpu_id": 1}, {"gpu_id": 2, "uuid": "G2"}]), start=start,
                             end=start + 2 * H).collect()
    per = got.group_by("project").agg(pl.col("gpu_hours_entitled").sum(), pl.len())
    assert dict(per.select("project", "gpu_hours_entitled").iter_rows()) == pytest.approx({"p1": 1.5, "p2": 1.5,
                                                                                          "p3": 1.0})
    assert per["len"].to_list() == [2, 2, 2]  # one row per project and hour
    assert got["gpu_hours_entitled"].sum() == pytest.approx(4.0)


def _hour_frame(col, rows):
    return pl.LazyFrame({"project": [r[0] for r in rows], "hour": [r[1] for r in rows], col: [float(r[2]) for r in rows]})


def test_owed_hourly_caps_the_share_at_demand():
    """a: entitled 2, demand 1, allocated 3: owed 1, delivered 1. b: entitled 1, no demand: owed
    0, its 0.5 allocated delivers nothing owed. c: allocated only (no share): owed 0."""
    h = at(0)
    got = fs.owed_hourly(_hour_frame("gpu_hours_entitled", [("a", h, 2), ("b", h, 1)]),
                         _hour_frame("gpu_hours_demand", [("a", h, 1)]),
                         _hour_frame("gpu_hours_allocated", [("a", h, 3), ("b", h, 0.5), ("c", h, 1)])).collect()
    rows = {r["project"]: (r["gpu_hours_owed"], r["gpu_hours_delivered_hourly"], r["gpu_hours_entitled"])
            for r in got.iter_rows(named=True)}
    assert rows == {"a": (1.0, 1.0, 2.0), "b": (0.0, 0.0, 1.0), "c": (0.0, 0.0, 0.0)}


def test_settled_per_project_settles_over_the_period():
    """a got 2 in hour 0 when nothing was owed and nothing in hour 1 when 1 was owed. Settled over
    the whole range: min(2, 1) = 1 delivered. Settled hourly: min(2, 0) + min(0, 1) = 0."""
    h0 = at(0)
    hourly = pl.LazyFrame({"project": ["a", "a"], "hour": [h0, h0 + H], "gpu_hours_entitled": [1.0, 1.0],
                           "gpu_hours_demand": [0.0, 1.0], "gpu_hours_owed": [0.0, 1.0],
                           "gpu_hours_allocated": [2.0, 0.0], "gpu_hours_delivered_hourly": [0.0, 0.0]})
    whole = fs.settled_per_project(hourly, start=h0, end=h0 + 2 * H, settle=None).collect().row(0, named=True)
    assert (whole["gpu_hours_allocated"], whole["gpu_hours_owed"], whole["gpu_hours_delivered"]) == (2.0, 1.0, 1.0)
    hourly_settled = fs.settled_per_project(hourly, start=h0, end=h0 + 2 * H, settle=H).collect()
    assert hourly_settled["gpu_hours_delivered"].to_list() == [0.0]
    with pytest.raises(ValueError, match="settle must be a positive period"):
        fs.settled_per_project(hourly, start=h0, end=h0 + 2 * H, settle=timedelta(0))


def test_delivery_ratios_sum_up_the_tree():
    """p1 owed 4, delivered 3 (2 hour by hour), entitled 8, allocated 6; p2 owed nothing, was
    entitled nothing: its ratios are NULL. prog = p1 + p2: 3/4, 2/4, occupancy 6/8."""
    p1 = {"gpu_hours_entitled": 8, "gpu_hours_demand": 4, "gpu_hours_owed": 4, "gpu_hours_allocated": 6,
          "gpu_hours_delivered_hourly": 2, "gpu_hours_delivered": 3}
    cols = list(p1)
    values = {"p1": p1, "p2": dict.fromkeys(cols, 0)}
    per_project = pl.LazyFrame({"project": list(values), **{c: [float(values[p][c]) for p in values] for c in cols}})
    got = {r["node"]: r for r in fs.delivery_ratios(per_project, TREE).collect().iter_rows(named=True)}
    assert (got["p1"]["delivery_ratio"], got["p1"]["delivery_ratio_hourly"], got["p1"]["occupancy_ratio"]) == (
        0.75, 0.5, 0.75)
    assert got["p2"]["delivery_ratio"] is None and got["p2"]["occupancy_ratio"] is None
    assert (got["prog"]["delivery_ratio"], got["prog"]["delivery_ratio_hourly"], got["prog"]["occupancy_ratio"]) == (
        0.75, 0.5, 0.75)
