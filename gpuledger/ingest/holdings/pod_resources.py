"""The kubelet's PodResources v1 API → device holdings, read-only (issue 20).

The kubelet serves ``v1.PodResourcesLister`` on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``): ``List`` says which devices each container of
each pod on the node holds now, ``GetAllocatableResources`` which devices the node has. Polled
every few seconds, these become holding intervals: a (pod, container, device) first seen at one
poll, seen again at each later one, and ended at the last poll that still showed it once a poll
no longer does. Nothing is ever written to the kubelet.

Device ids are what the device plugin reports (:mod:`.devices`): a GPU UUID, a MIG UUID (resolved
to GPU UUID + GPU instance id through NVML on the node where possible), or ``GPU-…::n`` replicas
of a time-sliced GPU, whose share is the replicas held over the replicas the node has of that GPU.
Dynamic Resource Allocation devices (``dynamic_resources``) are recorded as
``dra:<driver>/<pool>/<device>``; the warehouse can place them once they carry a GPU UUID.

Stubs: ``podresources/api_pb2*.py``, generated from the kubelet's own ``api.proto`` (committed,
see ``scripts/gen-podresources.sh``); they need the ``podresources`` extra (grpcio, protobuf).
"""

from __future__ import annotations

import fnmatch
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

import yaml

from gpuledger.extras import require
from gpuledger.ingest.holdings.devices import parse_device
from gpuledger.rules.clock import utc_now

SOURCE = "pod-resources"
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-*", "nvidia.com/gpu.shared")
DRA_DRIVERS = ("gpu.nvidia.com",)


class PodResourcesError(RuntimeError):
    """The kubelet's socket did not answer (path, permissions, timeout)."""


def _stubs():
    require("grpc")  # MissingExtra names `pip install 'gpuledger[podresources]'`
    require("google.protobuf")
    # lazy: optional extra gpuledger[podresources] (the generated stubs import grpc)
    from gpuledger.ingest.holdings.podresources import api_pb2, api_pb2_grpc

    return api_pb2, api_pb2_grpc


class PodResourcesClient:
    """``List`` and ``GetAllocatableResources`` over the kubelet's unix socket, with a deadline."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_s: float = 10.0):
        self._pb, grpc_mod = _stubs()
        import grpc  # lazy: optional extra gpuledger[podresources]

        self._grpc = grpc
        # absolute: gRPC reads "unix://relative" as an authority and logs lines of resolver errors
        self.socket_path = os.path.abspath(socket_path)
        self.timeout_s = timeout_s
        self.allocatable_missing: str | None = None  # why GetAllocatableResources is not served
        self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
        self._stub = grpc_mod.PodResourcesListerStub(self._channel)

    def _call(self, method, request, what: str):
        try:
            return method(request, timeout=self.timeout_s)
        except self._grpc.RpcError as exc:
            code = exc.code().name if hasattr(exc, "code") else "?"
            raise PodResourcesError(f"{what} on unix://{self.socket_path}: {code} {exc.details() or ''}"
                                    " (is the pod-resources socket mounted and readable?)") from None

    def list(self):
        return self._call(self._stub.List, self._pb.ListPodResourcesRequest(), "PodResources List")

    def allocatable(self):
        """The node's devices, or None where the kubelet does not serve them: before Kubernetes 1.21
        (UNIMPLEMENTED) or with the KubeletPodResourcesGetAllocatable feature gate off ("disabled").
        Holdings then come from List alone; a time-sliced GPU's replica count is unknown (its
        share stays empty). Asked once: a kubelet does not gain the call without a restart."""
        if self.allocatable_missing is not None:
            return None
        try:
            return self._stub.GetAllocatableResources(self._pb.AllocatableResourcesRequest(), timeout=self.timeout_s)
        except self._grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() or "" if hasattr(exc, "details") else ""
            if code == self._grpc.StatusCode.UNIMPLEMENTED or "disabled" in details.lower():
                self.allocatable_missing = f"{code.name if code else '?'} {details}".strip()
                return None
            code_name = code.name if code is not None else "?"
            raise PodResourcesError(f"GetAllocatableResources on unix://{self.socket_path}: {code_name} {details}"
                                    " (is the pod-resources socket mounted and readable?)") from None

    def close(self) -> None:
        self._channel.close()


@dataclass(frozen=True)
class Held:
    """One device a container holds, as one poll saw it."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    gpu_uuid: str | None
    mig_instance_id: int
    share: float | None
    gpu_index: int | None = None  # the GPU's index on the node, where the id names no UUID (GKE's nvidia<N>)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.namespace, self.pod, self.container, self.device_id)


