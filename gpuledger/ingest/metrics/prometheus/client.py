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
from urllib.parse import urlsplit

import orjson
import requests
import urllib3

from gpuledger.deadlines import CallDeadline
from gpuledger.errors import RunError, UsageError, printable
from gpuledger.ingest.http_get import OutOfTime, get_within
from gpuledger.ingest.metrics import dcgm_fields as dcgm

# Metrics worth asking for: those that feed a gpu_samples column (fb free/reserved feed fb_total).
BACKFILL_METRICS = tuple(f.metric for f in dcgm.FIELDS
                         if f.column is not None or f.meaning in dcgm.FB_PARTS)


class PrometheusError(RunError):
    """The server refused or failed a query after retries; the message names the query."""

    resumable = True  # the chunks before it are saved: rerunning the command continues
    undone_from: str | None = None  # set by the backfill: the start (ISO UTC) of what is not stored


class NotPrometheusAnswer(PrometheusError):
    """The server answered, but not as Prometheus' HTTP API does (an HTML page, other JSON, a result
    that is not the matrix ``query_range`` returns). Never retried, and the chunk is not recorded as
    done: a rerun against the right server still fetches it."""

    resumable = False  # rerunning against the same server gives the same answer


_CHECK_URL = "check --url names the Prometheus server itself, e.g. http://prometheus:9090"


def check_base_url(url: str) -> str:
    """``url`` when it can name a Prometheus server (http or https, a host); else a UsageError
    naming --url, before anything is asked or written."""
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:  # "http://[::1": an IPv6 host without its closing bracket
        raise UsageError(f"--url {printable(url, limit=120)!r} is not a URL ({exc}); write it as http://HOST:9090 "
                         "(an IPv6 address in brackets: http://[::1]:9090)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url {printable(url, limit=120)!r} is not an http(s) URL with a host; "
                         "write it as http://HOST:9090")
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number or beyond 65535
    except ValueError:
        raise UsageError(f"--url {printable(url, limit=120)!r}: the port is not a number within "
                         "1-65535; write it as http://HOST:9090") from None
    return url.strip()


def _endpoint(url: str) -> str:
    return url.split("?", 1)[0]


def new_session(compress: bool, headers: dict[str, str] | None = None) -> requests.Session:
    """``headers``: the tenant / bearer token (auth.auth_headers), sent with every query."""
    session = requests.Session()
    if not compress:
        # on the same host or a fast network, gzip costs Prometheus and us more CPU than it saves
        session.headers["Accept-Encoding"] = "identity"
    session.headers.update(headers or {})
    return session


