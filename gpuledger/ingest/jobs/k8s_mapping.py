"""Kubernetes objects → ``jobs`` rows. Pure functions: no API calls, no warehouse, time injected.

A pod (or a Kueue Workload) as the API server serves it — a JSON dict, or a client model object —
goes in; a :class:`JobRecord`, a :class:`Rejected` (quarantine it, with the field named) or
``None`` (no GPU asked for: not ours) comes out.

Choices, and why:

* **One row per pod**, ``job_id = <pod uid>``, ``scheduler_job = "<namespace>/<pod name>"`` (shown to
  people, matched to DCGM's pod labels by time). A pod recreated under the same name (StatefulSets,
  operators) has a new uid, so it is a new job and the earlier pod keeps its hours. Every pod that
  held GPUs is charged for exactly its own GPUs and lifetime, so multi-pod jobs (PyTorchJob
  workers, JobSets) and retried pods add up without any cross-pod aggregation state. A pod the
  API serves without a uid (hand-made objects) falls back to its name. ``name`` holds the controlling owner's name
  (the Job / PyTorchJob / ReplicaSet; the pod's own name for a bare pod), so analytics group the
  pods of one job by ``(namespace, name)``.
* **Kueue Workloads** become rows ``job_id = "<namespace>/workload/<workload name>"`` with
  ``source = "kueue"`` (a pod name cannot contain "/", so the keys never collide). They carry what
  pods cannot: queued demand before admission, the Kueue priority the enforcement hook edits, the
  admission state. Their ``start_time`` stays NULL on purpose — the GPU-hours of an admitted
  workload are its pods' rows, and a start time here would count them twice. ``end_time`` is the
  ``Finished`` condition's time.
* GPUs: ``nvidia.com/gpu`` counts 1 each; ``nvidia.com/mig-<c>g.<mem>gb`` counts by compute slices
  (:func:`gpuledger.rules.mig.mig_fraction`: ``c/7``, ``c/4`` on an A30). Containers are summed; init
  containers run one at a time, so the pod holds max(Σ containers, max init container).
* HAMi's shared GPUs: a container asking ``nvidia.com/gpu: N`` with ``nvidia.com/gpucores: C``
  (percent of one GPU's cores, 1–100) holds N × C / 100 GPUs — four pods at 25 add up to one GPU;
  ``nvidia.com/gpumem`` (MiB per vGPU) is kept beside it (``gpu_memory_mib``), never charged.
  Without ``gpucores`` a HAMi vGPU may use every core and counts 1 each, as before.
* A structural fault that hides whether the pod asks for GPUs is rejected; a bad field in a pod
  that asks for no GPU is ignored with the pod (it is not ours to judge).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from gpuledger.ingest.scheduler_reasons import ADMITTED, KUEUE, SchedulerReason
from gpuledger.rules import mig
from gpuledger.rules.clock import naive_utc, parse_iso
from gpuledger.rules.mig import find_profile
from gpuledger.rules.model_keys import gpu_model_key

GPU_RESOURCE = "nvidia.com/gpu"
HAMI_CORES = "nvidia.com/gpucores"  # percent of one GPU's cores per vGPU (HAMi)
HAMI_MEMORY = "nvidia.com/gpumem"  # MiB of GPU memory per vGPU (HAMi)
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
FINISHED_PHASES = ("Succeeded", "Failed")

# Owner kinds → job kind when the pod carries no gpuledger.io/kind label.
TRAINING_OWNERS = frozenset(
    {"PyTorchJob", "TFJob", "MPIJob", "JAXJob", "XGBoostJob", "PaddleJob", "TrainJob", "JobSet", "RayJob"}
)
BATCH_OWNERS = frozenset({"Job", "CronJob"})
SERVING_OWNERS = frozenset({"ReplicaSet", "Deployment", "StatefulSet", "InferenceService", "LeaderWorkerSet"})
INTERACTIVE_OWNERS = frozenset({"Notebook", "RayCluster"})
TRAINING_POD_LABELS = ("training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name")
NOTEBOOK_POD_LABELS = ("notebook-name",)

_DURATION = re.compile(
    r"^(?:(?P<d>\d+(?:\.\d+)?)d)?(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?$"
)


@dataclass(frozen=True)
class MappingOptions:
    """Where a cluster keeps the facts gpuledger needs on its pods."""

    project_label: str = "gpuledger.io/project"
    user_label: str = "gpuledger.io/user"
    kind_label: str = "gpuledger.io/kind"
    min_runtime_annotation: str = "gpuledger.io/min-runtime"
    namespace_projects: Mapping[str, str] = field(default_factory=dict)


DEFAULT_OPTIONS = MappingOptions()


@dataclass(frozen=True)
class JobRecord:
    """One ``jobs`` row (times naive UTC). ``priority_class`` is written once the table has the
    column (the 001 schema does not); until then it is dropped at the warehouse edge."""

    cluster: str
    job_id: str
    project: str
    user_name: str | None
    name: str | None
    kind: str | None
    gpu_model: str | None
    gpus: float
    min_runtime_s: int | None
    submit_time: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    state: str | None
    priority: int | None
    namespace: str | None
    source: str
    updated_at: datetime
    priority_class: str | None = None
    scheduler_job: str | None = None  # namespace/pod name (or namespace/workload/name): not unique
    gpu_memory_mib: float | None = None  # HAMi's nvidia.com/gpumem × vGPUs (kept beside the GPU share)

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rejected:
    """An object that cannot be read: where it is (namespace/name) and what is wrong, field first."""

    location: str
    reason: str


class _Malformed(ValueError):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")


# --- small readers ------------------------------------------------------------------------------


def as_dict(obj: Any) -> Any:
    """A client model object (V1Pod, ...) as the API's camelCase JSON dict; dicts pass through."""
    if obj is None or isinstance(obj, Mapping):
        return obj
    if hasattr(obj, "to_dict") and hasattr(obj, "attribute_map"):
        # lazy: optional extra gpuledger[kubernetes]
        from kubernetes.client import ApiClient  # only needed for model objects

        return ApiClient().sanitize_for_serialization(obj)
    return obj


