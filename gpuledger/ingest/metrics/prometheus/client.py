"""The Prometheus HTTP API as the backfill uses it: GETs with retries and backoff, JSON with
Prometheus' error envelope, metric discovery and ``query_range`` on the step grid.

``last_over_time(SELECTOR[step - 1ms])`` on a grid aligned to ``step``: each grid point t carries the
last raw sample in (t - step, t] - exactly the sample when the exporter's timestamps sit on the
grid, and nothing where the scrape had a gap (a plain query would repeat the previous value for 5
minutes of lookback and invent samples).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import orjson
import requests

from gpuledger.ingest.metrics import dcgm_fields as dcgm

# Metrics worth asking for: those that feed a gpu_samples column (fb free/reserved feed fb_total).
BACKFILL_METRICS = tuple(f.metric for f in dcgm.FIELDS
                         if f.column is not None or f.meaning in dcgm.FB_PARTS)


class PrometheusError(RuntimeError):
    """The server refused or failed a query after retries; the message names the query."""


def _new_session(compress: bool) -> requests.Session:
    session = requests.Session()
    if not compress:
        # on the same host or a fast network, gzip costs Prometheus and us more CPU than it saves
        session.headers["Accept-Encoding"] = "identity"
    return session


def _get_body(session: requests.Session, url: str, params: dict, *, timeout_s: float, retries: int,
              backoff_s: float) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET that did not fail with a 5xx / timeout / connection error, retried
    with exponential backoff; PrometheusError when every attempt failed."""
    error = None
    for attempt in range(retries + 1):
        try:
            response = session.get(url, params=params, timeout=timeout_s)
            if response.status_code < 500:
                return response.status_code, response.content
            error = f"HTTP {response.status_code}: {response.text[:200]}"
        except (requests.Timeout, requests.ConnectionError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        if attempt < retries:
            time.sleep(backoff_s * 2 ** attempt)
    raise PrometheusError(f"{url} {params}: {error} (after {retries + 1} attempts)")


def _parse_json(url: str, params: dict, status: int, content: bytes) -> dict:
    try:
        body = orjson.loads(content)  # several times faster than json / requests
    except orjson.JSONDecodeError:
        text = content[:200].decode("utf-8", "replace")
        raise PrometheusError(f"{url} {params}: HTTP {status}, not JSON: {text}") from None
    if body.get("status") != "success":
        raise PrometheusError(f"{url} {params}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def _get_json(session: requests.Session, url: str, params: dict, **kw) -> dict:
    return _parse_json(url, params, *_get_body(session, url, params, **kw))


def discover_metrics(session: requests.Session, url: str, **kw) -> list[str]:
    """The catalogued DCGM metrics the server has series for (both field generations)."""
    names = set(_get_json(session, f"{url.rstrip('/')}/api/v1/label/__name__/values", {}, **kw))
    return [m for m in BACKFILL_METRICS if m in names]


def _range_params(selector: str, a: int, b: int, step_s: int) -> dict:
    last = a + ((b - 1 - a) // step_s) * step_s
    return {"query": f"last_over_time({selector}[{step_s * 1000 - 1}ms])", "start": a, "end": last,
            "step": step_s}


def query_chunk(session, url: str, metric: str, a: int, b: int, step_s: int, **kw) -> list[dict]:
    """Raw query_range result for one metric on the grid points a, a+step, ... < b."""
    if b <= a:
        return []
    params = _range_params(f'{{__name__="{metric}"}}', a, b, step_s)
    data = _get_json(session, f"{url.rstrip('/')}/api/v1/query_range", params, **kw)
    return data.get("result", [])


def query_chunk_all(session, url: str, metrics: Sequence[str], a: int, b: int, step_s: int,
                    **kw) -> dict[str, list[dict]] | None:
    """{metric: query_range result} for all ``metrics`` with ONE query (a ``__name__`` regex), on the
    grid points a, a+step, ... < b. ``last_over_time`` keeps ``__name__`` (Prometheus >= 2.26), so the
    series still say which metric they are; None when this server drops it (then ask per metric)."""
    out: dict[str, list[dict]] = {m: [] for m in metrics}
    if b <= a or not metrics:
        return out
    names = "|".join(m for m in metrics)  # catalogued names: [A-Z0-9_] only, nothing to escape
    params = _range_params(f'{{__name__=~"{names}"}}', a, b, step_s)
    data = _get_json(session, f"{url.rstrip('/')}/api/v1/query_range", params, **kw)
    for s in data.get("result", []):
        name = s["metric"].get("__name__")
        if name not in out:
            return None
        out[name].append(s)
    return out
