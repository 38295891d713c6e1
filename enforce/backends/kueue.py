"""Kueue (``kueue.x-k8s.io/v1beta2``): priorities and preemption on Workload objects.

* set-priority: merge-patch ``spec.priority`` (always mutable; a pending workload is re-sorted, an
  admitted one may be preempted by Kueue for higher-priority work). A workload that references a
  WorkloadPriorityClass (v1beta2 ``spec.priorityClassRef``) has its ``spec.priority`` rewritten by Kueue when that class's value
  changes: gpuledger keeps the value it set (enforcement_job_state) and sets it again when the
  ingested priority differs (policy "drift"), rather than the alpha ``priority-boost`` annotation.
* warn: annotate the workload and emit a Warning Event.
* preempt: ``spec.active=false`` (Kueue evicts, reason Deactivated). To requeue, the workload is
  marked ``gpuledger.io/requeue: pending`` and a later apply run (``prepare``) sets
  ``spec.active=true`` once Kueue reports it evicted — flipping it back at once could race the
  eviction.
Every change carries the reason as an annotation and an Event.
"""

from __future__ import annotations

from gpuledger.enforce.backends import k8s_common as k8s
from gpuledger.enforce.backends.base import (
    DONE,
    DRY_RUN,
    ERROR,
    SERVER_DRY_RUN,
    SKIPPED,
    UNCHANGED,
    Backend,
    BackendUnavailable,
    Outcome,
)
from gpuledger.enforce.model import ENDED, HELD, REQUEUE, RUNNING, WAITING, Action

from gpuledger.deadlines import CallDeadline, why_unreachable
from gpuledger.heap import collector_paused
from gpuledger.ingest.jobs.k8s_lists import list_in_pages
from gpuledger.rules.clock import iso_z, utc_now

GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"
API_VERSION = f"{GROUP}/{VERSION}"


def workload_ref(action: Action) -> tuple[str, str] | None:
    """(namespace, name) of the job's Workload: ingested Kueue rows are ``<ns>/workload/<name>``."""
    parts = action.job_id.split("/")
    if len(parts) == 3 and parts[1] == "workload":
        return parts[0], parts[2]
    if action.source == "kueue" and action.namespace and action.name:
        return action.namespace, action.name
    return None


