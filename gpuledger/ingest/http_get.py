"""One GET whose answer must arrive within a deadline: the body is read a piece at a time, each
wait for the server cut to what is left, so a server that accepts and never answers, stalls in the
middle of a body or trickles a byte now and then ends the call instead of hanging it (a plain
``requests`` read timeout applies per socket read, and a trickle never trips it). Used by the
Prometheus client and the exporter scrapes."""

from __future__ import annotations

import time
from collections.abc import Mapping

import requests
import urllib3

from gpuledger.deadlines import CallDeadline

PIECE = 1 << 20  # bytes read at a time; the deadline is checked between pieces


class OutOfTime(Exception):
    """The answer did not arrive in time; the message says how far it got."""


class TooLarge(Exception):
    """The body grew past the size the caller can hold; the message gives the limit."""


def get_within(session: requests.Session | None, url: str, *, deadline: CallDeadline, give_up: float,
               params: Mapping | None = None, max_bytes: int | None = None, method: str = "GET",
               json: object = None) -> tuple[int, Mapping, bytes]:
    """(status, headers, body) of one GET (or ``method``, with a ``json`` body), all of it before
    ``give_up`` (a ``time.monotonic()`` moment). Raises ``requests`` errors for a failed connection
    or a silent server, OutOfTime when the body stalls or is still arriving at ``give_up``, TooLarge
    past ``max_bytes``."""
    http = session or requests
    left = give_up - time.monotonic()
    if left <= 0:
        raise OutOfTime(f"no time left within the {deadline.total_s:g} s deadline")
    with http.request(method, url, params=params, json=json, stream=True,
                      timeout=(min(deadline.connect_s, left), min(deadline.read_s, left))) as response:
        raw, pieces, got = response.raw, [], 0
        sock = getattr(getattr(raw, "connection", None), "sock", None)
        while True:
            left = give_up - time.monotonic()
            if left <= 0:
                raise OutOfTime(f"the answer was still arriving when the {deadline.total_s:g} s "
                                f"deadline passed ({got:,} bytes by then)")
            wait = min(deadline.read_s, left)
            if sock is not None:
                sock.settimeout(wait)
            try:
                piece = raw.read1(PIECE, decode_content=True)
            except (urllib3.exceptions.TimeoutError, TimeoutError):
                if wait < deadline.read_s:  # cut short by the deadline
                    raise OutOfTime(f"the answer was still arriving when the {deadline.total_s:g} s "
                                    f"deadline passed ({got:,} bytes by then)") from None
                raise OutOfTime(f"the answer stalled after {got:,} bytes of body (nothing more for "
                                f"{wait:g} s)") from None
            if not piece:
                return response.status_code, response.headers, b"".join(pieces)
            got += len(piece)
            if max_bytes is not None and got > max_bytes:
                size = f"{max_bytes / 2**20:,.0f} MiB" if max_bytes >= 2**20 else f"{max_bytes >> 10} KiB"
                raise TooLarge(f"the answer is larger than {size}")
            pieces.append(piece)
