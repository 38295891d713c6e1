"""The named stages of attribute_usage (issue 22), each on hand-made rows, numbers by hand."""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from gpuledger.analytics import attribution as at_
from tests.helpers.analytics_frames import allocations, at, every, gpus, samples

MIN = timedelta(minutes=1)
SIGNAL_COLS = ["sm_active", "gr_engine_active", "gpu_util"]


def _pieces(allocs, inv):
    return at_.indexed_pieces(at_.allocated_pieces(allocs, inv, now=at(12)))


def test_indexed_pieces_number_the_rows_once_materialized():
    inv = gpus([{"gpu_id": 1}])
    # 10:30-12:00: two pieces (10:30-11:00 and 11:00-12:00), numbered 0 and 1
    out = at_.indexed_pieces(at_.allocated_pieces(allocations([("A", 1, at(10, 30), at(12))]), inv, now=at(12)))
    assert isinstance(out, pl.LazyFrame)
    got = out.collect().sort("_pid")
    assert got["_pid"].to_list() == [0, 1] and got["piece_s"].to_list() == [1800.0, 3600.0]
    assert at_.indexed_pieces(got.drop("_pid")).collect()["_pid"].to_list() == [0, 1]  # a DataFrame too


def test_flag_shared_marks_only_overlapping_holders_of_one_device():
    inv = gpus([{"gpu_id": 1}, {"gpu_id": 2}])
    allocs = allocations([
        ("D", 1, at(10), at(10, 40), 0.5),   # D and E overlap on GPU 1 10:20-10:40: both shared
        ("E", 1, at(10, 20), at(11), 0.5),
        ("F", 2, at(10), at(10, 30)),         # F then G on GPU 2, one after the other: not shared
        ("G", 2, at(10, 30), at(11)),
    ])
    pieces = _pieces(allocs, inv)
    out = at_.flag_shared(pieces, pieces).collect()
    assert dict(zip(out["job_id"], out["_shared"])) == {"D": True, "E": True, "F": False, "G": False}


def _window(rows: list[dict]) -> pl.LazyFrame:
    """Pieces with their sums: alloc (GPU-hours), and optionally n, sums/counts per signal
    (sm, n_sm, gr, n_gr, util, n_util), energy_j, seen, is_mig, shared, mig_j, piece_s, fractions."""
    cols = {
        "job_id": [r["job_id"] for r in rows],
        "gpu_hours_allocated": [r["alloc"] for r in rows],
        "piece_s": [r.get("piece_s", 3600.0) for r in rows],
        "device_fraction": [r.get("device_fraction", 1.0) for r in rows],
        "alloc_fraction": [r.get("alloc_fraction", 1.0) for r in rows],
        "is_mig": [r.get("is_mig", False) for r in rows],
        "_shared": [r.get("shared", False) for r in rows],
        "w_n": [float(r.get("n", 60)) for r in rows],
        "w_energy_j": [float(r.get("energy_j", 0.0)) for r in rows],
        "w_energy_seen": [r.get("seen", False) for r in rows],
        "mig_energy_j": [r.get("mig_j") for r in rows],
    }
    for name, short in zip(SIGNAL_COLS, ("sm", "gr", "util")):
        cols[f"w_{name}"] = [float(r.get(short, 0.0)) for r in rows]
        cols[f"w_n_{name}"] = [float(r.get(f"n_{short}", 0)) for r in rows]
    return pl.LazyFrame(cols, schema_overrides={"mig_energy_j": pl.Float64})


def test_piece_usage_splits_allocated_hours_by_the_best_signal():
    rows = [
        # sm 60 readings Σ 48 → 0.8 (gr ignored: sm is better); 1 h → active 0.8, idle 0.2
        {"job_id": "A", "alloc": 1.0, "sm": 48, "n_sm": 60, "gr": 6, "n_gr": 60},
        # MIG: gpu_util is not used there, gr 30 of 60 → 0.5 of 1/7 h → active 1/14
        {"job_id": "M", "alloc": 1 / 7, "is_mig": True, "gr": 30, "n_gr": 60, "util": 0, "n_util": 60},
        # MIG with only gpu_util: unknown, its 3/7 h all unknown
        {"job_id": "U", "alloc": 3 / 7, "is_mig": True, "util": 54, "n_util": 60},
        # time-sliced: a reading, but nobody's: unknown
        {"job_id": "S", "alloc": 0.5, "util": 36, "n_util": 60, "shared": True},
        # no samples at all: unknown
        {"job_id": "N", "alloc": 1.0, "n": 0},
    ]
    out = {r["job_id"]: r for r in at_.piece_usage(_window(rows)).collect().iter_rows(named=True)}
    got = {j: (r["activity_signal"], r["activity_ratio"]) for j, r in out.items()}
    assert got == {"A": ("sm_active", 0.8), "M": ("gr_engine_active", 0.5), "U": (None, None),
                   "S": (None, None), "N": (None, None)}
    assert abs(out["A"]["gpu_hours_active"] - 0.8) < 1e-12 and abs(out["A"]["gpu_hours_idle"] - 0.2) < 1e-12
    assert abs(out["M"]["gpu_hours_active"] - 1 / 14) < 1e-12 and abs(out["M"]["gpu_hours_idle"] - 1 / 14) < 1e-12
    for j, hours in (("U", 3 / 7), ("S", 0.5), ("N", 1.0)):
        assert (out[j]["gpu_hours_active"], out[j]["gpu_hours_idle"]) == (0.0, 0.0)
        assert out[j]["gpu_hours_unknown"] == hours
    assert out["A"]["gpu_hours_unknown"] == 0.0 and out["M"]["gpu_hours_unknown"] == 0.0


