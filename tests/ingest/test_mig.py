"""One rule for MIG compute slices, asked by every source (issue 8, item 9)."""

from __future__ import annotations

import polars as pl
import pytest

from gpuledger.ingest import mig
from gpuledger.ingest.jobs import k8s_mapping
from gpuledger.ingest.jobs.slurm import parse_tres_gpus
from gpuledger.ingest.metrics import exposition


@pytest.mark.parametrize(("profile", "model", "share"), [
    ("1g.10gb", "H100", 1 / 7), ("3g.40gb", "A100", 3 / 7), ("7g.80gb", None, 1.0),
    ("1g.24gb", "H100", 1 / 7),          # H100 94 GB: memory doubled, still one compute slice
    ("1g.10gb+me", None, 1 / 7),         # +me (media extensions) changes no compute
    ("1c.3g.40gb", "A100", 1 / 7),       # a compute instance of one slice inside a 3g instance
    ("2g.35gb", "H200", 2 / 7), ("4g.90gb", "B200", 4 / 7),
    ("2g.12gb", "A30", 2 / 4), ("1g.6gb", None, 1 / 4), ("4g.24gb", None, 1.0),   # A30: 4 slices
    ("nvidia_a30_2g.12gb", None, 2 / 4), ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", None, 3 / 7),
])
def test_one_rule_for_compute_slices(profile, model, share):
    assert mig.mig_fraction(profile, model) == pytest.approx(share)


def test_impossible_or_missing_profiles_are_none():
    assert mig.mig_fraction("7g.24gb", "A30") is None       # an A30 has 4 slices
    assert mig.mig_fraction("gpu", None) is None and mig.mig_fraction(None) is None


def test_slurm_counts_an_a30_slice_by_four():
    # An A30 2g.12gb is half the GPU; today Slurm divides every MIG type by 7 (2/7 = 0.286).
    assert parse_tres_gpus("cpu=4,gres/gpu:nvidia_a30_2g.12gb=1,gres/gpu=1") == (pytest.approx(0.5), "A30")
    # Two A100 3g.40gb slices: 6/7; and a 1g.10gb+me on an H100: 1/7.
    assert parse_tres_gpus("gres/gpu:nvidia_a100_3g.40gb=2")[0] == pytest.approx(6 / 7)
    assert parse_tres_gpus("gres/gpu:nvidia_h100_1g.10gb+me=1")[0] == pytest.approx(1 / 7)


def test_every_source_agrees():
    cases = [("3g.40gb", "A100"), ("2g.12gb", "A30"), ("1g.10gb+me", "H100"), ("1g.24gb", "H100")]
    for profile, model in cases:
        want = mig.mig_fraction(profile, model)
        pod = {"containers": [{"resources": {"limits": {f"nvidia.com/mig-{profile}": 1}}}]}
        assert k8s_mapping.gpus_requested(pod)[0] == pytest.approx(want, abs=1e-6)
        assert exposition.mig_fraction(profile, model) == pytest.approx(want)
        assert parse_tres_gpus(f"gres/gpu:nvidia_{model.lower()}_{profile}=1")[0] == pytest.approx(want)


def test_simulator_devices_use_the_rule():
    from gpuledger.simulator.cluster import MIG_PROFILES, build_hardware

    hw = build_hardware(seed=7, gpus=64, cluster="sim", start_s=0, span_s=86_400)
    devices = hw.devices.filter(pl.col("mig_profile").is_not_null())
    for profile, model, fraction in devices.select("mig_profile", "model", "gpu_fraction").iter_rows():
        assert profile in MIG_PROFILES and fraction == pytest.approx(mig.mig_fraction(profile, model))
