"""A prometheus_client collector over the warehouse: each scrape reads a short-lived reader
connection (never blocks the writer) and the facts as of the data's now the CLI prints
(gpuledger.facts: the materialized rows when they are fresh for that moment and the config in
force, else computed), cached for ``cache_s`` so a fast scrape interval does not ask every second.

Metrics (labels in braces). Prometheus names carry base units (``promtool check metrics``
refuses ``_hours``), so GPU time is in GPU-seconds (GPU-hours × 3600; budgets in normalised
GPU-seconds); divide by 3600 to show GPU-hours:
  gpuledger_fairshare_factor{node}            0..1, hierarchical fair-share factor
  gpuledger_fairshare_rank{node}              rank in the queue order (1 = first)
  gpuledger_delivery_ratio{node}              delivered ÷ owed GPU-hours over the usage window
  gpuledger_budget_remaining_gpu_seconds{node}  remaining budget in the current period
  gpuledger_budget_consumed_ratio{node}       consumed ÷ budget
  gpuledger_budget_projected_exhaustion_timestamp_seconds{node}  Unix time, only when it falls
                                              inside the budget's period (absent otherwise)
  gpuledger_squatters{severity}               jobs on idle GPUs now, by severity (0 when none)
  gpuledger_wasted_gpu_seconds{project}       idle GPU time held by the current squatters (0 for
                                              every project of the tree without one)
  gpuledger_alerts_outbox{status}             alerts in the outbox by status (0 for an empty status)
  gpuledger_data_timestamp_seconds            the data's "now" the figures are computed at
  gpuledger_energy_facility_joules{project}   facility energy this month so far (GPU energy × PUE;
                                              ÷ 3.6e6 = kWh); absent where unknown (no reading, no PUE)
  gpuledger_emissions_co2e_grams{project}     emissions this month so far (÷ 1000 = kgCO2e); absent
                                              where unknown
  gpuledger_emissions_unknown_gpu_seconds{project}  GPU time this month whose emissions are unknown
  gpuledger_job_wait_seconds{project,class,quantile}  wait (submit -> start) of the jobs submitted in
                                              the 7 days before the data's now: quantile 0.5, 0.9 and
                                              1 (the longest); jobs still waiting count with their
                                              wait so far (gpuledger report waits)
"""


from __future__ import annotations

import math
import threading
import time
from calendar import timegm
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gpuledger import facts, warehouse
from gpuledger.config_store import policy_in_force
from gpuledger.errors import GpuledgerError, printable
from gpuledger.metrics.pipeline_health import register_if_configured
from gpuledger.rules.severity import STAGES

SECONDS_PER_HOUR = 3600.0
WAIT_WINDOW_DAYS = 7  # the wait gauge: jobs submitted in this many days before the data's now
OUTBOX_STATUSES = ("failed", "pending", "sent")


def _unix(moment) -> float:
    return float(timegm(moment.timetuple())) + moment.microsecond / 1e6