def raw_text(obj: Any) -> str:
    """The object as stable JSON for the quarantine (server bookkeeping fields left out)."""
    obj = as_dict(obj)
    if isinstance(obj, Mapping):
        obj = dict(obj)
        meta = obj.get("metadata")
        if isinstance(meta, Mapping):
            obj["metadata"] = {k: v for k, v in meta.items() if k not in ("managedFields", "resourceVersion")}
    try:
        return json.dumps(obj, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(obj)


def _mapping(value: Any, path: str, *, required: bool = False) -> Mapping:
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise _Malformed(path, f"expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, path: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(path, f"expected a list, got {type(value).__name__}")
    return value


def _string(value: Any, path: str, *, required: bool = False) -> str | None:
    if value is None or value == "":
        if required:
            raise _Malformed(path, "missing")
        return None
    if not isinstance(value, str):
        raise _Malformed(path, f"expected a string, got {type(value).__name__}")
    return value


def parse_time(value: Any, path: str) -> datetime | None:
    """RFC 3339 (``2026-11-29T10:00:00Z``) → naive UTC datetime; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        stamp = value
    elif isinstance(value, str):
        try:
            return parse_iso(value)
        except ValueError:
            raise _Malformed(path, f"{value!r} is not an RFC 3339 time like 2026-11-29T10:00:00Z") from None
    else:
        raise _Malformed(path, f"expected an RFC 3339 time string, got {type(value).__name__}")
    return naive_utc(stamp)


def parse_duration_s(value: Any, path: str) -> int | None:
    """``"4h"``, ``"30m"``, ``"1h30m"``, ``"2d"``, ``"90s"`` or plain seconds ``"5400"`` → seconds."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise _Malformed(path, f"{value!r} is not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            match = _DURATION.match(text)
            if not match or not any(match.groupdict().values()):
                raise _Malformed(
                    path, f'{value!r} is not a duration; write e.g. "4h", "30m", "1h30m" or seconds'
                ) from None
            parts = {k: float(v) for k, v in match.groupdict().items() if v}
            seconds = (
                parts.get("d", 0) * 86400
                + parts.get("h", 0) * 3600
                + parts.get("m", 0) * 60
                + parts.get("s", 0)
            )
    if seconds < 0:
        raise _Malformed(path, f"{value!r} is negative")
    return int(round(seconds))


def _quantity(value: Any, path: str) -> Decimal:
    """An extended-resource quantity: a non-negative whole number (the API refuses fractions)."""
    if isinstance(value, bool):
        raise _Malformed(path, f"{value!r} is not a GPU count")
    try:
        if isinstance(value, int | float):
            amount = Decimal(str(value))
        else:
            from kubernetes.utils import parse_quantity  # lazy: optional extra gpuledger[kubernetes]

            amount = parse_quantity(value)
    except (ValueError, InvalidOperation, TypeError):
        raise _Malformed(path, f'{value!r} is not a GPU count (a whole number such as "1")') from None
    if amount < 0 or amount != amount.to_integral_value():
        raise _Malformed(path, f"{value!r} must be a whole, non-negative number of devices")
    return amount


def mig_fraction(profile: str, model: str | None = None) -> float | None:
    """Share of a physical GPU held by a MIG resource's profile (``"3g.40gb"`` → 3/7); None unless
    the whole name is a profile (``mig-3g.40gb-extra`` is not). The rule: gpuledger.rules.mig."""
    if find_profile(profile) != profile.lower():
        return None
    return mig.mig_fraction(profile, model)


def gpus_requested(pod_spec: Mapping, path: str = "spec") -> tuple[float, list[str]]:
    """(GPUs the pod holds, MIG profiles asked for). Units: whole-GPU equivalents."""

    def container_gpus(container: Any, where: str) -> tuple[float, list[str]]:
        container = _mapping(container, where, required=True)
        resources = _mapping(container.get("resources"), f"{where}.resources")
        requests = _mapping(resources.get("requests"), f"{where}.resources.requests")
        limits = _mapping(resources.get("limits"), f"{where}.resources.limits")
        total, profiles = 0.0, []
        # Extended resources need a limit; the request, when given, must equal it.
        for key in sorted(set(requests) | set(limits)):
            if key != GPU_RESOURCE and not key.startswith(MIG_RESOURCE_PREFIX):
                continue
            source, raw = ("requests", requests[key]) if key in requests else ("limits", limits[key])
            count = float(_quantity(raw, f"{where}.resources.{source}[{key!r}]"))
            if key == GPU_RESOURCE:
                total += count * _hami_core_share(requests, limits, where)
                continue
            profile = key[len(MIG_RESOURCE_PREFIX) :]
            fraction = mig_fraction(profile)
            if fraction is None:
                raise _Malformed(
                    f"{where}.resources.{source}[{key!r}]",
                    "unknown MIG profile; expected nvidia.com/mig-<N>g.<M>gb such as mig-1g.10gb",
                )
            total += count * fraction
            if count:
                profiles.append(profile)
        return total, profiles

    main, profiles = 0.0, []
    for i, container in enumerate(_list(pod_spec.get("containers"), f"{path}.containers")):
        amount, found = container_gpus(container, f"{path}.containers[{i}]")
        main += amount
        profiles += found
    init = 0.0
    for i, container in enumerate(_list(pod_spec.get("initContainers"), f"{path}.initContainers")):
        amount, found = container_gpus(container, f"{path}.initContainers[{i}]")
        init = max(init, amount)
        profiles += found
    return round(max(main, init), 6), sorted(set(profiles))


def _hami_core_share(requests: Mapping, limits: Mapping, where: str) -> float:
    """The share of a GPU one HAMi vGPU holds: ``nvidia.com/gpucores`` / 100 (1 without it)."""
    if HAMI_CORES not in requests and HAMI_CORES not in limits:
        return 1.0
    source, raw = ("requests", requests[HAMI_CORES]) if HAMI_CORES in requests else ("limits", limits[HAMI_CORES])
    path = f"{where}.resources.{source}[{HAMI_CORES!r}]"
    cores = float(_quantity(raw, path))
    if not 0 < cores <= 100:
        raise _Malformed(path, f"{raw!r}: HAMi's gpucores is a percent of one GPU's cores, 1 to 100")
    return cores / 100.0


def gpu_memory_requested(pod_spec: Mapping, path: str = "spec") -> float | None:
    """MiB of GPU memory a HAMi pod asks for (``nvidia.com/gpumem`` × its vGPUs, containers summed,
    the largest init container if larger); None when no container names any."""
    def container_mib(container: Any, where: str) -> float | None:
        resources = _mapping(_mapping(container, where, required=True).get("resources"), f"{where}.resources")
        requests = _mapping(resources.get("requests"), f"{where}.resources.requests")
        limits = _mapping(resources.get("limits"), f"{where}.resources.limits")
        if HAMI_MEMORY not in requests and HAMI_MEMORY not in limits:
            return None
        source, raw = ("requests", requests[HAMI_MEMORY]) if HAMI_MEMORY in requests else ("limits", limits[HAMI_MEMORY])
        mib = float(_quantity(raw, f"{where}.resources.{source}[{HAMI_MEMORY!r}]"))
        gpus = requests.get(GPU_RESOURCE, limits.get(GPU_RESOURCE, 1))
        return mib * float(_quantity(gpus, f"{where}.resources[{GPU_RESOURCE!r}]"))

    main = [container_mib(c, f"{path}.containers[{i}]") for i, c in enumerate(_list(pod_spec.get("containers"),
                                                                                      f"{path}.containers"))]
    init = [container_mib(c, f"{path}.initContainers[{i}]")
            for i, c in enumerate(_list(pod_spec.get("initContainers"), f"{path}.initContainers"))]
    if all(m is None for m in main + init):
        return None
    return max(sum(m or 0.0 for m in main), max((m or 0.0 for m in init), default=0.0))


def _controller(meta: Mapping) -> tuple[str | None, str | None]:
    owners = _list(meta.get("ownerReferences"), "metadata.ownerReferences")
    chosen = None
    for i, owner in enumerate(owners):
        owner = _mapping(owner, f"metadata.ownerReferences[{i}]")
        if owner.get("controller") is True:
            chosen = owner
            break
        chosen = chosen or owner
    if not chosen:
        return None, None
    return chosen.get("kind"), chosen.get("name")


def job_kind(labels: Mapping, owner_kind: str | None, kind_label: str) -> str | None:
    """training / batch / inference / interactive: the label if set, else a guess from the owner."""
    if labels.get(kind_label):
        return str(labels[kind_label])
    if owner_kind in TRAINING_OWNERS or any(label in labels for label in TRAINING_POD_LABELS):
        return "training"
    if owner_kind in INTERACTIVE_OWNERS or any(label in labels for label in NOTEBOOK_POD_LABELS):
        return "interactive"
    if owner_kind in BATCH_OWNERS:
        return "batch"
    if owner_kind in SERVING_OWNERS:
        return "inference"
    if owner_kind is None:
        return "interactive"  # a bare pod: someone's shell or notebook
    return None


def _product_from_affinity(spec: Mapping) -> str | None:
    affinity = spec.get("affinity")
    if not isinstance(affinity, Mapping):
        return None
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    values: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        for expr in (term or {}).get("matchExpressions") or []:
            if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In":
                values.update(expr.get("values") or [])
    return values.pop() if len(values) == 1 else None


def _gpu_model(spec: Mapping, node_products: Mapping[str, str]) -> str | None:
    selector = spec.get("nodeSelector")
    product = selector.get(GPU_PRODUCT_LABEL) if isinstance(selector, Mapping) else None
    if not product and isinstance(spec.get("nodeName"), str):
        product = node_products.get(spec["nodeName"])
    if not product:
        product = _product_from_affinity(spec)
    return gpu_model_key(product) if isinstance(product, str) else None


def _priority(spec: Mapping, path: str) -> int | None:
    value = spec.get("priority")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Malformed(path, f"expected an integer, got {value!r}")
    return value


def _project(labels: Mapping, namespace: str, options: MappingOptions) -> str:
    label = labels.get(options.project_label)
    if isinstance(label, str) and label:
        return label
    return options.namespace_projects.get(namespace) or namespace


def _location(obj: Any, prefix: str = "") -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return f"{prefix}<no metadata>"
    ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else "<no namespace>"
    name = meta.get("name") if isinstance(meta.get("name"), str) else f"<no name, uid {meta.get('uid')}>"
    return f"{prefix}{ns}/{name}"


# --- pods ---------------------------------------------------------------------------------------


def map_pod(
    pod: Any,
    *,
    cluster: str,
    now: datetime,
    options: MappingOptions = DEFAULT_OPTIONS,
    node_products: Mapping[str, str] | None = None,
    deleted: bool = False,
) -> JobRecord | Rejected | None:
    """A pod → its ``jobs`` row; ``Rejected`` when it cannot be read; None when it asks for no GPU.

    ``deleted`` marks a pod the API server has removed: a pod deleted before it finished ends at
    its last container's finish, else its deletion time, else ``now``; its state is "Deleted".
    ``node_products`` maps node name → ``nvidia.com/gpu.product`` label, for pods whose own spec
    does not pin a GPU product. ``now`` (naive UTC) stamps ``updated_at``.
    """
    pod = as_dict(pod)
    location = _location(pod)
    try:
        return _pod_record(
            pod, cluster=cluster, now=now, options=options, node_products=node_products or {}, deleted=deleted
        )
    except _Malformed as problem:
        return Rejected(location, f"pod {location}: {problem}")


# The stages below read fields in a fixed order, and that order is part of the contract: when a pod
# has several faults, the first one read is the one the quarantine names.


def _pod_record(
    pod: Any,
    *,
    cluster: str,
    now: datetime,
    options: MappingOptions,
    node_products: Mapping[str, str],
    deleted: bool,
) -> JobRecord | None:
    """The pod's row, or None when it asks for no GPU; raises :class:`_Malformed` at the first fault."""
    if not isinstance(pod, Mapping):
        raise _Malformed("(pod)", f"expected a Pod object, got {type(pod).__name__}")
    meta = _mapping(pod.get("metadata"), "metadata", required=True)
    spec = _mapping(pod.get("spec"), "spec", required=True)
    gpus, _profiles = gpus_requested(spec)
    if gpus <= 0:
        return None
    name = _string(meta.get("name"), "metadata.name", required=True)
    namespace = _string(meta.get("namespace"), "metadata.namespace", required=True)
    labels = _mapping(meta.get("labels"), "metadata.labels")
    annotations = _mapping(meta.get("annotations"), "metadata.annotations")
    status = _mapping(pod.get("status"), "status")
    owner_kind, owner_name = _controller(meta)
    submit, start, end, state = pod_lifetime(meta, status, now=now, deleted=deleted)
    min_runtime = _min_runtime(annotations, options)
    uid = _string(meta.get("uid"), "metadata.uid")
    return JobRecord(
        cluster=cluster,
        job_id=uid or f"{namespace}/{name}",
        scheduler_job=f"{namespace}/{name}",
        **_ownership(labels, namespace, name, owner_kind, owner_name, options),
        gpu_model=_gpu_model(spec, node_products),
        gpus=gpus,
        min_runtime_s=min_runtime,
        submit_time=submit,
        start_time=start,
        end_time=end,
        state=state,
        priority=_priority(spec, "spec.priority"),
        namespace=namespace,
        source="kubernetes",
        updated_at=now,
        priority_class=_string(spec.get("priorityClassName"), "spec.priorityClassName"),
        gpu_memory_mib=gpu_memory_requested(spec),
    )


def pod_lifetime(
    meta: Mapping, status: Mapping, *, now: datetime, deleted: bool
) -> tuple[datetime, datetime | None, datetime | None, str]:
    """(submit, start, end, state) of a pod. A pod ends once its phase is finished or it is deleted."""
    phase = _string(status.get("phase"), "status.phase") or "Pending"
    submit = parse_time(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    if submit is None:
        raise _Malformed("metadata.creationTimestamp", "missing")
    start = parse_time(status.get("startTime"), "status.startTime")
    end = None
    state = phase
    if phase in FINISHED_PHASES or deleted:
        end = pod_end(meta, status, phase, now)
        if deleted and phase not in FINISHED_PHASES:
            state = "Deleted"
    return submit, start, end, state


def pod_end(meta: Mapping, status: Mapping, phase: str, now: datetime) -> datetime:
    """When an ended pod ended: its last container's finish, else its deletion time, else (finished
    phase only) its last condition change, else ``now``."""
    end = _finish_time(status)
    if end is None:
        end = parse_time(meta.get("deletionTimestamp"), "metadata.deletionTimestamp")
    if end is None and phase in FINISHED_PHASES:
        end = _last_condition_time(status)
    return end if end is not None else now


def _min_runtime(annotations: Mapping, options: MappingOptions) -> int | None:
    return parse_duration_s(
        annotations.get(options.min_runtime_annotation),
        f"metadata.annotations[{options.min_runtime_annotation!r}]",
    )


def _ownership(
    labels: Mapping,
    namespace: str,
    name: str,
    owner_kind: str | None,
    owner_name: str | None,
    options: MappingOptions,
) -> dict[str, Any]:
    """project, user_name, name, kind of a row: who pays, who ran it, which job it belongs to."""
    return {
        "project": _project(labels, namespace, options),
        "user_name": _string(labels.get(options.user_label), f"metadata.labels[{options.user_label!r}]"),
        "name": owner_name if isinstance(owner_name, str) and owner_name else name,
        "kind": job_kind(labels, owner_kind, options.kind_label),
    }


def _finish_time(status: Mapping) -> datetime | None:
    latest = None
    for i, item in enumerate(_list(status.get("containerStatuses"), "status.containerStatuses")):
        item = _mapping(item, f"status.containerStatuses[{i}]")
        terminated = _mapping(
            _mapping(item.get("state"), f"status.containerStatuses[{i}].state").get("terminated"),
            f"status.containerStatuses[{i}].state.terminated",
        )
        stamp = parse_time(
            terminated.get("finishedAt"), f"status.containerStatuses[{i}].state.terminated.finishedAt"
        )
        if stamp and (latest is None or stamp > latest):
            latest = stamp
    return latest


def _last_condition_time(status: Mapping) -> datetime | None:
    latest = None
    for i, cond in enumerate(_list(status.get("conditions"), "status.conditions")):
        cond = _mapping(cond, f"status.conditions[{i}]")
        stamp = parse_time(cond.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime")
        if stamp and (latest is None or stamp > latest):
            latest = stamp
    return latest


def node_gpu_products(nodes: list[Any]) -> dict[str, str]:
    """Node name → its ``nvidia.com/gpu.product`` label, for nodes that have one."""
    products = {}
    for node in nodes:
        node = as_dict(node)
        meta = node.get("metadata") if isinstance(node, Mapping) else None
        if not isinstance(meta, Mapping):
            continue
        labels = meta.get("labels")
        if isinstance(labels, Mapping) and isinstance(labels.get(GPU_PRODUCT_LABEL), str):
            products[str(meta.get("name"))] = labels[GPU_PRODUCT_LABEL]
    return products


# --- Kueue workloads ----------------------------------------------------------------------------

_WORKLOAD_STATES = ("Finished", "Admitted", "Evicted", "QuotaReserved")


def map_workload(
    workload: Any,
    *,
    cluster: str,
    now: datetime,
    options: MappingOptions = DEFAULT_OPTIONS,
) -> JobRecord | Rejected | None:
    """A Kueue ``Workload`` (kueue.x-k8s.io/v1beta2; v1beta1 exports read alike) → its ``jobs`` row; see the module notes for why
    its ``start_time`` is always NULL. None when its pod sets ask for no GPU."""
    workload = as_dict(workload)
    location = _location(workload, "workload ")
    try:
        return _workload_record(workload, cluster=cluster, now=now, options=options)
    except _Malformed as problem:
        return Rejected(location, f"{location}: {problem}")


@dataclass
class WorkloadDemand:
    """What a Workload's pod sets ask for: GPUs in all, and the labels, annotations and GPU model of
    the pod sets that ask for GPUs (an earlier pod set's value wins)."""

    gpus: float = 0.0
    labels: dict = field(default_factory=dict)
    annotations: dict = field(default_factory=dict)
    gpu_model: str | None = None


def _workload_record(
    workload: Any, *, cluster: str, now: datetime, options: MappingOptions
) -> JobRecord | None:
    """The workload's row, or None when it asks for no GPU; raises :class:`_Malformed` at the first fault."""
    if not isinstance(workload, Mapping):
        raise _Malformed("(workload)", f"expected a Workload object, got {type(workload).__name__}")
    meta = _mapping(workload.get("metadata"), "metadata", required=True)
    spec = _mapping(workload.get("spec"), "spec", required=True)
    demand = workload_demand(spec)
    if demand.gpus <= 0:
        return None
    name = _string(meta.get("name"), "metadata.name", required=True)
    namespace = _string(meta.get("namespace"), "metadata.namespace", required=True)
    labels = {**demand.labels, **_mapping(meta.get("labels"), "metadata.labels")}
    annotations = {**demand.annotations, **_mapping(meta.get("annotations"), "metadata.annotations")}
    owner_kind, owner_name = _controller(meta)
    conditions = workload_conditions(_mapping(workload.get("status"), "status"))
    state = workload_state(conditions, spec)
    submit = parse_time(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    if submit is None:
        raise _Malformed("metadata.creationTimestamp", "missing")
    return JobRecord(
        cluster=cluster,
        job_id=f"{namespace}/workload/{name}",
        scheduler_job=f"{namespace}/workload/{name}",
        **_ownership(labels, namespace, name, owner_kind, owner_name, options),
        gpu_model=demand.gpu_model,
        gpus=round(demand.gpus, 6),
        min_runtime_s=_min_runtime(annotations, options),
        submit_time=submit,
        start_time=None,
        end_time=conditions.get("Finished") or (now if "Finished" in conditions else None),
        state=state,
        priority=_priority(spec, "spec.priority"),
        namespace=namespace,
        source="kueue",
        updated_at=now,
        priority_class=_workload_priority_class(spec),
    )


def workload_demand(spec: Mapping) -> WorkloadDemand:
    """Sum a Workload's pod sets: each pod set's per-pod GPUs × its ``count`` (default 1)."""
    demand = WorkloadDemand()
    for i, pod_set in enumerate(_list(spec.get("podSets"), "spec.podSets")):
        where = f"spec.podSets[{i}]"
        pod_set = _mapping(pod_set, where, required=True)
        count = _pod_set_count(pod_set, where)
        template = _mapping(pod_set.get("template"), f"{where}.template", required=True)
        tmeta = _mapping(template.get("metadata"), f"{where}.template.metadata")
        tspec = _mapping(template.get("spec"), f"{where}.template.spec", required=True)
        per_pod, _ = gpus_requested(tspec, f"{where}.template.spec")
        demand.gpus += per_pod * count
        if per_pod:
            demand.labels = {
                **_mapping(tmeta.get("labels"), f"{where}.template.metadata.labels"),
                **demand.labels,
            }
            demand.annotations = {
                **_mapping(tmeta.get("annotations"), f"{where}.template.metadata.annotations"),
                **demand.annotations,
            }
            demand.gpu_model = demand.gpu_model or _gpu_model(tspec, {})
    return demand


def _pod_set_count(pod_set: Mapping, where: str) -> int:
    count = pod_set.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise _Malformed(f"{where}.count", f"expected a non-negative integer, got {count!r}")
    return count


def workload_conditions(status: Mapping) -> dict[str, datetime | None]:
    """Condition type → its last transition time, for the conditions that are ``"True"``."""
    conditions: dict[str, datetime | None] = {}
    for i, cond in enumerate(_list(status.get("conditions"), "status.conditions")):
        cond = _mapping(cond, f"status.conditions[{i}]", required=True)
        if cond.get("status") == "True" and isinstance(cond.get("type"), str):
            conditions[cond["type"]] = parse_time(
                cond.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime"
            )
    return conditions


def workload_state(conditions: Mapping[str, Any], spec: Mapping) -> str:
    """The first of Finished / Admitted / Evicted / QuotaReserved that holds, else Pending; a
    deactivated (``spec.active: false``) workload that has not finished is Inactive."""
    state = next((s for s in _WORKLOAD_STATES if s in conditions), "Pending")
    if spec.get("active") is False and state != "Finished":
        state = "Inactive"
    return state


def workload_reasons(workload: Any, record: JobRecord) -> list[SchedulerReason]:
    """Kueue's own word on a Workload (its ``jobs`` row ``record``): the ``QuotaReserved``
    condition's reason and message while it is not True (WaitingForQuota, NoMatchingFlavor,
    ExceedsMaxQuota ...; the admission checks' states joined to the message), or the admission
    itself (reason ``QuotaReserved``) once it is True — each at the condition's transition time,
    else the record's ``updated_at`` (when it was read)."""
    status = as_dict(workload).get("status")
    status = status if isinstance(status, Mapping) else {}
    cond = next((c for c in status.get("conditions") or [] if isinstance(c, Mapping)
                 and c.get("type") == ADMITTED), None)
    if cond is None:
        return []
    at = parse_time(cond.get("lastTransitionTime"), "status.conditions.lastTransitionTime") or record.updated_at
    checks = [f"{c.get('name')}={c.get('state')}" for c in status.get("admissionChecks") or []
              if isinstance(c, Mapping) and c.get("name")]
    message = "; ".join(m for m in (cond.get("message"), ("admission checks: " + ", ".join(checks)) if checks else None)
                        if m) or None
    reason = ADMITTED if cond.get("status") == "True" else str(cond.get("reason") or "Pending")
    return [SchedulerReason(record.cluster, record.job_id, at, KUEUE, record.state, reason, message, "kubernetes")]


def _workload_priority_class(spec: Mapping) -> str | None:
    # v1beta2: spec.priorityClassRef {group, kind, name}; v1beta1: spec.priorityClassName
    ref = spec.get("priorityClassRef")
    value = (ref or {}).get("name") if isinstance(ref, dict) else spec.get("priorityClassName")
    return _string(value, "spec.priorityClassRef.name")