def get_body(session: requests.Session, url: str, params: dict, *, deadline: CallDeadline,
              retries: int, backoff_s: float) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET that did not fail with a 5xx / timeout / connection error, retried
    with exponential backoff; PrometheusError when every attempt failed or ``deadline.total_s`` ran
    out (every attempt and wait together: a server that trickles its body never holds us longer)."""
    began = time.monotonic()
    give_up = began + deadline.total_s
    errors: list[str] = []  # what each attempt ran into, said once each
    error, attempts = "no attempt fitted in the deadline", 0
    for attempt in range(retries + 1):
        left = give_up - time.monotonic()
        if left <= 0:
            break
        attempts += 1
        try:
            status, _, content = get_within(session, url, params=params, deadline=deadline, give_up=give_up)
            if status < 500:
                return status, content
            first = content.decode("utf-8", "replace").strip().splitlines()[:1]
            error = f"HTTP {status}" + (f" ({printable(first[0], limit=100)})" if first else "")
        except (requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema,
                requests.exceptions.InvalidURL) as exc:  # the URL itself is wrong: no retry helps
            raise UsageError(f"--url {url.split('/api/v1/')[0]}: {printable(str(exc), limit=120)}; "
                             "write it as http://HOST:9090") from None
        except OutOfTime as exc:
            error = str(exc)
        except requests.ConnectTimeout:
            error = (f"could not connect within {deadline.connect_s:g} s" if left > deadline.connect_s
                     else f"still not connected when the {deadline.total_s:g} s deadline passed")
        except requests.Timeout:
            error = (f"no answer within {deadline.read_s:g} s" if left > deadline.read_s
                     else f"still no answer when the {deadline.total_s:g} s deadline passed")
        except (requests.ConnectionError, urllib3.exceptions.HTTPError, OSError) as exc:
            error = ("connection refused" if "refused" in str(exc).lower()
                     else "the connection broke off mid-answer"
                     if isinstance(exc, (urllib3.exceptions.ProtocolError, requests.exceptions.ChunkedEncodingError))
                     else f"cannot connect ({type(exc).__name__})")
        if error not in errors:
            errors.append(error)
        wait = backoff_s * 2 ** attempt
        if attempt < retries and time.monotonic() + wait < give_up:
            time.sleep(wait)
        elif attempt < retries:
            break
    raise PrometheusError(f"{_endpoint(url)}: {', then '.join(errors) or error} (after {attempts} "
                          f"attempt(s) in {time.monotonic() - began:.1f} s; limits: connect {deadline.connect_s:g} s, "
                          f"read {deadline.read_s:g} s, deadline {deadline.total_s:g} s)")


def parse_json(url: str, params: dict, status: int, content: bytes):
    """The ``data`` of a successful Prometheus API answer. NotPrometheusAnswer when the body is not
    Prometheus' JSON envelope; PrometheusError (naming the server's errorType) when it says error."""
    try:
        body = orjson.loads(content)  # several times faster than json / requests
    except orjson.JSONDecodeError:
        head, start = content.lstrip()[:1], printable(content[:40].decode("utf-8", "replace"))
        kind = ("an HTML page" if head == b"<" else "an empty body" if not content.strip()
                else f"{len(content):,} bytes of something else (starting {start!r})")
        raise NotPrometheusAnswer(f"{_endpoint(url)} answered HTTP {status} with {kind}, not Prometheus' "
                                  f"JSON API; {_CHECK_URL}") from None
    if not isinstance(body, dict) or body.get("status") not in ("success", "error"):
        raise NotPrometheusAnswer(f"{_endpoint(url)} answered HTTP {status} with JSON that is not "
                                  f"Prometheus' API envelope (no \"status\"); {_CHECK_URL}")
    if body["status"] != "success":
        error = printable(str(body.get("error")), limit=300)
        raise PrometheusError(f"{_endpoint(url)} refused the query (HTTP {status}, "
                              f"{body.get('errorType')}: {error})")
    if "data" not in body:
        raise NotPrometheusAnswer(f"{_endpoint(url)} answered \"success\" without \"data\"; {_CHECK_URL}")
    if body.get("warnings"):  # Thanos / Mimir: a store or querier did not answer (issue 20)
        said = printable("; ".join(map(str, body["warnings"])), limit=400)
        raise PrometheusError(f"{_endpoint(url)} gave a partial answer (warnings: {said}); nothing of this "
                              "range was stored: rerun when every store answers")
    return body["data"]


def matrix_result(data, url: str) -> list[dict]:
    """The series of a ``query_range`` answer's ``data``: a matrix of {"metric": {...}, "values":
    [...]}. Anything else (a vector, a scalar, a malformed series) raises NotPrometheusAnswer: it
    must never be taken for "no samples in this range", or the range would be recorded as done."""
    kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
    result = data.get("result") if isinstance(data, dict) else None
    if kind != "matrix" or not isinstance(result, list):
        raise NotPrometheusAnswer(
            f"{_endpoint(url)}: query_range answered with a {kind!r} result, not a matrix; nothing "
            f"was recorded for this range; {_CHECK_URL} (not a proxy that rewrites answers)")
    for series in result:
        if not (isinstance(series, dict) and isinstance(series.get("metric"), dict)
                and isinstance(series.get("values"), list)):
            raise NotPrometheusAnswer(
                f"{_endpoint(url)}: a query_range series is not {{\"metric\": {{...}}, \"values\": [...]}} "
                f"(got {printable(str(series), limit=80)}); nothing was recorded for this range")
    return result


def _get_json(session: requests.Session, url: str, params: dict, **kw) -> dict:
    return parse_json(url, params, *get_body(session, url, params, **kw))


def discover_metrics(session: requests.Session, url: str, **kw) -> list[str]:
    """The catalogued DCGM metrics the server has series for (both field generations)."""
    endpoint = f"{url.rstrip('/')}/api/v1/label/__name__/values"
    names = _get_json(session, endpoint, {}, **kw)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise NotPrometheusAnswer(f"{endpoint}: the label values are not a list of names; {_CHECK_URL}")
    return [m for m in BACKFILL_METRICS if m in set(names)]


def range_params(selector: str, a: int, b: int, step_s: int) -> dict:
    last = a + ((b - 1 - a) // step_s) * step_s
    return {"query": f"last_over_time({selector}[{step_s * 1000 - 1}ms])", "start": a, "end": last,
            "step": step_s}


def query_chunk(session, url: str, metric: str, a: int, b: int, step_s: int, **kw) -> list[dict]:
    """Raw query_range result for one metric on the grid points a, a+step, ... < b."""
    if b <= a:
        return []
    params = range_params(f'{{__name__="{metric}"}}', a, b, step_s)
    endpoint = f"{url.rstrip('/')}/api/v1/query_range"
    return matrix_result(_get_json(session, endpoint, params, **kw), endpoint)


def query_chunk_all(session, url: str, metrics: Sequence[str], a: int, b: int, step_s: int,
                    **kw) -> dict[str, list[dict]] | None:
    """{metric: query_range result} for all ``metrics`` with ONE query (a ``__name__`` regex), on the
    grid points a, a+step, ... < b. ``last_over_time`` keeps ``__name__`` (Prometheus >= 2.26), so the
    series still say which metric they are; None when this server drops it (then ask per metric)."""
    out: dict[str, list[dict]] = {m: [] for m in metrics}
    if b <= a or not metrics:
        return out
    names = "|".join(m for m in metrics)  # catalogued names: [A-Z0-9_] only, nothing to escape
    params = range_params(f'{{__name__=~"{names}"}}', a, b, step_s)
    endpoint = f"{url.rstrip('/')}/api/v1/query_range"
    for s in matrix_result(_get_json(session, endpoint, params, **kw), endpoint):
        name = s["metric"].get("__name__")
        if name not in out:
            return None
        out[name].append(s)
    return out


# VictoriaMetrics answers /api/v1/series with at most -search.maxSeries series (30,000 by default:
# ~16,000 GPUs with their job copies) and refuses more with HTTP 422; Prometheus has no such cap
SERIES_INDEX_REFUSED = (400, 422)


def series_in_range(session, url: str, match: str, a: int, b: int, kw: dict) -> int:
    """How many series matching ``match`` have samples in [a, b): from the series index
    (``/api/v1/series``: no samples read); where the index refuses to list that many, counted on
    the server (``count(count_over_time(MATCH[b - a]))`` at ``b`` less a millisecond: one number
    comes back; a range selector is open on the left, so at ``b`` it would miss a series whose only
    sample is at ``a`` and count one whose only sample is at ``b``)."""
    endpoint = f"{url.rstrip('/')}/api/v1/series"
    params = {"match[]": match, "start": a, "end": b}
    status, body = get_body(session, endpoint, params, **kw)
    if status in SERIES_INDEX_REFUSED:
        endpoint = f"{url.rstrip('/')}/api/v1/query"
        params = {"query": f"count(count_over_time({match}[{max(1, b - a)}s]))", "time": f"{b - 0.001:.3f}"}
        data = parse_json(endpoint, params, *get_body(session, endpoint, params, **kw))
        result = data.get("result") if isinstance(data, dict) else None
        if data.get("resultType") != "vector" or not isinstance(result, list):
            raise NotPrometheusAnswer(f"{endpoint}: a count of series is not a vector")
        try:
            return int(float(result[0]["value"][1])) if result else 0
        except (KeyError, IndexError, TypeError, ValueError):
            raise NotPrometheusAnswer(f"{endpoint}: a count of series is not a number") from None
    found = parse_json(endpoint, params, status, body)
    if not isinstance(found, list):
        raise NotPrometheusAnswer(f"{endpoint}: the series are not a list")
    return len(found)
