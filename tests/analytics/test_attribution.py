"""Usage attribution on a hand-built cluster: whole, MIG and shared GPUs; signals; energy resets."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.analytics.attribution import attribute_usage, rollup_usage
from gpuledger.analytics.intervals import clip_pieces, split_by_hour
from tests.helpers.analytics_frames import allocations, at, every, gpus, jobs, org, samples

MIN = timedelta(minutes=1)

INVENTORY = gpus([
    {"gpu_id": 1},                                                          # whole H100
    {"gpu_id": 2, "uuid": "GPU-M", "mig": 1, "profile": "1g.10gb", "fraction": 1 / 7},
    {"gpu_id": 3, "uuid": "GPU-M", "mig": 2, "profile": "3g.40gb", "fraction": 3 / 7},
    {"gpu_id": 4},                                                          # shared by D and E
    {"gpu_id": 5},                                                          # no samples at all
])
ALLOCS = allocations([
    ("A", 1, at(10, 30), at(12)),
    ("B", 2, at(10), at(12)),
    ("C", 3, at(10), at(11)),
    ("D", 4, at(10), at(11), 0.5),
    ("E", 4, at(10), at(11), 0.5),
    ("F", 5, at(10), None),  # still running; now = 11:00
])
JOBS = jobs([
    {"job_id": "A", "project": "p1", "user": "ann"},
    {"job_id": "B", "project": "p1", "user": "bob"},
    {"job_id": "C", "project": "p2", "user": "bob"},
    {"job_id": "D", "project": "p2", "user": "cat"},
    {"job_id": "E", "project": "p2", "user": "cat"},
    {"job_id": "F", "project": "p3", "user": "cat"},
])


def _samples():
    rows = []
    # GPU 1: sm 0 before A arrives (10:00-10:30), 0.8 while A holds it; gr 0.1 all along (ignored:
    # sm_active is the better signal). Energy counter +600 J a minute from 1000 J, reset to 50 J at 11:00.
    for i in range(120):
        t = at(10) + i * MIN
        energy = 1000.0 + 600 * i if i < 60 else 50.0 + 600 * (i - 60)
        rows.append({"gpu_id": 1, "ts": t, "sm": 0.0 if i < 30 else 0.8, "gr": 0.1, "energy": energy})
    # MIG 1g: gr 0.5; gpu_util reads 0 on MIG and must be ignored.
    rows += every(2, at(10), at(12), gr=0.5, util=0.0)
    # MIG 3g: only gpu_util (meaningless on MIG) -> activity unknown.
    rows += every(3, at(10), at(11), util=0.9)
    # Shared GPU: only gpu_util, 0.6.
    rows += every(4, at(10), at(11), util=0.6)
    return samples(rows)


def _attribution(now=None):
    return attribute_usage(ALLOCS, INVENTORY, _samples(), now=now or at(12)).collect()


def _row(df, job, hour):
    return df.filter((pl.col("job_id") == job) & (pl.col("hour") == at(hour))).to_dicts()[0]


def test_split_by_hour_cuts_at_hours_and_now():
    lf = pl.LazyFrame({"start_time": [at(10, 30)], "end_time": [None]}, schema={
        "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us")})
    df = split_by_hour(lf, now=at(12, 15)).collect()
    # 10:30-11:00 (1800 s), 11:00-12:00 (3600 s), 12:00-12:15 (900 s)
    assert df["hour"].to_list() == [at(10), at(11), at(12)]
    assert df["piece_s"].to_list() == [1800.0, 3600.0, 900.0]


def test_clip_pieces_gives_the_split_from_the_later_start():
    # usage's 7-day window is its decay's pieces clipped (one cut): equal, to the bit, to cutting
    # again from the window start. 10:30 -> 13:05 (still held at now 13:05) and 09:00 -> 11:40,
    # clipped at 11:20 (not on the hour): 11:20-12:00 (2400 s), 12:00-13:00, 13:00-13:05 for the
    # first; 11:20-11:40 (1200 s) for the second; the 10:xx pieces dropped.
    lf = pl.LazyFrame({"start_time": [at(10, 30), at(9)], "end_time": [None, at(11, 40)]}, schema={
        "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us")})
    clipped = clip_pieces(split_by_hour(lf, now=at(13, 5)), at(11, 20)).collect()
    assert clipped.equals(split_by_hour(lf, now=at(13, 5), start=at(11, 20)).collect())
    assert clipped["piece_s"].to_list() == [2400.0, 3600.0, 300.0, 1200.0]


def test_whole_gpu_uses_sm_active_only_inside_the_allocation():
    df = _attribution()
    h10 = _row(df, "A", 10)
    # A holds GPU 1 from 10:30: 0.5 GPU-h; samples 10:30..10:59 all sm 0.8 -> active 0.4, idle 0.1.
    # (Averaging the whole clock hour would give sm 0.4 and active 0.2.)
    assert h10["gpu_hours_allocated"] == pytest.approx(0.5)
    assert h10["gpu_hours_active"] == pytest.approx(0.4)
    assert h10["gpu_hours_idle"] == pytest.approx(0.1)
    assert h10["activity_signal"] == "sm_active"
    assert h10["sample_count"] == 30
    h11 = _row(df, "A", 11)
    assert (h11["gpu_hours_allocated"], h11["gpu_hours_active"]) == pytest.approx((1.0, 0.8))


def test_energy_counter_reset_counts_the_new_value():
    df = _attribution()
    # 10:30..10:59: 30 increments of 600 J = 18,000 J = 0.005 kWh.
    assert _row(df, "A", 10)["energy_kwh"] == pytest.approx(18_000 / 3.6e6)
    # 11:00 sample reads 50 J after 36,400 J: a reset, counts 50 J; then 59 × 600 J -> 35,450 J.
    assert _row(df, "A", 11)["energy_kwh"] == pytest.approx(35_450 / 3.6e6)


def test_mig_slice_counts_by_compute_fraction_and_ignores_gpu_util():
    df = _attribution()
    b = _row(df, "B", 10)
    # 1g = 1/7 GPU for one hour; gr_engine 0.5 -> active 1/14. gpu_util 0 on MIG is not used.
    assert b["gpu_hours_allocated"] == pytest.approx(1 / 7)
    assert b["gpu_hours_active"] == pytest.approx(1 / 14)
    assert b["activity_signal"] == "gr_engine_active"
    c = _row(df, "C", 10)
    # 3g slice with only gpu_util: allocated 3/7, activity unknown.
    assert c["gpu_hours_allocated"] == pytest.approx(3 / 7)
    assert c["gpu_hours_unknown"] == pytest.approx(3 / 7)
    assert c["gpu_hours_active"] == 0.0 and c["activity_signal"] is None


def test_shared_gpu_counts_by_allocation_fraction():
    df = _attribution()
    for job in ("D", "E"):
        r = _row(df, job, 10)
        # 0.5 of the GPU for an hour each. The device's util 0.6 is the whole GPU's, not each
        # job's (NVML reports one value on a time-sliced GPU): activity unknown for both, never
        # 0.3 active copied to each (issue 20).
        assert (r["gpu_hours_allocated"], r["gpu_hours_active"], r["gpu_hours_unknown"]) == pytest.approx(
            (0.5, 0.0, 0.5))
        assert r["activity_signal"] is None


def test_held_gpu_without_samples_is_allocated_with_unknown_activity():
    df = _attribution(now=at(11, 30))
    f = df.filter(pl.col("job_id") == "F").sort("hour")
    # Running job, now 11:30: 10:00-11:00 and 11:00-11:30 -> 1.5 GPU-h, all unknown.
    assert f["gpu_hours_allocated"].sum() == pytest.approx(1.5)
    assert f["gpu_hours_unknown"].sum() == pytest.approx(1.5)
    assert f["gpu_hours_idle"].sum() == 0.0


def test_rollups_to_user_project_and_tree():
    df = _attribution().lazy()
    by_project = {r["project"]: r for r in rollup_usage(df, JOBS, by="project").collect().to_dicts()}
    # p1: A 1.5 + B 2/7; active A 1.2 + B 1/7
    assert by_project["p1"]["gpu_hours_allocated"] == pytest.approx(1.5 + 2 / 7)
    assert by_project["p1"]["gpu_hours_active"] == pytest.approx(1.2 + 1 / 7)
    by_user = {r["user_name"]: r["gpu_hours_allocated"] for r in rollup_usage(df, JOBS, by="user").collect().to_dicts()}
    # bob: B 2/7 + C 3/7; cat: D 0.5 + E 0.5 + F 2 (10:00-12:00)
    assert by_user["bob"] == pytest.approx(5 / 7)
    assert by_user["cat"] == pytest.approx(3.0)
    tree = org([("acme", None, 1), ("prog", "acme", 1), ("p1", "prog", 1), ("p2", "prog", 1), ("p3", "acme", 1)])
    by_node = {r["node"]: r for r in rollup_usage(df, JOBS, by="node", org_nodes=tree).collect().to_dicts()}
    assert by_node["prog"]["gpu_hours_allocated"] == pytest.approx(1.5 + 2 / 7 + 3 / 7 + 1.0)
    assert by_node["acme"]["gpu_hours_allocated"] == pytest.approx(1.5 + 5 / 7 + 1.0 + 2.0)
    # unknown hours roll up too: C 3/7 + D 0.5 + E 0.5 (a shared GPU) + F 2
    assert by_node["acme"]["gpu_hours_unknown"] == pytest.approx(3 / 7 + 1.0 + 2.0)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 180), st.integers(1, 240), st.sampled_from([1, 2, 3]),
                       st.sampled_from([0.25, 0.5, 1.0])), min_size=1, max_size=4),
    st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 400), st.floats(0, 1.5), st.booleans()),
             max_size=60),
)
@pytest.mark.slow
def test_allocated_at_least_active(allocs, sample_rows):
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2, "mig": 0, "fraction": 2 / 7, "uuid": "M"}, {"gpu_id": 3}])
    al = allocations([(f"j{i}", g, at(0, s), at(0, s + d), f) for i, (s, d, g, f) in enumerate(allocs)])
    rows = {}
    for g, m, v, use_sm in sample_rows:
        rows[(g, m)] = {"gpu_id": g, "ts": at(0, m), ("sm" if use_sm else "util"): v}
    df = attribute_usage(al, inv, samples(list(rows.values())), now=at(8)).collect()
    assert (df["gpu_hours_active"] <= df["gpu_hours_allocated"] + 1e-12).all()
    assert (df["gpu_hours_active"] >= 0).all()
    # allocated = active + idle + unknown, piece by piece
    total = df["gpu_hours_active"] + df["gpu_hours_idle"] + df["gpu_hours_unknown"]
    assert ((total - df["gpu_hours_allocated"]).abs() < 1e-9).all()


def test_energy_reset_inside_a_whole_hour():
    inv = gpus([{"gpu_id": 1}])
    al = allocations([("R", 1, at(9), at(12))])
    # 09:00-09:59 +100 J a minute from 5000 J (last 10,900); 10:00 11,000 J; 10:01-10:19 keeps rising
    # to 12,900 J; 10:20 the driver reloads: 30 J, then +100 J a minute to 10:59 (3,930 J).
    rows = [{"gpu_id": 1, "ts": at(9, m), "sm": 1.0, "energy": 5000.0 + 100 * m} for m in range(60)]
    rows += [{"gpu_id": 1, "ts": at(10, m), "sm": 1.0,
              "energy": 11_000.0 + 100 * m if m < 20 else 30.0 + 100 * (m - 20)} for m in range(60)]
    df = attribute_usage(al, inv, samples(rows), now=at(12)).collect()
    h9 = df.filter(pl.col("hour") == at(9))["energy_kwh"][0]
    h10 = df.filter(pl.col("hour") == at(10))["energy_kwh"][0]
    # Hour 9: 59 increments of 100 J (the first sample has nothing before it) = 5,900 J.
    assert h9 == pytest.approx(5_900 / 3.6e6)
    # Hour 10: 10:00 counts 100 J from 09:59; 10:01-10:19 19 × 100; 10:20 reset counts 30 J;
    # 10:21-10:59 39 × 100 -> 100 + 1,900 + 30 + 3,900 = 5,930 J.
    assert h10 == pytest.approx(5_930 / 3.6e6)
    # Hour 11: held, no samples: allocated, energy and activity unknown.
    h11 = df.filter(pl.col("hour") == at(11)).to_dicts()[0]
    assert h11["energy_kwh"] is None and h11["gpu_hours_unknown"] == pytest.approx(1.0)


# --- issue 8, item 9: MIG energy whatever the source's convention ------------------------------
# One physical GPU "G" split into a 3g instance (gpu_id 11, 3/7) and a 1g instance (gpu_id 12, 1/7),
# plus NVML's whole-GPU row (gpu_id 10, instance -1). The device uses 7,000 J an hour. Job J3 holds
# the 3g instance, J1 the 1g one, 10:00-11:00. Right: J3 3/7 × 7,000 = 3,000 J, J1 1,000 J.

MIG_INV = gpus([{"gpu_id": 10, "uuid": "G", "mig": -1}, {"gpu_id": 11, "uuid": "G", "mig": 1, "profile": "3g.40gb",
                 "fraction": 3 / 7}, {"gpu_id": 12, "uuid": "G", "mig": 7, "profile": "1g.10gb", "fraction": 1 / 7}])
MIG_ALLOCS = allocations([("J3", 11, at(10), at(11)), ("J1", 12, at(10), at(11))])
MIG_JOBS = jobs([{"job_id": "J3", "project": "p", "start": at(10), "end": at(11)},
                 {"job_id": "J1", "project": "p", "start": at(10), "end": at(11)}])


def _mig_energy(counters: dict[int, float | None]) -> dict[str, float | None]:
    """counters: gpu_id -> J per hour of its counter (None: that row has no counter). Samples every
    10 min from 09:00 (so 10:00's first reading has a predecessor) to 10:50."""
    rows = []
    for gpu_id in (11, 12):
        for k in range(12):
            t = at(9) + timedelta(minutes=10 * k)
            rate = counters.get(gpu_id)
            rows.append({"gpu_id": gpu_id, "ts": t, "sm": 0.5,
                         "energy": None if rate is None else 1e6 + rate * k / 6})
    if counters.get(10) is not None:
        rows += [{"gpu_id": 10, "ts": at(9) + timedelta(minutes=10 * k), "energy": 1e6 + counters[10] * k / 6}
                 for k in range(12)]
    out = attribute_usage(MIG_ALLOCS, MIG_INV, samples(rows), now=at(12), jobs=MIG_JOBS).collect()
    return {r["job_id"]: (None if r["energy_kwh"] is None else r["energy_kwh"] * 3.6e6)
            for r in out.to_dicts()}


@pytest.mark.parametrize("convention", ["lowest instance only (scrape)", "repeated on every instance",
                                        "whole-GPU row only (NVML)"])
def test_mig_energy_is_split_by_compute_whatever_the_convention(convention):
    counters = {"lowest instance only (scrape)": {11: None, 12: 7000.0},   # GI 7 < ... here the 1g holds it
                "repeated on every instance": {11: 7000.0, 12: 7000.0},
                "whole-GPU row only (NVML)": {10: 7000.0}}[convention]
    got = _mig_energy(counters)
    # Today: with the counter on the 1g only, J3 gets 0 J (its instance has samples, no counter);
    # with NVML's whole-GPU row, both get 0.
    assert got["J3"] == pytest.approx(3000.0)
    assert got["J1"] == pytest.approx(1000.0)


def test_mig_energy_per_instance_counters_are_the_instances_own():
    # Each instance with its own counter: 2,500 J and 600 J; today J3 gets 2,500 × 3/7 = 1,071 J.
    got = _mig_energy({11: 2500.0, 12: 600.0})
    assert got["J3"] == pytest.approx(2500.0) and got["J1"] == pytest.approx(600.0)


def test_energy_that_cannot_be_apportioned_is_null_never_zero():
    # No energy counter anywhere (an old board, a DCGM blank): unknown. Today it reads 0 kWh.
    got = _mig_energy({})
    assert got == {"J3": None, "J1": None}
    whole = attribute_usage(allocations([("W", 1, at(10), at(11))]), gpus([{"gpu_id": 1}]),
                            samples(every(1, at(9), at(11), timedelta(minutes=10), sm=0.5)), now=at(12)).collect()
    assert whole["energy_kwh"].to_list() == [None]