def compute_figures(path: Path, policy=None) -> list[tuple[str, str, list[tuple[dict, float]]]]:
    """(name, help, [(labels, value)]) for every metric, from the warehouse at ``path``, under
    ``policy`` (default: the config in force, as `gpuledger report` reads it)."""
    with warehouse.open_reader(path) as con:
        # a callable: the stored config, whose materialized rows can answer (a given policy gets
        # rows made under it only when it is the stored one: the facts' own rule)
        asked = policy if policy is not None else (lambda: policy_in_force(con))
        now = facts.data_now(con)
        fs = facts.fairshare(con, policy=asked, as_of=now).frame
        burn = facts.budget(con, policy=asked, as_of=now).frame
        squat = facts.findings(con, policy=asked, now=now).frame
        outbox = con.execute("SELECT status, count(*) FROM alert_outbox GROUP BY status ORDER BY status").fetchall()
        applied = con.execute(
            "SELECT action, outcome, coalesce(cause, outcome), dry_run, count(*) FROM enforcement_audit "
            "WHERE phase = 'applied' GROUP BY ALL ORDER BY ALL").fetchall()
        month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        carbon = facts.carbon(con, start=month_start, end=now, now=now, policy=asked).frame
        wait_now = facts.waits_now(con)
        waits = facts.waits(con, start=wait_now - timedelta(days=WAIT_WINDOW_DAYS),
                            end=wait_now + timedelta(microseconds=1), now=wait_now, by="project-class").frame
        projects = [n for (n,) in con.execute("SELECT node FROM org_nodes WHERE node NOT IN "
                                              "(SELECT parent FROM org_nodes WHERE parent IS NOT NULL) ORDER BY node")
                    .fetchall()]

    def series(frame, col, key="node", scale=1.0):
        return [({key: str(r[key])}, float(r[col]) * scale) for r in frame.iter_rows(named=True)
                if r[col] is not None and not (isinstance(r[col], float) and math.isnan(r[col]))]

    burn = burn.with_columns((burn["consumed_gpu_hours"] / burn["budget_gpu_hours"]).alias("_ratio")) \
        if burn.height else burn
    # a projected exhaustion after the budget's period ends is no exhaustion: the period resets first
    exhaustion = [({"node": r["node"]}, _unix(r["projected_exhaustion"])) for r in burn.iter_rows(named=True)
                  if r["projected_exhaustion"] is not None
                  and r["projected_exhaustion"] < datetime.combine(r["period_end"], datetime.min.time())]
    by_sev = dict.fromkeys(STAGES, 0)
    wasted: dict[str, float] = {str(p): 0.0 for p in projects}
    for r in squat.iter_rows(named=True):
        by_sev[r["severity"]] = by_sev.get(r["severity"], 0) + 1
        wasted[str(r["project"])] = wasted.get(str(r["project"]), 0.0) + float(r["gpu_hours_idle"] or 0.0)
    counts = {s: 0 for s in OUTBOX_STATUSES} | dict(outbox)
    return [
        ("gpuledger_fairshare_factor", "Hierarchical fair-share factor, 0..1", series(fs, "fairshare_factor")),
        ("gpuledger_fairshare_rank", "Rank in the fair-share queue order (1 = first)", series(fs, "fs_rank")),
        ("gpuledger_delivery_ratio", "Delivered / owed GPU-hours over the usage window", series(fs, "delivery_ratio")),
        ("gpuledger_budget_remaining_gpu_seconds", ("Budget remaining in the current period (normalised GPU-seconds; "
                                                    "/ 3600 = GPU-hours)"), series(burn, "remaining_gpu_hours", scale=SECONDS_PER_HOUR) if burn.height else []),
        ("gpuledger_budget_consumed_ratio", "Budget consumed / budget", series(burn, "_ratio") if burn.height else []),
        ("gpuledger_budget_projected_exhaustion_timestamp_seconds", "When the budget runs out at the current burn",
         exhaustion),
        ("gpuledger_squatters", "Jobs holding idle GPUs now, by severity",
         [({"severity": s}, float(n)) for s, n in sorted(by_sev.items())]),
        ("gpuledger_wasted_gpu_seconds", "Idle GPU time held by the current squatters (GPU-seconds)",
         [({"project": p}, v * SECONDS_PER_HOUR) for p, v in sorted(wasted.items())]),
        ("gpuledger_alerts_outbox", "Alerts in the outbox by status",
         [({"status": s}, float(n)) for s, n in sorted(counts.items())]),
        ("gpuledger_data_timestamp_seconds", "The data's now the figures are computed at", [({}, _unix(now))]),
        ("gpuledger_energy_facility_joules", ("Facility energy this month so far, GPU energy x PUE (J; / 3.6e6 = kWh); "
                                              "absent where unknown"),
         series(carbon, "energy_kwh_facility", key="project", scale=3.6e6)),
        ("gpuledger_emissions_co2e_grams", "Emissions this month so far (gCO2e; / 1000 = kgCO2e); absent where unknown",
         series(carbon, "kg_co2e", key="project", scale=1000.0)),
        ("gpuledger_emissions_unknown_gpu_seconds", "GPU time this month whose emissions are unknown: no energy reading, no PUE or intensity (GPU-seconds)",
         series(carbon, "gpu_hours_co2_unknown", key="project", scale=SECONDS_PER_HOUR)),
        ("gpuledger_job_wait_seconds", (f"Wait of the jobs submitted in the {WAIT_WINDOW_DAYS} days before the data's "
                                        "now, submit -> start (s); jobs still waiting count with their wait so far"),
         [({"project": str(r["project"]), "class": str(r["job_class"]), "quantile": q}, float(r[col]))
          for r in waits.iter_rows(named=True) for q, col in (("0.5", "wait_p50_s"), ("0.9", "wait_p90_s"),
                                                              ("1", "wait_max_s")) if r[col] is not None]),
        ("gpuledger_enforcement_actions_total", ("Enforcement actions applied, by action, outcome and cause (why it was "
                                                 "done, refused or skipped; the audit's words in `enforce explain`)"),
         [({"action": a, "outcome": o, "cause": c, "dry_run": str(bool(d)).lower()}, float(n))
          for a, o, c, d, n in applied]),
    ]


class LedgerCollector:
    """prometheus_client custom collector; figures cached for ``cache_s`` seconds."""

    def __init__(self, path: Path, *, policy=None, cache_s: float = 30.0):
        self.path, self.policy, self.cache_s = path, policy, cache_s
        self._lock = threading.Lock()
        self._at, self._figures = -math.inf, []

    def figures(self):
        with self._lock:
            if time.monotonic() - self._at > self.cache_s:
                self._figures = compute_figures(self.path, self.policy)
                self._at = time.monotonic()
            return self._figures

    def collect(self):
        # lazy: optional extra gpuledger[alerts]
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for name, doc, samples in self.figures():
            labels = sorted({k for lab, _ in samples for k in lab})
            family = (CounterMetricFamily(name.removesuffix("_total"), doc, labels=labels) if name.endswith("_total")
                      else GaugeMetricFamily(name, doc, labels=labels))
            for lab, value in samples:
                family.add_metric([lab[k] for k in labels], value)
            yield family


