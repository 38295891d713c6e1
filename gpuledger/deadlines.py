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
# The Kubernetes API answers a list page in well under a second; a watch request says how long it
# stays open itself (``timeout_seconds``), and its read timeout is that plus a margin.
KUBERNETES = CallDeadline(connect_s=5.0, read_s=30.0, total_s=600.0)


def why_unreachable(exc: BaseException, deadline: CallDeadline) -> str:
    """A few words for a failed HTTP call (urllib3 / requests / socket errors, a MaxRetryError's
    reason): "no answer within 30 s", "connection refused"... never the library's own text."""
    reason = exc
    for _ in range(4):  # MaxRetryError -> its reason; requests wraps urllib3's errors in args[0]
        inner = getattr(reason, "reason", None)
        if not isinstance(inner, BaseException):
            inner = next((a for a in getattr(reason, "args", ()) if isinstance(a, BaseException)), None)
        if inner is None:
            break
        reason = inner
    names = {cls.__name__ for cls in type(reason).__mro__}
    text = str(reason).lower()
    if "refused" in text:  # (urllib3's NewConnectionError is a ConnectTimeoutError too)
        return "connection refused"
    if "NameResolutionError" in names or "name or service not known" in text or "resolve" in text:
        return "the host name does not resolve"
    if ("ConnectTimeoutError" in names or "ConnectTimeout" in names) and "NewConnectionError" not in names:
        return f"could not connect within {deadline.connect_s:g} s"
    if names & {"ReadTimeoutError", "ReadTimeout", "TimeoutError", "timeout"}:
        return f"no answer within {deadline.read_s:g} s"
    if names & {"SSLError", "SSLCertVerificationError"}:
        return "the TLS handshake failed (certificate or protocol)"
    if names & {"ProtocolError", "RemoteDisconnected", "IncompleteRead", "ConnectionResetError",
                "ChunkedEncodingError"}:
        return "the connection broke off mid-answer"
    return f"cannot connect ({type(reason).__name__})"

# Alert delivery (apprise: webhooks and SMTP). The outbox retries what did not go out, so one try
# may give up early rather than hold the alert cycle; a channel URL's own ``cto=`` / ``rto=``
# (apprise's connect / read timeouts) win over these.
ALERTS = CallDeadline(connect_s=5.0, read_s=10.0, total_s=30.0)
