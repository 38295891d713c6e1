"""GPU product names → the model key the rate card uses (H100, B200, A100, ...).

Names arrive spelled many ways: NVML ("NVIDIA H100 80GB HBM3"), GPU feature discovery's node label
``nvidia.com/gpu.product`` ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
dcgm-exporter's ``modelName``. The key is the first known family found as a whole token.
"""

from __future__ import annotations

import re

# Most specific first, so GB200 is not read as B200 and A10G not as A10.
KNOWN_MODELS = (
    "GB300",
    "GB200",
    "GH200",
    "B300",
    "B200",
    "B100",
    "H200",
    "H100",
    "H800",
    "H20",
    "A100",
    "A800",
    "A40",
    "A30",
    "A10G",
    "A10",
    "L40S",
    "L40",
    "L4",
    "V100",
    "T4",
)
_TOKEN = {m: re.compile(rf"(?<![A-Z0-9]){m}(?![A-Z0-9])") for m in KNOWN_MODELS}


def gpu_model_key(name: str | None) -> str | None:
    """The rate-card model key for a product name; an unknown name comes back upper-cased without
    the vendor prefix (``"NVIDIA RTX 6000 Ada"`` → ``"RTX-6000-ADA"``); None for an empty name."""
    if not name or not str(name).strip():
        return None
    text = str(name).upper().replace("_", "-")
    for model, pattern in _TOKEN.items():
        if pattern.search(text):
            return model
    text = re.sub(r"^(NVIDIA|TESLA)[\s-]+", "", text.strip())
    text = re.sub(r"-MIG-.*$", "", text)
    return re.sub(r"[\s-]+", "-", text) or None