DEFAULT_HOST = "127.0.0.1"  # per-project figures: listen beyond this machine only when told to
LISTEN_BACKLOG = 1024  # a fleet's Prometheus replicas scrape at once; socketserver's default of 5 drops SYNs


def _reason(exc: BaseException) -> str:
    """One line for a refresh that failed: gpuledger's own message, else the exception's first line."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    text = (str(exc).strip() or type(exc).__name__).splitlines()[0]
    if isinstance(exc, GpuledgerError) or "WarehouseError" in names:
        return printable(text, 400)
    return printable(f"internal error: {type(exc).__name__}: {text}", 400)


class CachedExposition:
    """The /metrics page, computed once per ``cache_s`` however many scrapes arrive: one refresh in
    flight at a time; while it runs, scrapes get the previous page (or, before the first one, wait
    for it). A refresh that fails clears the page: scrapes get the reason (served as 503) until one
    succeeds, and ``log`` hears each new reason once, not once per scrape."""

    def __init__(self, render, *, cache_s: float, log=lambda line: None):
        self._render, self.cache_s, self._log = render, cache_s, log
        self._cond = threading.Condition()
        self._body: bytes | None = None
        self._error: str | None = None
        self._at = -math.inf
        self._refreshing = False
        self.refreshes = 0  # computations started (a test oracle: 200 scrapes, one computation)

    def page(self) -> tuple[bytes | None, str | None]:
        """(the exposition text, None) or (None, why there is none)."""
        with self._cond:
            fresh = time.monotonic() - self._at <= self.cache_s
            if fresh and (self._body is not None or self._error is not None):
                return self._body, self._error
            if self._refreshing:
                if self._body is not None:
                    return self._body, None  # stale by less than one computation
                while self._refreshing:
                    self._cond.wait()
                return self._body, self._error
            self._refreshing = True
            self.refreshes += 1
        body, error = None, None
        try:
            body = self._render()
        except Exception as exc:  # noqa: BLE001 - any failure is told to the scraper, the server lives on
            error = _reason(exc)
        with self._cond:
            if error is not None and error != self._error:
                self._log(f"gpuledger metrics: /metrics answers 503: {error}")
            elif error is None and self._error is not None:
                self._log("gpuledger metrics: /metrics answers again")
            self._body, self._error, self._at = body, error, time.monotonic()
            self._refreshing = False
            self._cond.notify_all()
        return body, error


def exposition_renderer(path: Path, *, policy=None):
    """A function computing the whole /metrics page (Prometheus text format) from the warehouse."""
    from prometheus_client import CollectorRegistry, generate_latest  # lazy: optional extra gpuledger[alerts]

    registry = CollectorRegistry()
    registry.register(LedgerCollector(path, policy=policy, cache_s=0))

    register_if_configured(registry)  # pipeline health from the Dagster instance, when there is one
    return lambda: generate_latest(registry)


def make_server(path: Path, *, port: int, host: str = DEFAULT_HOST, policy=None, cache_s: float = 30.0,
                log=lambda line: None):
    """A threaded HTTP server answering GET /metrics from one :class:`CachedExposition`; not yet
    serving (``serve_forever`` in a thread). Raises OSError when it cannot listen."""
    from prometheus_client import CONTENT_TYPE_LATEST  # lazy: optional extra gpuledger[alerts]

    page = CachedExposition(exposition_renderer(path, policy=policy), cache_s=cache_s, log=log)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                return self._answer(404, b"not found: gpuledger serves /metrics\n", "text/plain; charset=utf-8")
            body, error = page.page()
            if body is None:
                return self._answer(503, f"gpuledger metrics unavailable: {error}\n".encode(),
                                    "text/plain; charset=utf-8")
            return self._answer(200, body, CONTENT_TYPE_LATEST)

        def _answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # one line per problem (CachedExposition), none per scrape
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = LISTEN_BACKLOG

    if ":" in host:
        Server.address_family = __import__("socket").AF_INET6
    server = Server((host, port), Handler)
    server.page = page
    return server


def serve(path: Path, *, port: int, host: str = DEFAULT_HOST, policy=None, cache_s: float = 30.0,
          log=lambda line: None):
    """Serve /metrics in a thread; returns (server, thread): the caller waits, and stops it with
    ``server.shutdown()``."""
    server = make_server(path, port=port, host=host, policy=policy, cache_s=cache_s, log=log)
    thread = threading.Thread(target=server.serve_forever, name="gpuledger-metrics", daemon=True)
    thread.start()
    return server, thread
