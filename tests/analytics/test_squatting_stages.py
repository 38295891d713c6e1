"""The named stages of squatting_findings (issue 22), each on hand-made rows, numbers by hand.
Default policy unless stated: sustained 60 min, coverage ≥ 0.8 × 60 = 48 min, warn 60 / 105 / 120."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import polars as pl

from gpuledger.analytics import squatting as sq
from gpuledger.config import SquattingPolicy
from tests.helpers.analytics_frames import at, rate_card

NOW = at(10)
P = SquattingPolicy()


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def _devices(rows: list[dict]) -> pl.LazyFrame:
    """Held devices with their evidence: job_id, gpu_id, idle_since, covered, and optionally
    device_fraction, alloc_fraction, fb, signal, model, tier."""
    return pl.LazyFrame({
        "cluster": ["c1"] * len(rows), "job_id": [r["job_id"] for r in rows],
        "gpu_id": [r["gpu_id"] for r in rows],
        "project": ["p"] * len(rows), "user_name": ["alice"] * len(rows),
        "namespace": [r.get("namespace", "research") for r in rows],
        "job_kind": [r.get("kind", "training") for r in rows],
        "model": [r.get("model", "H100") for r in rows], "tier": [r.get("tier", "reserved") for r in rows],
        "device_fraction": [r.get("device_fraction", 1.0) for r in rows],
        "alloc_fraction": [r.get("alloc_fraction", 1.0) for r in rows],
        "activity_signal": [r.get("signal", "sm_active") for r in rows],
        "idle_since": [r["idle_since"] for r in rows],
        "covered_minutes": [r["covered"] for r in rows],
        "fb_used_bytes": [r.get("fb", 0) for r in rows],
    }, schema_overrides={"gpu_id": pl.Int32, "idle_since": pl.Datetime("us"), "covered_minutes": pl.Float64,
                         "fb_used_bytes": pl.Int64, "activity_signal": pl.String})


def test_with_evidence_casts_the_keys_and_keeps_devices_without_evidence():
    held = pl.LazyFrame({"cluster": ["c1", "c1"], "job_id": ["J", "J"], "gpu_id": [1, 2]},
                        schema_overrides={"gpu_id": pl.Int32})
    # evidence with an Int64 gpu_id (as DuckDB gives it) for GPU 1 only
    evidence = pl.LazyFrame({"cluster": ["c1"], "job_id": ["J"], "gpu_id": [1], "activity_signal": ["gpu_util"],
                             "last_active": [ago(90)], "idle_since": [ago(89)], "covered_minutes": [60.0],
                             "fb_used_bytes": [7]}, schema_overrides={"gpu_id": pl.Int64})
    out = sq.with_evidence(held, evidence).collect().sort("gpu_id")
    assert out.schema["gpu_id"] == pl.Int32 and "last_active" not in out.columns
    assert out["covered_minutes"].to_list() == [60.0, None]  # GPU 2: no evidence, stale later
    assert out["idle_since"].to_list() == [ago(89), None]


def test_judge_devices_needs_coverage_and_the_whole_sustained_window():
    rows = [
        {"job_id": "A", "gpu_id": 1, "idle_since": ago(60), "covered": 48.0},  # exactly 60 min, 48/60 = 0.8: idle
        {"job_id": "B", "gpu_id": 2, "idle_since": ago(59), "covered": 60.0},  # 59 min < 60: not yet
        {"job_id": "C", "gpu_id": 3, "idle_since": ago(90), "covered": 47.0},  # 47/60 < 0.8: stale
        {"job_id": "D", "gpu_id": 4, "idle_since": None, "covered": 60.0},     # last sample active
        {"job_id": "E", "gpu_id": 5, "idle_since": ago(90), "covered": None},  # no evidence: stale
        # a 3g MIG slice (3/7) held at half: 90 min = 1.5 h × 3/7 × 0.5 = 0.3214285714… h
        {"job_id": "F", "gpu_id": 6, "idle_since": ago(90), "covered": 60.0, "device_fraction": 3 / 7,
         "alloc_fraction": 0.5},
    ]
    out = sq.judge_devices(_devices(rows), now=NOW, policy=P).collect().sort("job_id")
    assert out["stale"].to_list() == [False, False, True, False, True, False]
    assert out["idle"].to_list() == [True, False, False, False, False, True]
    hours = out["gpu_hours_idle"].to_list()
    assert hours[:5] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert abs(hours[5] - 1.5 * 3 / 7 * 0.5) < 1e-12


def test_judge_devices_counts_expected_minutes_of_a_short_window():
    # sustained 10 min: 8 minutes covered is 0.8 of it (not of 60)
    policy = SquattingPolicy(sustained_minutes=10, warn_minutes=11, second_warn_minutes=12, preempt_minutes=13)
    out = sq.judge_devices(_devices([{"job_id": "A", "gpu_id": 1, "idle_since": ago(10), "covered": 8.0}]),
                           now=NOW, policy=policy).collect()
    assert out["stale"].to_list() == [False] and out["idle"].to_list() == [True]
    assert abs(out["gpu_hours_idle"][0] - 10 / 60) < 1e-12


def test_priced_now_takes_the_rate_in_force_at_now():
    rates = rate_card([("H100", "reserved", at(0), "2.00"), ("H100", "reserved", at(9), "3.00"),
                       ("H100", "reserved", at(11), "9.00"), ("H100", "spot", at(0), "1.00")])
    rows = [{"job_id": "A", "gpu_id": 1, "idle_since": ago(60), "covered": 60.0},
            {"job_id": "B", "gpu_id": 2, "idle_since": ago(60), "covered": 60.0, "tier": "spot"},
            {"job_id": "C", "gpu_id": 3, "idle_since": ago(60), "covered": 60.0, "model": "A40"}]
    out = sq.priced_now(_devices(rows), rates, now=NOW).collect().sort("job_id")
    # 10:00: the 09:00 price (3.00), not the 11:00 one; spot its own; an A40 has none
    assert out["price_per_gpu_hour"].to_list() == [Decimal("3.00"), Decimal("1.00"), None]
    assert out["currency"].to_list() == ["USD", "USD", None]
    assert "_at" not in out.columns


def _judged(rows, rates=None):
    rates = rates if rates is not None else rate_card([("H100", "reserved", at(0), "2.10")])
    return sq.priced_now(sq.judge_devices(_devices(rows), now=NOW, policy=P), rates, now=NOW)


def test_job_idleness_sums_the_idle_devices_of_each_job():
    rows = [
        # J: two idle GPUs (90 and 70 min) and one busy; memory 40 + 30 GiB idle, 5 busy
        {"job_id": "J", "gpu_id": 1, "idle_since": ago(90), "covered": 60.0, "fb": 40, "signal": "sm_active"},
        {"job_id": "J", "gpu_id": 2, "idle_since": ago(70), "covered": 60.0, "fb": 30, "signal": "gpu_util"},
        {"job_id": "J", "gpu_id": 3, "idle_since": None, "covered": 60.0, "fb": 5, "signal": "gr_engine_active"},
        # K: one stale device
        {"job_id": "K", "gpu_id": 4, "idle_since": ago(90), "covered": 10.0},
    ]
    out = {r["job_id"]: r for r in sq.job_idleness(_judged(rows)).collect().iter_rows(named=True)}
    j = out["J"]
    assert (j["gpus_total"], j["gpus_idle"], j["_stale"]) == (3, 2, False)
    assert j["idle_since"] == ago(70)  # the latest of the idle devices' starts
    assert abs(j["gpu_hours_idle"] - (1.5 + 70 / 60)) < 1e-12  # 1.5 h + 1.1666… h = 2.6666… h
    # raw cost: 1.5 × 2.10 = 3.15 plus 1.1666… h (12 places) × 2.10 ≈ 2.45: ≈ 5.60 (unrounded here)
    assert abs(float(j["_cost"]) - 5.6) < 1e-9
    assert j["fb_used_bytes_idle"] == 70 and j["activity_signal"] == "gpu_util,sm_active"
    assert j["currency"] == "USD"
    k = out["K"]
    assert (k["gpus_total"], k["gpus_idle"], k["_stale"], k["idle_since"]) == (1, 0, True, None)


def test_classify_jobs_finding_severity_and_cost():
    rows = [
        {"job_id": "W", "gpu_id": 1, "idle_since": ago(60), "covered": 60.0},    # 60 min: warning
        {"job_id": "S", "gpu_id": 2, "idle_since": ago(105), "covered": 60.0},   # 105: second-warning
        {"job_id": "X", "gpu_id": 3, "idle_since": ago(120), "covered": 60.0},   # 120: preempt-eligible
        {"job_id": "P", "gpu_id": 4, "idle_since": ago(200), "covered": 60.0},   # P: one of two idle
        {"job_id": "P", "gpu_id": 5, "idle_since": None, "covered": 60.0},
        {"job_id": "T", "gpu_id": 6, "idle_since": ago(200), "covered": 60.0},   # T: idle + stale: none
        {"job_id": "T", "gpu_id": 7, "idle_since": ago(200), "covered": 1.0},
        {"job_id": "B", "gpu_id": 8, "idle_since": None, "covered": 60.0},       # B: busy: none
    ]
    out = {r["job_id"]: r for r in sq.classify_jobs(sq.job_idleness(_judged(rows)), now=NOW, policy=P)
           .collect().iter_rows(named=True)}
    assert set(out) == {"W", "S", "X", "P"}
    got = {j: (r["finding"], r["severity"], r["idle_minutes"]) for j, r in out.items()}
    assert got == {"W": ("squatting", "warning", 60.0), "S": ("squatting", "second-warning", 105.0),
                   "X": ("squatting", "preempt-eligible", 120.0), "P": ("partial-idle", "info", 200.0)}
    # W 1 h × 2.10 = 2.10; S 1.75 h × 2.10 = 3.675 → 3.68; X 2 h → 4.20; P only its idle GPU:
    # 200 min = 3.333333333333 h (12 places) × 2.10 = 6.9999999999993 → 7.00
    assert out["W"]["idle_cost"] == Decimal("2.10") and out["S"]["idle_cost"] == Decimal("3.68")
    assert out["X"]["idle_cost"] == Decimal("4.20") and out["P"]["idle_cost"] == Decimal("7.00")


def test_classify_jobs_rounds_idle_cost_half_up():
    # 0.5 h at 0.05 = 0.025 → 0.03 half-up (half-even would keep 0.02); idle 30 min under a 30-min policy
    policy = SquattingPolicy(sustained_minutes=30, warn_minutes=31, second_warn_minutes=32, preempt_minutes=33)
    rates = rate_card([("H100", "reserved", at(0), "0.05")])
    devices = sq.priced_now(sq.judge_devices(
        _devices([{"job_id": "A", "gpu_id": 1, "idle_since": ago(30), "covered": 30.0}]), now=NOW, policy=policy),
        rates, now=NOW)
    out = sq.classify_jobs(sq.job_idleness(devices), now=NOW, policy=policy).collect()
    assert out["idle_cost"].to_list() == [Decimal("0.03")] and out["severity"].to_list() == ["info"]  # 30 < 31


def test_with_exemptions_namespace_then_kind_then_label():
    findings = pl.LazyFrame({"cluster": ["c1"] * 4, "job_id": ["N", "K", "L", "F"],
                             "namespace": ["kube-system", "research", "research", "research"],
                             "job_kind": ["interactive", "interactive", "training", "training"]})
    labels = pl.LazyFrame({"cluster": ["c1", "c1", "c1"], "job_id": ["N", "L", "F"],
                           "key": ["team", "team", "team"], "value": ["infra", "infra", "ml"]})
    policy = SquattingPolicy(exempt_namespaces=["kube-system"], exempt_kinds=["interactive"],
                             exempt_labels={"team": "infra"})
    out = sq.with_exemptions(findings, policy, labels).collect().sort("job_id")
    # N matches all three: the namespace wins; F's label is another team's
    assert dict(zip(out["job_id"], out["exempt_reason"])) == {
        "F": None, "K": "kind interactive", "L": "label team=infra", "N": "namespace kube-system"}
    assert dict(zip(out["job_id"], out["exempt"])) == {"F": False, "K": True, "L": True, "N": True}
    # without labels, only namespace and kind
    out = sq.with_exemptions(findings, policy, None).collect().sort("job_id")
    assert out["exempt"].to_list() == [False, True, False, True]  # F, K, L, N