def _wanted(resource: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(resource, p) for p in patterns)


def configured_replicas(text: str, source: str = "the device plugin config") -> dict[str, int]:
    """Resource name -> replicas of each GPU, from the NVIDIA device plugin's config (the YAML its
    ConfigMap holds: ``sharing.timeSlicing.resources`` / ``sharing.mps.resources``, each ``name``
    and ``replicas``, renamed to ``<name>.shared`` by ``renameByDefault`` or to ``rename``).
    ValueError naming what is wrong."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not YAML ({getattr(exc, 'problem', None) or exc})") from None
    sharing = doc.get("sharing") if isinstance(doc, dict) else None
    out: dict[str, int] = {}
    for kind in ("timeSlicing", "mps"):
        block = sharing.get(kind) if isinstance(sharing, dict) else None
        if not isinstance(block, dict):
            continue
        for n, res in enumerate(block.get("resources") or []):
            name, replicas = (res.get("name"), res.get("replicas")) if isinstance(res, dict) else (None, None)
            if not isinstance(name, str) or not name or isinstance(replicas, bool) or not isinstance(replicas, int) \
                    or not 1 <= replicas <= 1024:
                raise ValueError(f"{source}: sharing.{kind}.resources[{n}]: expected a name and replicas 1..1024")
            shown = res.get("rename") or (f"{name}.shared" if block.get("renameByDefault") else name)
            out[str(shown)] = replicas
    if not out:
        raise ValueError(f"{source}: no sharing.timeSlicing.resources (or sharing.mps.resources) with replicas")
    return out


def held_devices(listed, allocatable=None, *, resources: Iterable[str] = GPU_RESOURCES,
                 mig_map: dict[str, tuple[str, int]] | None = None,
                 configured: dict[str, int] | None = None) -> list[Held]:
    """The GPU devices in a ``List`` response (pure: no I/O). ``allocatable`` (the
    ``GetAllocatableResources`` response) gives each time-sliced GPU's replica count; without it
    (a kubelet that does not serve it) ``configured`` does (:func:`configured_replicas`: replicas
    per resource name), else a replica's share is unknown (None)."""
    patterns = tuple(resources)
    replicas: dict[str, int] = {}
    for dev in getattr(allocatable, "devices", []) or []:
        if _wanted(dev.resource_name, patterns):
            for device_id in dev.device_ids:
                parent = parse_device(device_id).replica_of
                if parent:
                    replicas[parent] = replicas.get(parent, 0) + 1
    out: list[Held] = []
    for pod in listed.pod_resources:
        for container in pod.containers:
            for dev in container.devices:
                if not _wanted(dev.resource_name, patterns):
                    continue
                for device_id in dev.device_ids:
                    d = parse_device(device_id, mig_map)
                    share = None
                    if d.replica_of:
                        count = replicas.get(d.replica_of) or (configured or {}).get(dev.resource_name)
                        share = 1.0 / count if count else None
                    out.append(Held(pod.namespace, pod.name, container.name, dev.resource_name, d.device_id,
                                    d.gpu_uuid, d.mig_instance_id, share, d.gpu_index))
            for dra in container.dynamic_resources:
                for claim in dra.claim_resources:
                    if claim.driver_name not in DRA_DRIVERS:
                        continue
                    device_id = f"dra:{claim.driver_name}/{claim.pool_name}/{claim.device_name}"
                    out.append(Held(pod.namespace, pod.name, container.name, f"claim:{dra.claim_name}",
                                    device_id, None, -1, None))
    return out


