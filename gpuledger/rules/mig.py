"""MIG compute slices: the one home for how much of a physical GPU a MIG profile holds.

Every source names profiles its own way — Kubernetes resources (``nvidia.com/mig-3g.40gb``), Slurm
gres types (``nvidia_a100_3g.40gb``), DCGM's ``GPU_I_PROFILE`` (``3g.40gb``), NVML device names
(``NVIDIA A100-SXM4-40GB MIG 3g.20gb``) — and all of them, and the simulator, ask this module.

A profile ``[<c>c.]<g>g.<mem>gb[+me|+gfx|...]`` holds ``c`` (a compute instance) or else ``g``
compute slices out of the model's total: 7 on A100 / A800 / H100 / H800 / H20 / H200 / GH200 /
B200 / B300 / GB200 / GB300, 4 on the A30. When the model is not known, the A30's own profiles
(``1g.6gb``, ``2g.12gb``, ``4g.24gb``) say 4 and every other profile 7.
"""

from __future__ import annotations

import re

from gpuledger.rules.model_keys import gpu_model_key

SEVEN_SLICE_MODELS = frozenset(
    {"A100", "A800", "H100", "H800", "H20", "H200", "GH200", "B100", "B200", "B300", "GB200", "GB300"}
)
SLICES_BY_MODEL = {**dict.fromkeys(SEVEN_SLICE_MODELS, 7), "A30": 4}
A30_PROFILES = frozenset({"1g.6gb", "2g.12gb", "4g.24gb"})

# Anywhere in the text, not glued to a longer number or word: "nvidia_a100_3g.40gb" has one.
_PROFILE = re.compile(
    r"(?<![0-9a-z])(?:(?P<ci>\d+)c\.)?(?P<gi>\d+)g\.(?P<mem>\d+)gb(?P<extra>(?:\+[a-z0-9]+)*)(?![0-9a-z.])",
    re.IGNORECASE,
)


def find_profile(text: str | None) -> str | None:
    """The MIG profile named in ``text`` (lower case, e.g. ``"3g.40gb"``, ``"1c.3g.40gb"``,
    ``"1g.10gb+me"``); None when there is none."""
    if not text:
        return None
    match = _PROFILE.search(str(text))
    return match.group(0).lower() if match else None


def total_slices(model: str | None, profile: str | None = None) -> int:
    """Compute slices of one physical GPU of ``model`` (a rate-card key or any product name)."""
    key = gpu_model_key(model) if model else None
    if key in SLICES_BY_MODEL:
        return SLICES_BY_MODEL[key]
    match = _PROFILE.search(profile or "")
    if match and f"{match.group('gi')}g.{match.group('mem')}gb".lower() in A30_PROFILES:
        return 4
    return 7


def mig_slices(profile: str | None) -> int | None:
    """Compute slices a profile holds (its compute instance's, else its GPU instance's)."""
    match = _PROFILE.search(profile or "")
    if not match:
        return None
    return int(match.group("ci") or match.group("gi"))


def mig_fraction(profile: str | None, model: str | None = None) -> float | None:
    """Share of a physical GPU held by a MIG profile: ``3g.40gb`` → 3/7, ``2g.12gb`` (A30) → 2/4.

    None when ``profile`` names no MIG profile, or more slices than the model has (a typo).
    """
    slices = mig_slices(profile)
    if not slices:
        return None
    total = total_slices(model, profile)
    if slices > total:
        return None
    return slices / total
