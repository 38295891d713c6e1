"""Kubernetes job records: list and watch GPU pods (and Kueue Workloads) into ``jobs``.

The API side follows the client-go informer pattern with the official ``kubernetes`` client:

1. **List** pods in pages (``limit`` + ``_continue``), nodes (for their ``nvidia.com/gpu.product``
   label) and, when the CRD exists, Kueue Workloads; write every GPU pod's row; close rows of pods
   that vanished while nobody watched. The list's ``resourceVersion`` is where the watch starts.
2. **Watch** pods from that version with bookmarks on; every event and BOOKMARK advances the
   version, so a stream that ends (``timeout_seconds``) resumes exactly where it stopped.
3. **410 Gone** (the server has compacted that history — an ``ERROR`` event with a 410 Status, or an
   HTTP 410) → list again and watch from the new version. Kueue Workloads are re-listed each time
   a watch stream ends (they change rarely; one pod watch keeps this a single connection).

Objects are read as raw JSON (``_preload_content=False`` / ``Watch(return_type="object")``) so a
malformed object is quarantined by :func:`~gpuledger.ingest.jobs.k8s_mapping.map_pod` instead of
failing the client's model deserialisation for the whole page. Mapping lives in ``k8s_mapping``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from gpuledger import warehouse
from gpuledger.deadlines import KUBERNETES, CallDeadline, why_unreachable
from gpuledger.ingest.device_links import link_devices_for_jobs
from gpuledger.ingest.jobs.checks import job_limits, screen_jobs
from gpuledger.ingest.jobs.k8s_lists import HTTP_GONE, list_in_pages
from gpuledger.ingest.jobs.k8s_mapping import (
    DEFAULT_OPTIONS,
    JobRecord,
    MappingOptions,
    Rejected,
    map_pod,
    map_workload,
    node_gpu_products,
    raw_text,
    workload_reasons,
)
from gpuledger.ingest.scheduler_reasons import record_reasons
from gpuledger.ingest.tiers import node_label_rows, store_node_labels
from gpuledger.rules.clock import utc_now
from gpuledger.warehouse.job_columns import JOB_CORE, job_schema

log = logging.getLogger(__name__)

QUARANTINE_SOURCE = "kubernetes"
KUEUE_GROUP, KUEUE_VERSION, KUEUE_PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"  # v1beta1 is deprecated

JOB_SCHEMA: dict[str, pl.DataType] = {**JOB_CORE, **job_schema("priority_class", "scheduler_job", "gpu_memory_mib")}


def api_client(kubeconfig: str | os.PathLike | None = None, context: str | None = None, *,
               retries: int | None = None) -> k8s.ApiClient:
    """An API client from a kubeconfig (``--kubeconfig``, else $KUBECONFIG / ~/.kube/config), or the
    pod's service account when running in a cluster with no kubeconfig at hand. ``retries``: urllib3's
    own retries per request (None: its default of 3, each with a warning on stderr; the ingest asks
    for 0 and says what failed in one line)."""
    default = Path(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]).expanduser()
    configuration = k8s.Configuration()
    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ and not default.exists():
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                    client_configuration=configuration)
    if retries is not None:
        configuration.retries = retries
    return k8s.ApiClient(configuration)


@dataclass
class IngestStats:
    """What one sync or watch did; the CLI prints it and tests assert on it."""

    pods_listed: int = 0
    workloads_listed: int = 0
    watch_events: int = 0
    jobs_written: int = 0
    quarantined: int = 0
    ignored: int = 0  # pods / workloads asking for no GPU
    vanished_closed: int = 0
    relists: int = 0
    resource_version: str | None = None
    watch_resumed_from: list[str] = field(default_factory=list)


@dataclass
class _Batch:
    records: dict[str, JobRecord] = field(default_factory=dict)
    rejects: list[tuple[Rejected, str]] = field(default_factory=list)
    reasons: list = field(default_factory=list)  # Kueue's QuotaReserved word on each Workload (027)

    def add(self, result: JobRecord | Rejected | None, obj: Any, stats: IngestStats) -> None:
        if isinstance(result, JobRecord):
            self.records[result.job_id] = result  # the newest state of a pod wins
            if result.source == "kueue":
                self.reasons.extend(workload_reasons(obj, result))
        elif isinstance(result, Rejected):
            self.rejects.append((result, raw_text(obj)))
        else:
            stats.ignored += 1

    def __len__(self) -> int:
        return len(self.records) + len(self.rejects)


def jobs_frame(records: list[JobRecord]) -> pl.DataFrame:
    """Records as a frame typed like ``jobs``."""
    if not records:
        return pl.DataFrame(schema=JOB_SCHEMA)
    return pl.DataFrame([r.as_row() for r in records], schema=JOB_SCHEMA, orient="row")


def write_batch(
    con, records: list[JobRecord], rejects: list[tuple[Rejected, str]], *, now: datetime, reasons=(),
) -> tuple[int, int]:
    """Upsert job rows and quarantine rejects on an open writer. Returns (rows offered, rejects).
    Rows the warehouse's limits refuse (checks.job_problem) are quarantined with the rejects."""
    frame = jobs_frame(records)
    if frame.height:
        frame, refused = screen_jobs(frame, job_limits(con), now=now, source=QUARANTINE_SOURCE,
                                     locations=[r.scheduler_job or r.job_id for r in records])
        rejects = [*rejects, *((Rejected(q.location, q.reason), q.raw_text) for q in refused)]
    # Only the columns the table has (a warehouse migrated past 009 before 008 existed lacks scheduler_job).
    columns = {r[0] for r in con.execute("DESCRIBE jobs").fetchall()}
    frame = frame.select([c for c in frame.columns if c in columns])
    _rekey_legacy_rows(con, frame)
    written = warehouse.upsert(con, "jobs", frame)
    link_devices_for_jobs(con, frame)  # devices from the pod labels on samples already stored
    quarantined = warehouse.quarantine(
        con,
        [warehouse.QuarantineRow(QUARANTINE_SOURCE, r.location, text, r.reason) for r, text in rejects],
        now=now,
    )
    kept = set(frame["job_id"].to_list()) if frame.height else set()
    record_reasons(con, [r for r in reasons if r.job_id in kept])  # Kueue's reasons, for rows that landed
    return written, quarantined