class KueueBackend(Backend):
    name = "kueue"

    def __init__(self, *, api=None, kubeconfig: str | None = None, context: str | None = None,
                 server_dry_run: bool = False, namespaces: list[str] | None = None,
                 timeout_s: float = k8s.TIMEOUT_S, cluster: str | None = None, clock=utc_now) -> None:
        self.client, _ = k8s.client_modules()
        self.clock = clock  # the warned-at stamp and Events' times (injected: tests fix it)
        self._cluster, self.cluster_source = k8s.cluster_for(kubeconfig, context, cluster)
        self._api = api
        self._config = (kubeconfig, context)
        self.server_dry_run = server_dry_run
        self.namespaces = namespaces  # None: all (ClusterRole); else only these (namespaced Roles)
        self.timeout_s = timeout_s

    def _list(self, custom) -> dict:
        """Every Workload (all namespaces, or only ``namespaces``), as one list object, read in
        pages (a large cluster's Workloads are tens of thousands)."""
        if self.namespaces is None:
            items, _ = list_in_pages(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL,
                                     request_timeout=self.timeout_s)
            return {"items": items}
        items = []
        for ns in self.namespaces:
            items += list_in_pages(custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
                                   request_timeout=self.timeout_s)[0]
        return {"items": items}

    def _apis(self):
        if self._api is None:
            self._api = k8s.api_client(*self._config)
        return self.client.CustomObjectsApi(self._api), self.client.CoreV1Api(self._api)

    @property
    def _dry(self) -> str | None:
        return "All" if self.server_dry_run else None

    def cluster_name(self) -> str:
        return self._cluster

    def handles(self, action: Action) -> str | None:
        if workload_ref(action) is None:
            return f"not a Kueue Workload (source {action.source or 'unknown'}); use the backend of its scheduler"
        return None

    @collector_paused()
    def observe(self) -> dict[str, dict]:
        custom, _ = self._apis()
        try:
            listed = self._list(custom)
        except Exception as exc:
            self._fatal(exc, "listing Kueue Workloads")
            raise
        out = {}
        for wl in listed.get("items") or []:
            meta = wl.get("metadata") or {}
            out[f"{meta.get('namespace')}/workload/{meta.get('name')}"] = workload_view(wl)
        return out

    def live(self, action: Action) -> dict | None:
        ns, name = workload_ref(action)
        custom, _ = self._apis()
        try:
            return workload_view(custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, _request_timeout=self.timeout_s))
        except Exception as exc:
            if k8s.is_api_exception(exc) and k8s.api_error(exc)[0] == 404:
                return None
            self._fatal(exc, f"reading Workload {ns}/{name}")
            raise

    # --- the verbs ----------------------------------------------------------------------------
    # Each verb reads what it needs (a dry run reads too), then lists its writes (k8s.Write): a
    # dry run names them and sends nothing, the real run sends them and names the same.
    def set_priority(self, action: Action, *, dry_run: bool) -> Outcome:
        ns, name = workload_ref(action)
        return self._guard(action, lambda: self._set_priority(action, ns, name, dry_run))

    def _set_priority(self, action, ns, name, dry_run):
        custom, core = self._apis()
        wl = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, _request_timeout=self.timeout_s)
        spec = wl.get("spec") or {}
        note = ""
        if priority_class(spec):
            note = (f"; it references WorkloadPriorityClass {priority_class(spec)}, whose value changes "
                    "rewrite spec.priority: gpuledger sets it again then")
        if spec.get("priority") == action.priority:
            return Outcome(UNCHANGED, f"Workload {ns}/{name} already has priority {action.priority}{note}")
        body = {"spec": {"priority": action.priority},
                "metadata": {"annotations": {k8s.ANN_PRIORITY: str(action.priority),
                                             k8s.ANN_REASON: action.reason[:k8s.MAX_MESSAGE]}}}
        writes = [self._patch(custom, ns, name, body),
                  self._event(core, ns, name, (wl.get("metadata") or {}).get("uid"), "GpuledgerPriority",
                              f"priority {spec.get('priority')} -> {action.priority}: {action.reason}")]
        return self._send(writes, dry_run, f"Workload {ns}/{name} priority {spec.get('priority')} -> "
                                           f"{action.priority}{note}")

    def warn(self, action: Action, *, dry_run: bool) -> Outcome:
        ns, name = workload_ref(action)
        return self._guard(action, lambda: self._warn(action, ns, name, dry_run))

    def _warn(self, action, ns, name, dry_run):
        custom, core = self._apis()
        wl = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, _request_timeout=self.timeout_s)
        body = {"metadata": {"annotations": {k8s.ANN_WARNING: f"{action.stage}: {action.reason}"[:k8s.MAX_MESSAGE],
                                             k8s.ANN_WARNED_AT: iso_z(self.clock())}}}
        writes = [self._patch(custom, ns, name, body),
                  self._event(core, ns, name, (wl.get("metadata") or {}).get("uid"), "GpuledgerIdleWarning",
                              action.reason, "Warning")]
        return self._send(writes, dry_run, f"warned on Workload {ns}/{name} ({action.stage})")

    def preempt(self, action: Action, *, dry_run: bool) -> Outcome:
        ns, name = workload_ref(action)
        return self._guard(action, lambda: self._preempt(action, ns, name, dry_run))

    def _preempt(self, action, ns, name, dry_run):
        custom, core = self._apis()
        wl = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, _request_timeout=self.timeout_s)
        if (wl.get("spec") or {}).get("active") is False:
            return Outcome(UNCHANGED, f"Workload {ns}/{name} is already deactivated")
        annotations = {k8s.ANN_PREEMPTED: action.reason[:k8s.MAX_MESSAGE]}
        if action.mode == REQUEUE:
            annotations[k8s.ANN_REQUEUE] = "pending"
        body = {"spec": {"active": False}, "metadata": {"annotations": annotations}}
        writes = [self._patch(custom, ns, name, body),
                  self._event(core, ns, name, (wl.get("metadata") or {}).get("uid"), "GpuledgerPreempted",
                              f"deactivated ({action.mode}): {action.reason}", "Warning")]
        then = "re-activated by the next apply once evicted" if action.mode == REQUEUE else "left deactivated"
        return self._send(writes, dry_run, f"Workload {ns}/{name} spec.active=false ({then})")

    def hold(self, action: Action, *, dry_run: bool) -> Outcome:
        """A team lead's hold of a pending Workload: ``spec.active=false`` (Kueue admits it not)."""
        ns, name = workload_ref(action)
        return self._guard(action, lambda: self._activate(action, ns, name, False, dry_run))

    def release(self, action: Action, *, dry_run: bool) -> Outcome:
        ns, name = workload_ref(action)
        return self._guard(action, lambda: self._activate(action, ns, name, True, dry_run))

    def _activate(self, action, ns, name, active: bool, dry_run):
        custom, core = self._apis()
        wl = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, _request_timeout=self.timeout_s)
        if ((wl.get("spec") or {}).get("active", True) is not False) == active:
            return Outcome(UNCHANGED, f"Workload {ns}/{name} is already {'active' if active else 'held'}")
        body = {"spec": {"active": active}}
        writes = [self._patch(custom, ns, name, body),
                  self._event(core, ns, name, (wl.get("metadata") or {}).get("uid"),
                              "GpuledgerReleased" if active else "GpuledgerHeld", action.reason)]
        return self._send(writes, dry_run, f"Workload {ns}/{name} spec.active={str(active).lower()} "
                                           f"({'released' if active else 'held'} by its team lead)")

    def prepare(self, *, dry_run: bool) -> list[str]:
        """Re-activate the workloads gpuledger deactivated to requeue, once Kueue evicted them (a
        dry run reads them and lists the writes it would send)."""
        lines = []
        try:
            custom, core = self._apis()
            listed = self._list(custom)
        except Exception as exc:
            self._fatal(exc, "listing Kueue Workloads")
            raise
        for wl in listed.get("items") or []:
            meta, spec = wl.get("metadata") or {}, wl.get("spec") or {}
            if (meta.get("annotations") or {}).get(k8s.ANN_REQUEUE) != "pending" or spec.get("active") is not False:
                continue
            if not _evicted(wl):
                continue
            ns, name = meta.get("namespace"), meta.get("name")
            body = {"spec": {"active": True}, "metadata": {"annotations": {k8s.ANN_REQUEUE: None}}}
            writes = [self._patch(custom, ns, name, body),
                      self._event(core, ns, name, meta.get("uid"), "GpuledgerRequeued",
                                  "re-activated after preemption: it resumes from its checkpoint")]
            try:
                sent = k8s.send_all(writes, dry_run=dry_run)
                lines.append(f"{'would re-activate' if dry_run else 're-activated'} Workload {ns}/{name} "
                             f"(requeue); {sent}")
            except Exception as exc:  # noqa: BLE001
                self._fatal(exc, f"re-activating Workload {ns}/{name}")
                lines.append(f"could not re-activate Workload {ns}/{name}: {k8s.api_error(exc)[1]}")
        return lines

    def _patch(self, custom, ns: str, name: str, body: dict) -> k8s.Write:
        return k8s.Write("PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/{name}", body,
                         lambda: custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, body,
                                                                       dry_run=self._dry,
                                                                       _request_timeout=self.timeout_s))

    def _event(self, core, ns: str, name: str, uid: str | None, reason: str, message: str,
               event_type: str = "Normal") -> k8s.Write:
        return k8s.event_write(self.client, core, namespace=ns, kind="Workload", api_version=API_VERSION, name=name,
                               uid=uid, reason=reason, message=message, event_type=event_type, dry_run=self._dry,
                               timeout_s=self.timeout_s, now=self.clock())

    def _send(self, writes: list[k8s.Write], dry_run: bool, done: str) -> Outcome:
        sent = k8s.send_all(writes, dry_run=dry_run)
        return Outcome(DRY_RUN, sent) if dry_run else Outcome(self._done, f"{done}; {sent}")

    # --- errors ------------------------------------------------------------------------------
    @property
    def _done(self) -> str:
        return SERVER_DRY_RUN if self.server_dry_run else DONE

    def _fatal(self, exc, what: str) -> None:
        if k8s.is_api_exception(exc):
            k8s.raise_if_credential(exc, what)
        elif type(exc).__module__.startswith("urllib3") or isinstance(exc, OSError):
            why = why_unreachable(exc, CallDeadline(self.timeout_s, self.timeout_s, self.timeout_s))
            raise BackendUnavailable(f"{what}: cannot reach the Kubernetes API server ({why}); "
                                     "check the kubeconfig's server and the network") from None

    def _guard(self, action: Action, call) -> Outcome:
        try:
            return call()
        except Exception as exc:
            if not k8s.is_api_exception(exc) and not (type(exc).__module__.startswith("urllib3")
                                                      or isinstance(exc, OSError)):
                raise
            self._fatal(exc, f"{action.action} {action.job_id}")
            status, message = k8s.api_error(exc)
            if status == 404:
                return Outcome(SKIPPED, f"Workload {action.job_id} no longer exists", error=f"404 {message}",
                               cause="gone")
            return Outcome(ERROR, f"{action.action} failed", error=f"{status} {message}")


