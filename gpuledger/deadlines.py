"""How long gpuledger waits on anything outside it: one home for the defaults every call out uses
(Prometheus, scrapes, the Kubernetes API, SMTP and webhooks), so a server that accepts a
connection and never answers, or stalls in the middle of a body, ends a command instead of
hanging it. Light on purpose: the config and every CLI module import it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallDeadline:
    """Limits of one call out, seconds. ``connect_s``: to open the connection; ``read_s``: the
    longest silence allowed while waiting for the answer or between two pieces of its body;
    ``total_s``: the whole call, every retry and backoff wait included (a server that trickles a
    byte now and then never trips ``read_s``, this it does)."""

    connect_s: float = 5.0
    read_s: float = 60.0
    total_s: float = 180.0

    def __post_init__(self) -> None:
        for name in ("connect_s", "read_s", "total_s"):
            value = getattr(self, name)
            if not (0 < value <= MAX_WAIT_S):  # NaN fails too
                raise ValueError(f"{name} must be within (0, {MAX_WAIT_S:g}] seconds, not {value!r}")


MAX_WAIT_S = 86_400.0  # a day: anything longer is a typo, and socket timeouts overflow near 2^31 ms

# Prometheus evaluates a chunk (~1 h x 1,024 GPUs) for seconds before its first byte: read_s 60.
PROMETHEUS = CallDeadline(connect_s=5.0, read_s=60.0, total_s=180.0)
