"""The side-by-side questions: their PromQL, a real Prometheus to ask, gpuledger's answers, and
the comparison of the two (pure functions over plain dicts, so a test can check the logic).

Conventions shared by every question:

* The activity signal is ``DCGM_FI_PROF_SM_ACTIVE`` (0..1), gpuledger's best signal on these
  devices; blank readings are not in the TSDB (prom_data.py).
* A MIG instance is its own series in Prometheus (``GPU_I_PROFILE``); gpuledger counts it as its
  fraction of the GPU (compute slices / 7). PromQL groups by ``GPU_I_PROFILE`` and the client
  weights each group: ``weight("3g.40gb") = 3/7``.
* Kubernetes jobs carry ``namespace`` / ``pod``; Slurm jobs only ``hpc_job`` (the Slurm job id).
  Namespace -> project as gpuledger maps it (the Kubernetes source's namespace_projects, else the
  namespace); hpc_job -> project through the Slurm accounting (the warehouse's jobs table), which
  is what a Prometheus user would join with ``sacct``.
* An instant query over ``[w]`` at t covers (t - w, t]; gpuledger's hours are [h, h + 1 h). So a
  query for [a, b) is evaluated at b - 1 s (samples sit on 30 s ticks).
"""

from __future__ import annotations

import math
import statistics
import subprocess
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

METRIC = "DCGM_FI_PROF_SM_ACTIVE"
STEP_S = 30  # the sample interval: one sample = 30 s of the device
GROUP = "namespace, hpc_job, GPU_I_PROFILE"

PROMQL = {
    "gpu_hours": f"sum by ({GROUP}) (count_over_time({METRIC}[{{w}}]))",
    "activity": f"sum by ({GROUP}) (sum_over_time({METRIC}[{{w}}]))",
    # Idle for the sustained window, the device was already this job's 90 min ago (30 min grace +
    # 60 min sustained: gpuledger judges a job only from its start + grace), and it still is (a
    # range function answers for a series that ended inside the window: without the last term a
    # job that finished idle 30 minutes ago would still be listed).
    "idle": f"(max_over_time({METRIC}[60m]) < {{thr}}) and ({METRIC} offset 90m) and {METRIC}",
    # devices (not series: a host-label respelling splits one device into two series) per job
    "held": f"count by (namespace, pod, hpc_job) (count by (namespace, pod, hpc_job, UUID, GPU_I_ID) ({METRIC}))",
    # Per device (UUID + MIG instance) mean over the hour, summed per profile: the device's
    # series are split by job labels, so per-series averages would count a device twice.
    "util_active": (f"sum by (GPU_I_PROFILE) (sum by (UUID, GPU_I_ID, GPU_I_PROFILE) (sum_over_time({METRIC}[1h]))"
                    f" / sum by (UUID, GPU_I_ID, GPU_I_PROFILE) (count_over_time({METRIC}[1h])))"),
    "util_devices": f"count by (GPU_I_PROFILE) (count by (UUID, GPU_I_ID, GPU_I_PROFILE) (count_over_time({METRIC}[1h])))",
    "usage_hourly": f"sum by ({GROUP}) (count_over_time({METRIC}[1h]))",
}


def epoch(moment: datetime) -> float:
    """Epoch seconds of a naive-UTC datetime (the warehouse's convention), whatever the local zone."""
    return moment.replace(tzinfo=UTC).timestamp()


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def weight(profile: str | None) -> float:
    """The GPU fraction of a series: 1 for a whole GPU, slices/7 for a MIG instance."""
    if not profile:
        return 1.0
    return int(profile.split("g", 1)[0]) / 7


# --- a real Prometheus ---------------------------------------------------------------------------

class Prometheus:
    """``prometheus`` over an existing TSDB on a free port, no scrape targets, no compaction
    (min = max block duration, so background compaction never runs under a timed query) and
    limits raised so a week of thousands of series can be asked for at all."""

    def __init__(self, tsdb: Path, log: Path, *, ready_timeout_s: float = 180.0):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = tsdb.parent / f"{tsdb.name}.prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1h\n")
        self._log = open(log, "w")  # noqa: SIM115 - open for the server's life, closed by stop()
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=3650d",
             "--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h",
             "--query.max-samples=1000000000", "--query.timeout=10m", "--query.lookback-delta=5m"],
            stdout=self._log, stderr=subprocess.STDOUT)
        began = time.monotonic()
        deadline = began + ready_timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self.process.returncode}); see {log}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"Prometheus not ready in {ready_timeout_s:g} s; see {log}")
            time.sleep(0.1)
        self.ready_s = time.monotonic() - began

    def _get(self, path: str, params: dict) -> list[dict]:
        body = requests.get(f"{self.url}{path}", params=params, timeout=900).json()
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus {path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]

    def query(self, promql: str, at: float) -> list[dict]:
        return self._get("/api/v1/query", {"query": promql, "time": f"{at:.3f}"})

    def query_range(self, promql: str, start: float, end: float, step_s: int) -> list[dict]:
        return self._get("/api/v1/query_range", {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                 "step": str(step_s)})

    def series(self, match: str, start: float, end: float) -> list[dict]:
        """The label sets of the series ``match`` selects that have samples in [start, end]."""
        body = requests.get(f"{self.url}/api/v1/series", params={"match[]": match, "start": f"{start:.3f}",
                                                                  "end": f"{end:.3f}"}, timeout=900).json()
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus /api/v1/series {match}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]  # a list of label sets (no "result" level, unlike /query)

    def series_count(self) -> int:
        head = requests.get(f"{self.url}/api/v1/status/tsdb", timeout=60).json()["data"]["headStats"]["numSeries"]
        found = self._get("/api/v1/query", {"query": f"count(count_over_time({METRIC}[3650d]))"})
        return int(float(found[0]["value"][1])) if found else int(head)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def timed(fn, repeats: int) -> tuple[object, list[float]]:
    """fn()'s last answer and the seconds of every call."""
    seconds, out = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - began)
    return out, seconds


