"""Usage per project as the simulation runs: the same two modes as gpuledger.analytics.usage
(sliding window W, exponential decay with half-life H), kept incrementally so each cycle costs
O(projects) instead of a pass over the whole history. tests/whatif/test_whatif.py checks it against
analytics.usage.project_usage on the run's own allocations (the plain path).

Units: allocated GPU-hours. Between two events every project's allocation rate r (GPUs held) is
constant, so over Δt: decayed u ← u·2^(−Δt/H) + r·(H/ln 2)(1 − 2^(−Δt/H)) (the exact integral of
r·2^(−age/H)); the window keeps GPU-hours per clock hour and sums the buckets inside
[now − W, now), the oldest bucket pro rata.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque


class UsageTracker:
    def __init__(
        self, projects: list[str], *, mode: str, window_s: float, half_life_s: float, origin_s: float = 0
    ):
        self.mode = mode
        self.window_s = window_s
        self.half_life_s = half_life_s
        self.now = origin_s
        self.decayed = dict.fromkeys(projects, 0.0)  # GPU-hours
        self.buckets: deque[tuple[int, dict[str, float]]] = deque()  # (hour index, project -> GPU-hours)
        self.rate: dict[str, float] = defaultdict(float)  # GPUs held now

    def advance(self, t: float) -> None:
        """Accumulate the current rates up to ``t`` (seconds)."""
        dt = t - self.now
        if dt <= 0:
            return
        f = 2.0 ** (-dt / self.half_life_s)
        gain = self.half_life_s / math.log(2) * (1 - f) / 3600.0  # GPU-hours per GPU held
        for p in self.decayed:
            self.decayed[p] *= f
        for p, r in self.rate.items():
            if r > 0:
                self.decayed[p] = self.decayed.get(p, 0.0) + r * gain
        if self.mode == "window" and any(r > 0 for r in self.rate.values()):
            t0 = self.now
            while t0 < t:
                hour = int(t0 // 3600)
                edge = min(t, (hour + 1) * 3600)
                if not self.buckets or self.buckets[-1][0] != hour:
                    self.buckets.append((hour, defaultdict(float)))
                bucket = self.buckets[-1][1]
                for p, r in self.rate.items():
                    if r > 0:
                        bucket[p] += r * (edge - t0) / 3600.0
                t0 = edge
        self.now = t
        oldest = (t - self.window_s) // 3600
        while self.buckets and self.buckets[0][0] < oldest:
            self.buckets.popleft()

    def hold(self, project: str, gpus: float) -> None:
        self.rate[project] += gpus

    def release(self, project: str, gpus: float) -> None:
        self.rate[project] -= gpus
        if abs(self.rate[project]) < 1e-9:
            self.rate[project] = 0.0

    def usage(self) -> dict[str, float]:
        """GPU-hours per project in the configured mode at ``now``."""
        if self.mode != "window":
            return dict(self.decayed)
        lo = self.now - self.window_s
        out = dict.fromkeys(self.decayed, 0.0)
        for hour, bucket in self.buckets:
            start = hour * 3600
            keep = 1.0
            if start < lo:  # the oldest bucket: the part inside the window, pro rata
                keep = max(0.0, (start + 3600 - lo) / 3600)
            for p, v in bucket.items():
                out[p] = out.get(p, 0.0) + v * keep
        return out