def test_piece_usage_energy_whole_gpu_and_mig():
    rows = [
        # whole GPU, counter +7.2 MJ over the piece, held at half: 7.2e6 × 1 × 0.5 / 3.6e6 = 1.0 kWh
        {"job_id": "W", "alloc": 0.5, "alloc_fraction": 0.5, "energy_j": 7.2e6, "seen": True},
        # MIG: its hour's 3.6e6 J, a 30-min piece, whole allocation: 3.6e6 × 1800/3600 / 3.6e6 = 0.5 kWh
        # (w_energy_j is not used on MIG)
        {"job_id": "M", "alloc": 1 / 14, "is_mig": True, "piece_s": 1800.0, "mig_j": 3.6e6,
         "energy_j": 9e9, "seen": True},
        # no energy reading: unknown, not 0
        {"job_id": "X", "alloc": 1.0},
        {"job_id": "Y", "alloc": 1 / 7, "is_mig": True},
    ]
    out = dict(at_.piece_usage(_window(rows)).select("job_id", "energy_kwh").collect().iter_rows())
    assert (out["X"], out["Y"]) == (None, None)
    assert abs(out["W"] - 1.0) < 1e-12 and abs(out["M"] - 0.5) < 1e-12  # float products, not exact


def test_window_with_mig_energy_adds_sums_and_the_instance_share():
    """A 3g instance (3/7) of GPU G whose energy counter (on the whole GPU's row, id 10) rises 700 J
    a minute; a whole GPU 20 beside it. Both held 10:00-11:00 (one whole-hour piece each)."""
    inv = gpus([{"gpu_id": 10, "uuid": "G", "mig": -1}, {"gpu_id": 11, "uuid": "G", "mig": 1, "profile": "3g.40gb",
                "fraction": 3 / 7}, {"gpu_id": 20}])
    rows = [{"gpu_id": 10, "ts": at(9, 59), "energy": 0.0}]
    rows += [{"gpu_id": 10, "ts": at(10) + i * MIN, "energy": 700.0 * (i + 1)} for i in range(60)]
    rows += every(11, at(10), at(11), gr=0.25)
    rows += every(20, at(10), at(11), sm=0.5)
    smp = samples(rows)
    pieces = _pieces(allocations([("J", 11, at(10), at(11)), ("K", 20, at(10), at(11))]), inv)
    energy = at_.hourly_energy(at_.hourly_rollup(smp)).collect().lazy()
    out = {r["job_id"]: r for r in at_.window_with_mig_energy(pieces, smp, energy, inv).collect().iter_rows(named=True)}
    # G: 60 increments of 700 J (the first from 09:59's 0 J) = 42,000 J; 3/7 of it = 18,000 J
    assert abs(out["J"]["mig_energy_j"] - 18_000.0) < 1e-6
    assert out["K"]["mig_energy_j"] is None  # a whole GPU: no MIG share
    # the sums of the hour's samples: 60 readings, Σ gr 60 × 0.25 = 15; Σ sm 60 × 0.5 = 30
    assert (out["J"]["w_n"], out["J"]["w_gr_engine_active"], out["J"]["w_n_gr_engine_active"]) == (60.0, 15.0, 60.0)
    assert (out["K"]["w_n"], out["K"]["w_sm_active"], out["K"]["w_n_sm_active"]) == (60.0, 30.0, 60.0)


# --- _window_sums' stages: whole hours from the rollup, partial hours from the raw samples -----

def _hourly(rows):
    return at_.hourly_energy(at_.hourly_rollup(samples(rows))).collect().lazy()


