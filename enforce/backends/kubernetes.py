"""Plain Kubernetes: preemption through the Eviction API, which honours PodDisruptionBudgets.

* preempt: ``POST pods/<p>/eviction`` with ``deleteOptions.preconditions.uid`` set to the uid the
  plan observed, so a pod recreated under the same name is never evicted in place of the one
  judged (the API server answers 409 Conflict: recorded as refused), and without a grace period of
  its own unless configured (``eviction_grace_period_seconds``): the pod's
  ``terminationGracePeriodSeconds`` holds, so a checkpointing job gets the time it asked for. A 429 (a PodDisruptionBudget allows no disruption now) is
  recorded as ``refused`` and tried again next cycle — never forced with a delete. A 500 (several
  budgets select the pod) is an error naming the fix. The pod's controller (Job, JobSet, ...)
  recreates it, so an eviction is a requeue for controlled pods and a stop for bare ones.
* warn: a Warning Event on the pod.
* set-priority: a pod's priority cannot change after creation — skipped (use Kueue or Slurm).
"""

from __future__ import annotations

import json

from gpuledger.enforce.backends import k8s_common as k8s
from gpuledger.enforce.backends.base import (
    DONE,
    DRY_RUN,
    ERROR,
    REFUSED,
    SERVER_DRY_RUN,
    SKIPPED,
    Backend,
    BackendUnavailable,
    Outcome,
)
from gpuledger.enforce.model import ENDED, HELD, RUNNING, WAITING, Action

from gpuledger.deadlines import CallDeadline, why_unreachable


def pod_ref(action: Action) -> tuple[str, str] | None:
    """(namespace, pod name) from the row's ``scheduler_job`` (``<ns>/<pod>``; the job id may be the
    pod uid and ``name`` the owner's), else a ``<ns>/<pod>`` job id."""
    if action.source not in (None, "kubernetes"):
        return None
    for ref in (action.scheduler_job, action.job_id):
        parts = (ref or "").split("/")
        if len(parts) == 2 and all(parts):
            return parts[0], parts[1]
    return None