@dataclass
class HoldingTracker:
    """Poll after poll, the intervals: what appears starts a holding, what stays extends it, what
    goes is ended at the last poll that saw it. Rows are ``device_holdings`` rows."""

    cluster: str
    host: str
    open: dict[tuple, tuple[datetime, Held]] = field(default_factory=dict)
    last_poll: datetime | None = None

    def resume(self, stored: Iterable[dict]) -> None:
        """Carry on the holdings an earlier run of the agent left open (``device_holdings`` rows
        of this host, not ended), so a restart extends them instead of starting them again."""
        for r in stored:
            h = Held(r["namespace"] or "", r["pod"] or "", r["container"] or "", r["resource"] or "",
                     r["device_id"], r["gpu_uuid"], r["mig_instance_id"], r["share"], r.get("gpu_index"))
            self.open[h.key] = (r["first_seen"], h)
            self.last_poll = max(filter(None, (self.last_poll, r["last_seen"])), default=None)

    def observe(self, held: list[Held], now: datetime) -> list[dict]:
        """Rows to upsert after a poll at ``now`` (naive UTC): every open holding (last_seen now)
        and every one that ended since the previous poll."""
        rows = []
        seen = {h.key: h for h in held}
        for key, (first, h) in list(self.open.items()):
            if key not in seen:  # gone: it ended after the previous poll, the last that showed it
                rows.append(self._row(h, first, self.last_poll or first, ended=True))
                del self.open[key]
        for key, h in seen.items():
            first = self.open[key][0] if key in self.open else now
            self.open[key] = (first, h)
            rows.append(self._row(h, first, now, ended=False))
        self.last_poll = now
        return rows

    def _row(self, h: Held, first: datetime, last: datetime, *, ended: bool) -> dict:
        return {
            "cluster": self.cluster, "source": SOURCE, "scheduler_job": f"{h.namespace}/{h.pod}",
            "host": self.host, "device_id": h.device_id, "first_seen": first, "last_seen": last,
            "ended": ended, "gpu_uuid": h.gpu_uuid, "mig_instance_id": h.mig_instance_id, "share": h.share,
            "gpu_index": h.gpu_index,
            "namespace": h.namespace, "pod": h.pod, "container": h.container, "resource": h.resource,
        }


def _utc_now() -> datetime:
    return utc_now()


def run_pod_resources_agent(
    client: PodResourcesClient, write: Callable[[list[dict]], None], *, cluster: str, host: str,
    interval_s: float, count: int = 0, stop: threading.Event | None = None,
    clock: Callable[[], datetime] = _utc_now, mig_map: dict[str, tuple[str, int]] | None = None,
    resources: Iterable[str] = GPU_RESOURCES, resume: Iterable[dict] = (), configured: dict[str, int] | None = None,
) -> int:
    """Poll ``List`` (and ``GetAllocatableResources``) every ``interval_s`` and hand each poll's
    rows to ``write``, ``count`` times (0: until ``stop``); ``resume``: the holdings a previous run
    left open (:meth:`HoldingTracker.resume`); ``configured``: replicas per resource where the
    kubelet does not serve GetAllocatableResources (held_devices). Returns the polls made."""
    tracker = HoldingTracker(cluster=cluster, host=host)
    tracker.resume(resume)
    stop = stop or threading.Event()
    polls = 0
    while not stop.is_set():
        started = time.monotonic()
        listed, allocatable = client.list(), client.allocatable()
        held = held_devices(listed, allocatable, resources=resources, mig_map=mig_map, configured=configured)
        write(tracker.observe(held, clock()))
        polls += 1
        if count and polls >= count:
            break
        stop.wait(max(0.0, interval_s - (time.monotonic() - started)))
    return polls
