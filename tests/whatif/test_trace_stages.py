"""load_trace's stages (gpuledger.whatif.trace), each on hand-made rows; the whole trace is held by
tests/whatif/test_whatif.py against a warehouse. Expected values derived by hand in the comments."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest

from gpuledger.whatif.inventory import Inventory
from gpuledger.whatif.model import Params
from gpuledger.whatif.trace import (
    DEFAULT_ACTIVITY,
    KIND_ACTIVITY,
    Donor,
    JobRow,
    activity_profile,
    donors_by_kind,
    draw_donor,
    drawn_work,
    held_devices,
    hourly_activity,
    job_model_profile,
    profile_of_fraction,
    recorded_work,
    trace_jobs,
)

START = datetime(2026, 11, 2)
END = datetime(2026, 11, 3)


def job(job_id="j1", *, kind="batch", gpu_model="H100", gpus=1.0, min_rt=None, submit=START, st=None, en=None,
        name=None, cluster="sim") -> JobRow:
    return JobRow(cluster, job_id, "p", "u", name, kind, None, gpu_model, gpus, min_rt, submit, st, en, None, "slurm")


def test_held_devices_adds_up_each_kind_of_device():
    held = held_devices([("sim", "j1", "H100", None, 2), ("sim", "j1", "H100", "3g.40gb", 1),
                         ("sim", "j1", "H100", None, 1), ("sim", "j2", "A100", None, 4)])
    # j1: 2 + 1 whole H100s, 1 MIG instance; j2: 4 A100s
    assert held == {("sim", "j1"): Counter({("H100", None): 3, ("H100", "3g.40gb"): 1}),
                    ("sim", "j2"): Counter({("A100", None): 4})}


def test_hourly_activity_first_source_wins_clamped_and_blanks_say_nothing():
    got = hourly_activity([
        ("sim", "j1", 0, 0.5), ("sim", "j1", 0, 0.9),  # the hourly rollup came first: 0.5 stays
        ("sim", "j1", 1, 1.3),  # clamped to 1.0
        ("sim", "j1", 2, -0.2),  # clamped to 0.0
        ("sim", "j1", 3, None), ("sim", "j1", None, 0.4), ("sim", "j1", -1, 0.4),  # nothing said
        ("sim", "j2", 5.0, 0.25),  # an hour as a float from SQL: 5
    ])
    assert got == {("sim", "j1"): {0: 0.5, 1: 1.0, 2: 0.0}, ("sim", "j2"): {5: 0.25}}


def test_donors_are_the_jobs_that_started_and_ended_by_kind():
    rows = [job("a", st=datetime(2026, 11, 2, 1), en=datetime(2026, 11, 2, 3), min_rt=3600),  # 2 h = 7200 s
            job("b", st=datetime(2026, 11, 2, 1)),  # still running: no donor
            job("c", kind="inference", st=datetime(2026, 11, 2), en=datetime(2026, 11, 2, 0, 30)),  # 1800 s
            job("d")]  # never started
    acts = {("sim", "a"): {0: 0.5}}
    assert donors_by_kind(rows, acts) == {"batch": [Donor("a", 7200.0, 3600, {0: 0.5})],
                                          "inference": [Donor("c", 1800.0, 0, None)]}


def test_a_draw_is_one_per_job_stable_and_seeded():
    donors = {"batch": [Donor(f"d{i}", 600.0 * (i + 1), 0, None) for i in range(50)]}
    j = job("never")
    picks = {draw_donor(j, donors, seed=7) for _ in range(5)}
    assert len(picks) == 1  # the same job and seed: the same donor, every time
    # another seed or another job picks its own (50 donors: the chance all eight coincide is 50^-7)
    assert len({draw_donor(j, donors, seed=s) for s in range(8)}) > 1
    assert len({draw_donor(job(f"n{i}"), donors, seed=7) for i in range(8)}) > 1
    # a kind that never ran has no donor
    assert draw_donor(job("x", kind="training"), donors, seed=7) is None


@pytest.mark.parametrize(("mine", "donor", "want"), [
    # both declare: 1,800 s declared x the donor's 7,200 s run ÷ its 3,600 s declared = 3,600 s
    (1800, Donor("d", 7200.0, 3600, None), 3600.0),
    # the job declares nothing: the donor's runtime as it is
    (None, Donor("d", 7200.0, 3600, None), 7200.0),
    # the donor declares nothing: its runtime
    (1800, Donor("d", 5000.0, 0, None), 5000.0),
    # no donor (its kind never ran): the declared minimum, else 1 h
    (1800, None, 1800.0),
    (None, None, 3600.0),
])
def test_drawn_work(mine, donor, want):
    assert drawn_work(job(min_rt=mine), donor) == want


def test_job_model_profile_the_most_held_device_else_named_else_the_clusters_model():
    held = {("sim", "j1"): Counter({("H100", None): 1, ("H100", "3g.40gb"): 2})}
    models = {"sim": Counter({"B200": 8, "H100": 4})}
    assert job_model_profile(job("j1"), held, models) == ("H100", "3g.40gb")  # 2 instances > 1 GPU
    # no allocations: the profile in the model name, the model's key
    assert job_model_profile(job("j2", gpu_model="NVIDIA H100 80GB HBM3 MIG 1g.10gb"), held, models) == (
        "H100", "1g.10gb")
    # no model at all: the cluster's most common model (8 B200 devices > 4 H100)
    assert job_model_profile(job("j3", gpu_model=None), held, models) == ("B200", None)
    assert job_model_profile(job("j4", gpu_model=None, cluster="other"), held, models) == (None, None)


@pytest.mark.parametrize(("row", "want"), [
    # ran 01:00-04:00 inside the range: 3 h, nothing skipped
    (job(st=datetime(2026, 11, 2, 1), en=datetime(2026, 11, 2, 4)), (10800.0, 0)),
    # started 2026-11-01 22:30, still running: from the range's start to its end (24 h); the hours
    # already run count from 22:00 (the hour it started in): 00:00 - 22:00 = 2 h skipped
    (job(st=datetime(2026, 11, 1, 22, 30)), (86400.0, 2)),
])
def test_recorded_work(row, want):
    assert recorded_work(row, start=START, end=END) == want


def test_a_fraction_of_a_gpu_is_the_mig_profile_it_makes_up():
    profiles = ["1g.10gb", "2g.20gb", "3g.40gb"]
    assert profile_of_fraction(1 / 7, "H100", profiles) == "1g.10gb"
    assert profile_of_fraction(2 / 7, "H100", profiles) == "2g.20gb"  # one 2g, not two 1g
    assert profile_of_fraction(round(3 / 7, 6), "H100", profiles) == "3g.40gb"  # as the warehouse rounds it
    assert profile_of_fraction(0.5, "H100", profiles) is None  # a shared GPU: no profile is half of one
    assert profile_of_fraction(1.0, "H100", profiles) is None
    assert profile_of_fraction(1 / 7, "H100", []) is None


def test_activity_profile_from_samples_or_the_kind():
    # hours 0 and 2 measured, 1 missing (batch's typical activity), work 4 h: 4 hours long
    assert activity_profile({0: 0.5, 2: 0.7}, skip_h=0, work_s=4 * 3600, kind="batch") == (
        (0.5, KIND_ACTIVITY["batch"], 0.7, KIND_ACTIVITY["batch"]), "samples")
    # 2 h already run before the range: hours 2.. replayed; the last measured hour (3) needs 2 of them,
    # the work (30 min) 1: two hours
    assert activity_profile({2: 0.1, 3: 0.2}, skip_h=2, work_s=1800, kind="batch") == ((0.1, 0.2), "samples")
    # the measured hours all before what is replayed: the kind
    assert activity_profile({0: 0.9}, skip_h=1, work_s=3600, kind="inference") == (
        (KIND_ACTIVITY["inference"],), "kind")
    assert activity_profile(None, skip_h=0, work_s=3600, kind=None) == ((DEFAULT_ACTIVITY,), "kind")


def test_trace_jobs_says_why_a_job_is_left_out():
    inv = Inventory.from_counts([{"cluster": "sim", "model": "H100", "count": 2}])
    rows = [job("fits", gpus=2, st=datetime(2026, 11, 2, 1), en=datetime(2026, 11, 2, 2)),
            job("big", gpus=3),  # 3 devices asked, 2 in the pool
            job("b200", gpu_model="B200"),
            job("none", st=datetime(2026, 11, 2, 1), en=datetime(2026, 11, 2, 1))]  # ran 0 s
    jobs, skipped = trace_jobs(rows, pools=inv.pools(), held={}, activity={}, start=START, end=END,
                               params=Params())
    assert [j.job_id for j in jobs] == ["fits"]
    fits = jobs[0]
    # 2 whole GPUs of 1.0 each; 1 h of work; submitted at the range's start (0 s)
    assert (fits.units, fits.unit_size, fits.gpus, fits.work_s, fits.submit_s) == (2, 1.0, 2.0, 3600, 0)
    assert (fits.activity, fits.activity_source) == ((KIND_ACTIVITY["batch"],), "kind")
    assert skipped == [("big", "asks 3 devices of H100, the inventory has 2"),
                       ("b200", "no B200 GPUs of cluster sim in the inventory"),
                       ("none", "ran for no time")]


def test_a_never_started_mig_notebook_keeps_its_instance_and_takes_its_donors_work():
    inv = Inventory.from_counts([{"cluster": "sim", "model": "H100", "count": 2},
                                 {"cluster": "sim", "model": "H100", "count": 1, "mig_profile": "1g.10gb"}])
    ran = job("ran", kind="interactive", gpus=1.0, min_rt=7200, st=datetime(2026, 11, 2, 1), en=datetime(2026, 11, 2, 3))
    nb = job("nb", kind="interactive", gpus=round(1 / 7, 6), min_rt=3600)  # never started, 1/7 of an H100
    jobs, skipped = trace_jobs([ran, nb], pools=inv.pools(), held={}, activity={("sim", "ran"): {0: 0.3, 1: 0.2}},
                               start=START, end=END, params=Params(), seed=3)
    assert skipped == []
    got = {j.job_id: j for j in jobs}
    # one 1g instance (a device of the MIG pool, all of it), never a seventh of a whole H100
    assert (got["nb"].pool, got["nb"].units, got["nb"].unit_size) == (("sim", "H100", "1g.10gb"), 1, 1.0)
    assert got["nb"].gpus == pytest.approx(1 / 7)
    # the only interactive donor ran 2 h declaring 2 h; nb declares 1 h: 3,600 x 7,200 / 7,200 = 3,600 s,
    # and its activity is the donor's hours (0.3 then 0.2), marked as drawn
    assert (got["nb"].work_s, got["nb"].activity, got["nb"].activity_source) == (3600, (0.3, 0.2), "drawn")
    assert (got["nb"].work_source, got["ran"].work_source) == ("drawn:ran", "recorded")
    assert (got["ran"].activity, got["ran"].activity_source) == ((0.3, 0.2), "samples")