class EvictionBackend(Backend):
    name = "kubernetes"

    def __init__(self, *, api=None, kubeconfig: str | None = None, context: str | None = None,
                 server_dry_run: bool = False, grace_period_s: int | None = None,
                 namespaces: list[str] | None = None, timeout_s: float = k8s.TIMEOUT_S,
                 cluster: str | None = None, clock=None) -> None:
        self.client, _ = k8s.client_modules()
        self.clock = clock or (lambda: None)  # Events' times (None: now; injected: tests fix it)
        self._cluster, self.cluster_source = k8s.cluster_for(kubeconfig, context, cluster)
        self._api = api
        self._config = (kubeconfig, context)
        self.server_dry_run = server_dry_run
        self.grace_period_s = grace_period_s  # None: the pod's own terminationGracePeriodSeconds
        self.namespaces = namespaces  # None: all (ClusterRole); else only these (namespaced Roles)
        self.timeout_s = timeout_s

    def _core(self):
        if self._api is None:
            self._api = k8s.api_client(*self._config)
        return self.client.CoreV1Api(self._api)

    def cluster_name(self) -> str:
        return self._cluster

    def handles(self, action: Action) -> str | None:
        if pod_ref(action) is None:
            return f"not a Kubernetes pod (source {action.source or 'unknown'}); use the backend of its scheduler"
        return None

    def observe(self) -> dict[str, dict]:
        core = self._core()
        try:
            if self.namespaces is None:
                items = core.list_pod_for_all_namespaces(_request_timeout=self.timeout_s).items
            else:
                items = [p for ns in self.namespaces
                         for p in core.list_namespaced_pod(ns, _request_timeout=self.timeout_s).items]
        except Exception as exc:
            self._fail(exc, "listing pods")
            raise
        out = {}
        for pod in items:
            meta = pod.metadata
            seen = pod_view(pod)
            out[f"{meta.namespace}/{meta.name}"] = seen
            if meta.uid:  # pod rows may be keyed by uid
                out[meta.uid] = seen
        return out

    def live(self, action: Action) -> dict | None:
        ns, name = pod_ref(action)
        try:
            return pod_view(self._core().read_namespaced_pod(name, ns, _request_timeout=self.timeout_s))
        except Exception as exc:
            if k8s.is_api_exception(exc) and k8s.api_error(exc)[0] == 404:
                return None
            self._fail(exc, f"reading pod {ns}/{name}")
            raise

    def _fail(self, exc, what: str) -> None:
        if k8s.is_api_exception(exc):
            k8s.raise_if_credential(exc, what)
        elif type(exc).__module__.startswith("urllib3") or isinstance(exc, OSError):
            limit = CallDeadline(self.timeout_s, self.timeout_s, self.timeout_s)  # words, not urllib3's class names
            raise BackendUnavailable(f"{what}: cannot reach the Kubernetes API server within {self.timeout_s:g} s "
                                     f"({why_unreachable(exc, limit)}); check the kubeconfig's server") from None

    def set_priority(self, action: Action, *, dry_run: bool) -> Outcome:
        return Outcome(SKIPPED, "a pod's priority cannot change after it is created; run Kueue (--backend kueue) "
                                "to enforce priorities")

    def warn(self, action: Action, *, dry_run: bool) -> Outcome:
        ns, name = pod_ref(action)

        def call():
            writes = [self._event(ns, name, _uid(action), "GpuledgerIdleWarning", action.reason)]
            return self._send(writes, dry_run, f"Warning Event on pod {ns}/{name}")
        return self._guard(action, call)

    def preempt(self, action: Action, *, dry_run: bool) -> Outcome:
        ns, name = pod_ref(action)
        uid = _uid(action)

        def call():
            c = self.client
            options = c.V1DeleteOptions(preconditions=c.V1Preconditions(uid=uid) if uid else None,
                                        grace_period_seconds=self.grace_period_s)
            body = c.V1Eviction(api_version="policy/v1", kind="Eviction",
                                metadata=c.V1ObjectMeta(name=name, namespace=ns), delete_options=options)
            core = self._core()
            eviction = k8s.Write("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction",
                                 core.api_client.sanitize_for_serialization(body),
                                 lambda: core.create_namespaced_pod_eviction(name, ns, body, dry_run=self._dry,
                                                                             _request_timeout=self.timeout_s))
            writes = [eviction, self._event(ns, name, uid, "GpuledgerPreempted", f"evicted: {action.reason}")]
            return self._send(writes, dry_run, f"evicted pod {ns}/{name} (honouring its PodDisruptionBudgets)")
        return self._guard(action, call)

    @property
    def _dry(self) -> str | None:
        return "All" if self.server_dry_run else None

    def _event(self, ns: str, name: str, uid: str | None, reason: str, message: str) -> k8s.Write:
        return k8s.event_write(self.client, self._core(), namespace=ns, kind="Pod", api_version="v1", name=name,
                               uid=uid, reason=reason, message=message, event_type="Warning", dry_run=self._dry,
                               timeout_s=self.timeout_s, now=self.clock())

    def _send(self, writes: list[k8s.Write], dry_run: bool, done: str) -> Outcome:
        """Each write in order: a dry run lists them, the real run sends them (an eviction refused
        stops before its Event) and lists the same."""
        sent = k8s.send_all(writes, dry_run=dry_run)
        return Outcome(DRY_RUN, sent) if dry_run else \
            Outcome(SERVER_DRY_RUN if self.server_dry_run else DONE, f"{done}; {sent}")

    def _guard(self, action: Action, call) -> Outcome:
        try:
            return call()
        except Exception as exc:
            if k8s.is_api_exception(exc):
                k8s.raise_if_credential(exc, f"{action.action} {action.job_id}")
                status, message = k8s.api_error(exc)
                if status == 429 and _disruption_budget(exc):
                    return Outcome(REFUSED, "a PodDisruptionBudget allows no disruption now; tried again next "
                                            "cycle, never forced", error=f"429 {message}",
                                   cause="disruption-budget")
                if status == 429:
                    return Outcome(REFUSED, "the API server asked to slow down; tried again next cycle",
                                   error=f"429 {message}", cause="throttled")
                if status == 500 and "PodDisruptionBudget" in message:
                    return Outcome(ERROR, "several PodDisruptionBudgets select this pod; the eviction API refuses "
                                          "until only one does (fix the budgets' selectors)", error=f"500 {message}")
                if status == 404:
                    return Outcome(SKIPPED, f"pod {action.job_id} no longer exists", error=f"404 {message}",
                                   cause="gone")
                if status == 409:
                    return Outcome(REFUSED, "the pod under this name is not the one judged (uid precondition "
                                            "failed: it was recreated); not evicted", error=f"409 {message}",
                                   cause="changed")
                return Outcome(ERROR, f"{action.action} failed", error=f"{status} {message}")
            if type(exc).__module__.startswith("urllib3") or isinstance(exc, OSError):
                why = why_unreachable(exc, CallDeadline(self.timeout_s, self.timeout_s, self.timeout_s))
                raise BackendUnavailable(f"{action.action} {action.job_id}: cannot reach the Kubernetes API server "
                                         f"({why}); check the kubeconfig's server") from None
            raise


_PHASES = {"Pending": WAITING, "Running": RUNNING, "Succeeded": ENDED, "Failed": ENDED}


def pod_view(pod) -> dict:
    """The live view of one pod (a V1Pod): uid, its phase (Kubernetes' word as ``state``, gpuledger's
    as ``phase``), labels, annotations; a pod being deleted holds its GPUs only until it is gone."""
    meta = pod.metadata
    state = getattr(pod.status, "phase", None) if pod.status else None
    phase = _PHASES.get(state) if state else None
    if meta.deletion_timestamp is not None and phase != ENDED:
        state, phase = "Terminating", HELD
    return {"uid": meta.uid, "state": state, "phase": phase,
            "labels": dict(meta.labels or {}), "annotations": dict(meta.annotations or {})}


def _uid(action: Action) -> str | None:
    """The pod uid the plan judged (its observation; a pod row's job id may be the uid itself)."""
    return (action.observed or {}).get("uid")


def _disruption_budget(exc) -> bool:
    try:
        causes = (json.loads(exc.body or "{}").get("details") or {}).get("causes") or []
    except ValueError:
        return False
    return any(c.get("reason") == "DisruptionBudget" for c in causes)