def _rekey_legacy_rows(con, frame: pl.DataFrame) -> None:
    """Rows written before pods were keyed by uid (job_id = namespace/name) are the same pod as an
    incoming uid row with that name and creation time: drop the old key (and the allocations derived
    under it, which linking derives again) so the pod is not counted twice."""
    if frame.is_empty() or "scheduler_job" not in frame.columns:
        return
    same = frame.filter(pl.col("job_id") != pl.col("scheduler_job")).select(
        "cluster", "job_id", "scheduler_job", "submit_time")
    if same.is_empty():
        return
    con.register("_k8s_rekey", same.to_arrow())
    try:
        old = ("SELECT j.cluster, j.job_id FROM jobs j JOIN _k8s_rekey r ON j.cluster = r.cluster "
               "AND j.job_id = r.scheduler_job AND j.submit_time = r.submit_time AND j.source = 'kubernetes'")
        con.execute(f"DELETE FROM job_allocations WHERE source = 'labels' AND (cluster, job_id) IN ({old})")
        con.execute(f"DELETE FROM jobs WHERE (cluster, job_id) IN ({old})")
    finally:
        con.unregister("_k8s_rekey")


class KubernetesIngest:
    """List + watch one cluster's GPU pods into the warehouse.

    ``clock`` returns naive UTC and stamps ``updated_at`` (tests fix it). ``page_size`` is the list
    ``limit``.
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        cluster: str,
        warehouse_path: str | os.PathLike | None = None,
        options: MappingOptions = DEFAULT_OPTIONS,
        page_size: int = 500,
        clock: Callable[[], datetime] = utc_now,
        deadline: CallDeadline = KUBERNETES,
        write_guard: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ) -> None:
        self.api = api
        self.write_guard = write_guard  # around every warehouse write (StopSignals.holding: no stop mid-write)
        self.deadline = deadline  # connect / read timeouts of every call (a silent server ends the run)
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.cluster = cluster
        self.warehouse_path = warehouse_path
        self.options = options
        self.page_size = page_size
        self.clock = clock
        self.node_products: dict[str, str] = {}
        self.node_labels: pl.DataFrame | None = None  # rows for node_labels, stored on the next full sync
        self.kueue_available: bool | None = None
        self._watch: k8s_watch.Watch | None = None

    # --- listing --------------------------------------------------------------------------
    def _list(self, call: Callable[..., Any], *args: Any) -> tuple[list[Any], str | None]:
        """Every item of a paginated list and the list's resourceVersion (k8s_lists.list_in_pages)."""
        return list_in_pages(call, *args, page_size=self.page_size,
                             request_timeout=(self.deadline.connect_s, self.deadline.read_s))

    def list_pods(self) -> tuple[list[Any], str | None]:
        return self._list(self.core.list_pod_for_all_namespaces)

    def refresh_nodes(self) -> None:
        nodes, _ = self._list(self.core.list_node)
        self.node_products = node_gpu_products(nodes)
        # Node labels (capacity type, ...) decide the pricing tier of the devices on each node.
        self.node_labels = node_label_rows(nodes, cluster=self.cluster, now=self.clock())

    def list_workloads(self) -> list[Any]:
        """Kueue Workloads in every namespace; [] when Kueue is not installed (404)."""
        if self.kueue_available is False:
            return []
        try:
            items, _ = self._list(
                self.custom.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, KUEUE_PLURAL
            )
        except k8s.ApiException as exc:
            if exc.status == 404:
                if self.kueue_available is None:
                    log.info("no Kueue Workload API on this cluster; reading pods only")
                self.kueue_available = False
                return []
            raise
        self.kueue_available = True
        return items

    # --- writing --------------------------------------------------------------------------
    def _write(self, batch: _Batch, stats: IngestStats, *, listed_pod_ids: set[str] | None = None) -> None:
        now = self.clock()
        with self.write_guard():  # the write and its count, or neither
            with warehouse.open_writer(self.warehouse_path) as con:
                written, quarantined = write_batch(con, list(batch.records.values()), batch.rejects, now=now,
                                                   reasons=batch.reasons)
                if listed_pod_ids is not None:
                    stats.vanished_closed += self._close_vanished(con, listed_pod_ids, now)
                    if self.node_labels is not None:
                        store_node_labels(con, self.node_labels)  # and re-tier this cluster's devices
            stats.jobs_written += written
            stats.quarantined += quarantined

    def _close_vanished(self, con, listed: set[str], now: datetime) -> int:
        """Pods still open in the warehouse but absent from a full list were deleted while no watch
        ran: end them now (state "Gone"), the earliest moment known to be after their end."""
        open_rows = con.execute(
            "SELECT job_id FROM jobs WHERE cluster = ? AND source = 'kubernetes' AND end_time IS NULL",
            [self.cluster],
        ).fetchall()
        gone = [job_id for (job_id,) in open_rows if job_id not in listed]
        if gone:
            con.execute(
                "UPDATE jobs SET end_time = ?, state = 'Gone', updated_at = ? "
                "WHERE cluster = ? AND job_id IN (SELECT unnest(?::VARCHAR[]))",
                [now, now, self.cluster, gone],
            ).fetchall()
        return len(gone)

    # --- one full pass --------------------------------------------------------------------
    def sync(self, stats: IngestStats | None = None) -> IngestStats:
        """List nodes, pods and Workloads and write them all. Idempotent: a second run over the same
        cluster state changes no row counts."""
        stats = stats or IngestStats()
        now = self.clock()
        self.refresh_nodes()
        pods, version = self.list_pods()
        workloads = self.list_workloads()
        batch = _Batch()
        listed: set[str] = set()
        for pod in pods:
            result = map_pod(
                pod, cluster=self.cluster, now=now, options=self.options, node_products=self.node_products
            )
            batch.add(result, pod, stats)
            meta = pod.get("metadata") if isinstance(pod, dict) else None
            if isinstance(meta, dict):  # the job_id map_pod gives it: the uid, else the name
                listed.add(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        for workload in workloads:
            batch.add(
                map_workload(workload, cluster=self.cluster, now=now, options=self.options), workload, stats
            )
        stats.pods_listed += len(pods)
        stats.workloads_listed += len(workloads)
        self._write(batch, stats, listed_pod_ids=listed)
        stats.resource_version = version
        return stats

    def _sync_workloads(self, stats: IngestStats) -> None:
        workloads = self.list_workloads()
        if not workloads:
            return
        now = self.clock()
        batch = _Batch()
        for workload in workloads:
            batch.add(
                map_workload(workload, cluster=self.cluster, now=now, options=self.options), workload, stats
            )
        stats.workloads_listed += len(workloads)
        self._write(batch, stats)

    # --- watching -------------------------------------------------------------------------
    def watch(
        self,
        stop: threading.Event | None = None,
        *,
        timeout_seconds: int = 300,
        flush_every: int = 500,
        flush_interval_s: float = 30.0,
        max_streams: int | None = None,
        on_flush: Callable[[IngestStats], None] | None = None,
        stats: IngestStats | None = None,
    ) -> IngestStats:
        """Sync, then follow pod changes until ``stop`` is set (or ``max_streams`` watch streams ran).

        Each watch request lasts at most ``timeout_seconds``; writes are batched until
        ``flush_every`` objects or ``flush_interval_s`` seconds have gathered, and at the end of
        every stream. ``on_flush`` is called after each write (a hook for progress and tests).
        """
        stop = stop or threading.Event()
        stats = self.sync(stats)
        if on_flush:
            on_flush(stats)
        version = stats.resource_version
        streams = 0
        backoff_s = 1.0
        while not stop.is_set() and (max_streams is None or streams < max_streams):
            streams += 1
            batch = _Batch()
            last_flush = time.monotonic()

            def flush() -> None:
                nonlocal batch, last_flush
                if len(batch):
                    self._write(batch, stats)
                    if on_flush:
                        on_flush(stats)
                batch = _Batch()
                last_flush = time.monotonic()

            stats.watch_resumed_from.append(str(version))
            try:
                self._watch = k8s_watch.Watch(return_type="object")
                stream = self._watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=timeout_seconds,
                    _request_timeout=(self.deadline.connect_s, timeout_seconds + self.deadline.read_s),
                )
                for event in stream:
                    kind, obj = event.get("type"), event.get("raw_object")
                    meta = obj.get("metadata") if isinstance(obj, dict) else None
                    event_version = meta.get("resourceVersion") if isinstance(meta, dict) else None
                    if kind == "ERROR":  # the client raises for these; kept for other clients
                        code = obj.get("code") if isinstance(obj, dict) else None
                        raise k8s.ApiException(status=code or 500, reason=str(obj))
                    if kind != "BOOKMARK":
                        stats.watch_events += 1
                        result = map_pod(
                            obj,
                            cluster=self.cluster,
                            now=self.clock(),
                            options=self.options,
                            node_products=self.node_products,
                            deleted=kind == "DELETED",
                        )
                        batch.add(result, obj, stats)
                    version = event_version or version
                    stats.resource_version = version
                    if len(batch) >= flush_every or time.monotonic() - last_flush >= flush_interval_s:
                        flush()
                    if stop.is_set():
                        break
                flush()
                self._sync_workloads(stats)
                backoff_s = 1.0
            except k8s.ApiException as exc:
                flush()  # events before the error are sound
                if exc.status != HTTP_GONE:
                    raise
                log.info("watch from resourceVersion %s is gone (410); listing again", version)
                stats.relists += 1
                self.sync(stats)
                version = stats.resource_version
                if on_flush:
                    on_flush(stats)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                flush()
                if stop.is_set():
                    break
                log.warning("watch connection to %s failed (%s); resuming from %s in %.0f s",
                            self.api.configuration.host, why_unreachable(exc, self.deadline), version, backoff_s)
                stop.wait(backoff_s)
                backoff_s = min(backoff_s * 2, 60.0)
            finally:
                self._watch = None
        return stats

    def stop_watch(self) -> None:
        """Break the current watch stream now (from another thread; pair with the stop event)."""
        current = self._watch
        if current is not None:
            current.stop()