def workload_view(wl: dict) -> dict:
    """The live view of one Workload (Backend.observe's shape): its uid, whether it is active, the
    pods' labels and annotations then the workload's own, and spec.priority."""
    meta, spec = wl.get("metadata") or {}, wl.get("spec") or {}
    labels, annotations = {}, {}
    for pod_set in spec.get("podSets") or []:  # the pods' own labels, then the workload's
        tmeta = (pod_set.get("template") or {}).get("metadata") or {}
        labels |= tmeta.get("labels") or {}
        annotations |= tmeta.get("annotations") or {}
    labels |= meta.get("labels") or {}
    annotations |= meta.get("annotations") or {}
    state, phase = workload_state(wl)
    return {"uid": meta.get("uid"), "active": spec.get("active", True) is not False, "state": state, "phase": phase,
            "labels": labels, "annotations": annotations, "priority": spec.get("priority")}


def workload_state(wl: dict) -> tuple[str, str]:
    """(Kueue's state in its words, the phase) of a Workload, from ``spec.active`` and its
    conditions: only a Workload holding quota (QuotaReserved, and Admitted once its checks pass) runs
    and frees GPUs when deactivated; one Kueue evicted is waiting again and holds none."""
    conditions = {c.get("type"): c.get("status") == "True"
                  for c in (wl.get("status") or {}).get("conditions") or []}
    if conditions.get("Finished"):
        return "Finished", ENDED
    if (wl.get("spec") or {}).get("active") is False:
        return "Deactivated", HELD
    if conditions.get("QuotaReserved"):
        return ("Admitted" if conditions.get("Admitted") else "QuotaReserved"), RUNNING
    return ("Evicted" if conditions.get("Evicted") else "Pending"), WAITING


def priority_class(spec: dict) -> str | None:
    """The WorkloadPriorityClass a v1beta2 Workload references (``spec.priorityClassRef``), or None
    (a Pod PriorityClass or none)."""
    ref = spec.get("priorityClassRef") or {}
    if ref.get("kind") == "WorkloadPriorityClass" and ref.get("group", GROUP) == GROUP:
        return ref.get("name")
    return None


def _evicted(wl: dict) -> bool:
    """Kueue released the Workload's quota (it was evicted after gpuledger deactivated it)."""
    return not any(c.get("type") == "QuotaReserved" and c.get("status") == "True"
                   for c in (wl.get("status") or {}).get("conditions") or [])