def test_full_hour_sums_take_the_hours_rollup():
    """GPU 1, 10:00-11:00: sm 0.5 each minute, counter 1000 J at 09:59 then +10 J a minute.
    GPU 2 has no sample that hour: sums 0, energy not seen."""
    rows = [{"gpu_id": 1, "ts": at(9, 59), "energy": 1000.0}]
    rows += [{"gpu_id": 1, "ts": at(10) + i * MIN, "sm": 0.5, "energy": 1010.0 + 10 * i} for i in range(60)]
    pieces = _pieces(allocations([("A", 1, at(10), at(11)), ("B", 2, at(10), at(11))]),
                     gpus([{"gpu_id": 1}, {"gpu_id": 2}]))
    out = {r["job_id"]: r for r in at_.full_hour_sums(pieces, _hourly(rows)).collect().iter_rows(named=True)}
    # 60 readings Σ 30; energy: 60 increments of 10 J, the first from 09:59's 1000 J = 600 J
    a = out["A"]
    assert (a["w_n"], a["w_sm_active"], a["w_n_sm_active"], a["w_n_gpu_util"]) == (60, 30.0, 60, 0)
    assert (a["w_energy_j"], a["w_energy_seen"]) == (600.0, True)
    b = out["B"]
    assert (b["w_n"], b["w_sm_active"], b["w_energy_j"], b["w_energy_seen"]) == (0, 0, 0, False)
    assert not {"_gh", "prev_last", "energy_seen", "s_n"} & set(a)


def test_partial_hour_samples_count_each_increment_from_the_sample_before():
    rows = [{"gpu_id": 1, "ts": at(9, 59), "energy": 1000.0},    # hour 9: only the predecessor
            {"gpu_id": 1, "ts": at(10, 0), "energy": 1100.0},    # +100 from 09:59's 1000
            {"gpu_id": 1, "ts": at(10, 1), "energy": 1200.0},    # +100
            {"gpu_id": 1, "ts": at(10, 2), "energy": 50.0},      # a drop: reset, +50
            {"gpu_id": 1, "ts": at(10, 3), "sm": 0.2},           # no reading: 0
            {"gpu_id": 1, "ts": at(10, 4), "energy": 150.0},     # +100 from 10:02's 50
            {"gpu_id": 1, "ts": at(11, 0), "energy": 9999.0}]    # hour 11: not a partial hour here
    pieces = _pieces(allocations([("A", 1, at(10, 30), at(11))]), gpus([{"gpu_id": 1}]))
    raw = at_.partial_hour_samples(pieces, samples(rows), _hourly(rows)).collect().sort("ts")
    assert raw["ts"].to_list() == [at(10, m) for m in range(5)]
    assert raw["_inc"].to_list() == [100.0, 100.0, 50.0, 0.0, 100.0]
    assert raw["_w"].to_list() == [1] * 5


def test_partial_hour_sums_add_the_samples_inside_the_piece():
    """Piece 10:30-11:00 on GPU 1: the 10:29 sample is outside; 10:30 (an aggregate of 3, sm 0.4)
    and 10:45 (one sample, sm 1.5, clipped to 1) are in. Piece on GPU 2 has no sample."""
    pieces = _pieces(allocations([("A", 1, at(10, 30), at(11)), ("B", 2, at(10, 30), at(11))]),
                     gpus([{"gpu_id": 1}, {"gpu_id": 2}])).filter(pl.col("hour") == at(10))
    raw = pl.LazyFrame({"gpu_id": [1, 1, 1], "ts": [at(10, 29), at(10, 30), at(10, 45)],
                        "hour": [at(10)] * 3, "sm_active_ratio": [0.9, 0.4, 1.5],
                        "gr_engine_active_ratio": [None, None, None], "gpu_util_ratio": [None, 0.3, None],
                        "energy_total_j": [None, 10.0, None], "_w": [1, 3, 1], "_inc": [7.0, 5.0, 0.0]},
                       schema_overrides={"gpu_id": pl.Int32, "gr_engine_active_ratio": pl.Float64,
                                         "_w": pl.Int64})
    out = {r["job_id"]: r for r in at_.partial_hour_sums(pieces, raw).collect().iter_rows(named=True)}
    a = out["A"]
    # w_n 3 + 1 = 4; Σ sm 0.4 × 3 + 1.0 × 1 = 2.2; util read by the 3-sample row only; energy 5 J
    assert (a["w_n"], a["w_n_sm_active"], a["w_n_gpu_util"], a["w_n_gr_engine_active"]) == (4, 4, 3, 0)
    assert abs(a["w_sm_active"] - 2.2) < 1e-12 and abs(a["w_gpu_util"] - 0.9) < 1e-12
    assert (a["w_energy_j"], a["w_energy_seen"]) == (5.0, True)
    b = out["B"]
    assert (b["w_n"], b["w_sm_active"], b["w_energy_seen"]) == (None, None, False)  # NULL: filled later
