"""Idle squatting: every rule and exemption on hand-built jobs (default policy unless stated)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import polars as pl
import pytest

from gpuledger.analytics.squatting import squatting_findings
from gpuledger.config import SquattingPolicy
from tests._analytics_frames import allocations, at, every, gpus, jobs, rate_card, samples

NOW = at(10)
M = timedelta(minutes=1)
GIB = 2**30
RATES = rate_card([("H100", "reserved", datetime(2026, 1, 1), "2.10")])
POLICY = SquattingPolicy(exempt_namespaces=["kube-system"], exempt_kinds=["interactive"],
                         exempt_labels={"team": "infra"})


def ago(minutes: float) -> datetime:
    return NOW - minutes * M


class Cluster:
    """Collects jobs, allocations and per-minute samples for the scenario."""

    def __init__(self):
        self.gpu_rows, self.alloc_rows, self.job_rows, self.sample_rows = [], [], [], []
        self.next_gpu = 1

    def job(self, job_id, *, started=240, idle_for=(130,), signal="sm", low=0.0, high=0.7,
            step=M, mig=None, **job_kw):
        """One GPU per entry of idle_for: active until `idle_for` minutes ago, then `low`."""
        self.job_rows.append({"job_id": job_id, "project": "p", "start": ago(started), **job_kw})
        for idle in idle_for:
            g = self.next_gpu
            self.next_gpu += 1
            self.gpu_rows.append({"gpu_id": g, **(mig or {})})
            self.alloc_rows.append((job_id, g, ago(started), None))
            self.sample_rows += every(g, ago(started), ago(idle), **{signal: high, "fb": 10 * GIB})
            self.sample_rows += every(g, ago(idle), NOW, step, **{signal: low, "fb": 40 * GIB})
        return self

    def findings(self, policy=POLICY, **kw):
        return {r["job_id"]: r for r in squatting_findings(
            jobs(self.job_rows), allocations(self.alloc_rows), gpus(self.gpu_rows), samples(self.sample_rows),
            RATES, now=NOW, policy=policy, **kw).collect().to_dicts()}


def test_severity_stages_and_waste():
    f = (Cluster().job("warn", idle_for=(70,)).job("second", idle_for=(110,)).job("preempt", idle_for=(130,))
         .job("short", idle_for=(50,)).findings())
    assert "short" not in f  # 50 min < sustained 60
    assert (f["warn"]["severity"], f["second"]["severity"], f["preempt"]["severity"]) == (
        "warning", "second-warning", "preempt-eligible")
    p = f["preempt"]
    assert p["finding"] == "squatting" and (p["gpus_idle"], p["gpus_total"]) == (1, 1)
    assert p["idle_since"] == ago(130) and p["idle_minutes"] == pytest.approx(130)
    # 130 min on one H100 = 13/6 GPU-h; × 2.10 = 4.55 exactly; memory held 40 GiB.
    assert p["gpu_hours_idle"] == pytest.approx(13 / 6)
    assert p["idle_cost"] == Decimal("4.55") and p["currency"] == "USD"
    assert p["fb_used_bytes_idle"] == 40 * GIB
    assert p["activity_signal"] == "sm_active"


def test_threshold_is_strict():
    f = (Cluster().job("at", idle_for=(180,), low=0.01, started=300)
         .job("below", idle_for=(180,), low=0.009, started=300).findings())
    # 0.01 is not under the 0.01 threshold; 0.009 is (180 min -> preempt-eligible).
    assert "at" not in f
    assert f["below"]["severity"] == "preempt-eligible"


def test_grace_after_start():
    # Idle from the first minute. Started 80 min ago: judged from 50 min ago -> 50 < 60, nothing.
    # Started 100 min ago: judged from 70 min ago -> a warning, idle since start + 30 min.
    f = Cluster().job("young", started=80, idle_for=(80,)).job("older", started=100, idle_for=(100,)).findings()
    assert "young" not in f
    assert f["older"]["severity"] == "warning" and f["older"]["idle_since"] == ago(70)
    # Without grace the young job has been idle 80 min.
    no_grace = POLICY.model_copy(update={"grace_minutes": 0})
    assert Cluster().job("young", started=80, idle_for=(80,)).findings(no_grace)["young"]["idle_minutes"] == \
        pytest.approx(80)


def test_sustained_window_policy():
    c = Cluster().job("j", idle_for=(70,))
    assert "j" in c.findings()
    # With a 90-minute sustained window, 70 idle minutes are not enough.
    assert "j" not in c.findings(POLICY.model_copy(update={"sustained_minutes": 90}))


def test_partial_idleness_is_its_own_milder_finding():
    f = Cluster().job("two", idle_for=(130, 0)).findings()  # second GPU active until now
    assert f["two"]["finding"] == "partial-idle"
    assert f["two"]["severity"] == "info"
    assert (f["two"]["gpus_idle"], f["two"]["gpus_total"]) == (1, 2)
    assert f["two"]["gpu_hours_idle"] == pytest.approx(13 / 6)
    # Both idle, for 130 and 70 min: squatting since the later start (70 min ago) -> warning;
    # waste counts each GPU's own idle time: (130 + 70) / 60 GPU-h.
    both = Cluster().job("both", idle_for=(130, 70)).findings()["both"]
    assert both["finding"] == "squatting" and both["severity"] == "warning"
    assert both["idle_since"] == ago(70)
    assert both["gpu_hours_idle"] == pytest.approx(200 / 60)


def test_exemptions_by_namespace_kind_and_label():
    c = (Cluster().job("ns", namespace="kube-system").job("kind", kind="interactive").job("label")
         .job("plain"))
    labels = pl.LazyFrame({"cluster": ["c1", "c1"], "job_id": ["label", "plain"], "key": ["team", "team"],
                           "value": ["infra", "research"]})
    f = c.findings(job_labels=labels)
    assert set(f) == {"plain"}
    shown = c.findings(job_labels=labels, include_exempt=True)
    assert shown["ns"]["exempt_reason"] == "namespace kube-system"
    assert shown["kind"]["exempt_reason"] == "kind interactive"
    assert shown["label"]["exempt_reason"] == "label team=infra"
    assert not shown["plain"]["exempt"]


def test_stale_data_guard():
    # Idle samples only every 5 minutes: 12 of the last 60 one-minute buckets = 20 % < 80 %.
    c = Cluster().job("sparse", idle_for=(130,), step=5 * M)
    assert "sparse" not in c.findings()
    # Lowering the bar to 15 % lets the finding through.
    assert "sparse" in c.findings(POLICY.model_copy(update={"min_coverage_ratio": 0.15}))


def test_mig_instances_are_judged_on_their_own():
    mig = {"uuid": "GPU-M", "mig": 1, "fraction": 1 / 7, "profile": "1g.10gb"}
    f = (Cluster().job("mig-idle", idle_for=(130,), signal="gr", mig=mig)
         .job("mig-busy", idle_for=(0,), signal="gr", mig={**mig, "mig": 2}).findings())
    assert "mig-busy" not in f
    assert f["mig-idle"]["finding"] == "squatting"
    assert f["mig-idle"]["activity_signal"] == "gr_engine_active"
    assert f["mig-idle"]["gpu_hours_idle"] == pytest.approx(13 / 6 / 7)