def summary(seconds: list[float]) -> dict:
    return {"best": min(seconds), "median": statistics.median(seconds), "runs": len(seconds)}


# --- from Prometheus answers to per-project / per-hour figures -----------------------------------

def project_of(labels: dict, ns_projects: dict, slurm_projects: dict) -> str | None:
    ns, hpc = labels.get("namespace"), labels.get("hpc_job")
    if ns:
        return ns_projects.get(ns) or ns
    if hpc:
        return slurm_projects.get(hpc, f"(unknown Slurm job {hpc})")
    return None  # a device no job holds


def per_project(result: list[dict], ns_projects: dict, slurm_projects: dict, *, scale: float) -> dict[str, float]:
    """Σ value × MIG weight × scale per project (``scale``: seconds per sample / 3600 for hours)."""
    out: dict[str, float] = defaultdict(float)
    for r in result:
        project = project_of(r["metric"], ns_projects, slurm_projects)
        if project is not None:
            out[project] += float(r["value"][1]) * weight(r["metric"].get("GPU_I_PROFILE")) * scale
    return dict(out)


def idle_per_job(idle: list[dict], held: list[dict], exempt_namespaces: set[str]) -> dict[str, dict]:
    """Job key (pod or Slurm job id) -> idle devices and devices held, from the idle and held
    queries; exempt namespaces left out as gpuledger leaves them out."""
    def key(m: dict) -> str | None:
        if m.get("namespace") in exempt_namespaces:
            return None
        return m.get("pod") or m.get("hpc_job") or None

    total = {k: int(float(r["value"][1])) for r in held if (k := key(r["metric"]))}
    devices: dict[str, set] = defaultdict(set)
    for r in idle:  # one device, two series (host label respelled in the window): counted once
        if (k := key(r["metric"])):
            devices[k].add((r["metric"].get("UUID"), r["metric"].get("GPU_I_ID")))
    return {k: {"gpus_idle": len(d), "gpus_total": total.get(k, len(d))} for k, d in devices.items()}


def hourly_active_pct(active: list[dict], capacity_gpus: float, hours: list[datetime], *,
                      stamp_offset_s: int) -> dict[datetime, float]:
    """query_range of util_active -> hour -> active % of ``capacity_gpus`` (MIG weighted)."""
    per: dict[datetime, float] = defaultdict(float)
    for r in active:
        w = weight(r["metric"].get("GPU_I_PROFILE"))
        for t, v in r["values"]:
            per[utc(round(float(t)) - stamp_offset_s)] += float(v) * w
    return {h: 100.0 * per.get(h, 0.0) / capacity_gpus for h in hours}


def hourly_per_project(result: list[dict], ns_projects: dict, slurm_projects: dict, *,
                       stamp_offset_s: int) -> dict[str, dict[datetime, float]]:
    """query_range of usage_hourly -> project -> hour start -> GPU-hours."""
    out: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    for r in result:
        project = project_of(r["metric"], ns_projects, slurm_projects)
        if project is None:
            continue
        w = weight(r["metric"].get("GPU_I_PROFILE"))
        for t, v in r["values"]:
            out[project][utc(round(float(t)) - stamp_offset_s)] += float(v) * w * STEP_S / 3600
    return {p: dict(h) for p, h in out.items()}


def decayed(hourly: dict[datetime, float], as_of: datetime, half_life: timedelta) -> float:
    """Σ GPU-hours of each hour × the mean of 2^(-age/H) over that hour (as gpuledger weighs a
    piece), taking the hour's usage as spread evenly over it (the client-side decay a Prometheus
    user would do; PromQL has no age weighting inside a range)."""
    h = half_life.total_seconds()
    total = 0.0
    for hour, gh in hourly.items():
        a_end = max((as_of - (hour + timedelta(hours=1))).total_seconds(), 0.0)
        a_start = (as_of - hour).total_seconds()
        if a_start <= a_end:
            continue
        w = (h / math.log(2)) * (2 ** (-a_end / h) - 2 ** (-a_start / h)) / (a_start - a_end)
        total += gh * w
    return total


# --- agreement --------------------------------------------------------------------------------

def compare_values(ours: dict[str, float], theirs: dict[str, float], *, rel: float, abs_: float,
                   allowance: dict[str, float] | None = None, shift: dict[str, float] | None = None) -> dict:
    """Per key |prometheus - (gpuledger - shift[key])| <= max(abs_, rel × |gpuledger|) + allowance[key]
    (``shift``: what Prometheus cannot see by construction, e.g. the time of missing samples)."""
    allowance, shift = allowance or {}, shift or {}
    rows, worst, worst_key, bad = [], 0.0, None, []
    for k in sorted(set(ours) | set(theirs)):
        g, p = ours.get(k, 0.0), theirs.get(k, 0.0)
        diff = p - g
        limit = max(abs_, rel * abs(g)) + allowance.get(k, 0.0)
        ok = abs(diff + shift.get(k, 0.0)) <= limit + 1e-9
        rows.append({"key": k, "gpuledger": g, "prometheus": p, "diff": diff, "shift": shift.get(k, 0.0),
                     "limit": limit, "ok": ok})
        rel_k = abs(diff) / abs(g) if g else (0.0 if not diff else math.inf)
        if rel_k >= worst:
            worst, worst_key = rel_k, k
        if not ok:
            bad.append(k)
    return {"agree": not bad, "rows": rows, "worst_rel": worst, "worst_rel_key": worst_key if rows else None,
            "failing": bad}
