"""Counter-based noise: a pure function of (seed, keys), vectorised with numpy.

Every simulated value is computed from hashes of (seed, device, timestamp, ...) instead of a
stateful random generator, so the warehouse writer, the live /metrics endpoints and the OpenMetrics
file compute the same number for the same device and second, in any order and any chunking.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def hash64(seed: int, *keys) -> np.ndarray:
    """uint64 hash of (seed, *keys); keys are int arrays (broadcast together) or ints."""
    with np.errstate(over="ignore"):
        h = _mix(np.asarray(seed & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64) + _GOLDEN)
        for k in keys:
            k = np.asarray(k).astype(np.int64).view(np.uint64) if np.ndim(k) else np.uint64(int(k) & 0xFFFFFFFFFFFFFFFF)
            h = _mix(h ^ (k + _GOLDEN + (h << np.uint64(6)) + (h >> np.uint64(2))))
    return h


def uniform(seed: int, *keys) -> np.ndarray:
    """Uniform floats in [0, 1) from (seed, *keys)."""
    return (hash64(seed, *keys) >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def normalish(seed: int, *keys) -> np.ndarray:
    """Approximately standard-normal noise (sum of three uniforms, rescaled)."""
    u = uniform(seed, *keys, 1) + uniform(seed, *keys, 2) + uniform(seed, *keys, 3)
    return (u - 1.5) * 2.0


# Salts keep the streams of different quantities apart.
SALT = {name: i + 1000 for i, name in enumerate(
    ["act", "fb", "power", "tensor", "dram", "burst", "gap", "gaplen", "sentinel", "late",
     "uuid", "job", "reset", "host", "clock", "temp", "season"])}
