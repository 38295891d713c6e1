"""Device ids as schedulers report them → (GPU UUID, GPU instance id, share key).

* ``GPU-<uuid>``: a whole GPU.
* ``GPU-<uuid>::<n>``: replica ``n`` of a time-sliced GPU (NVIDIA device plugin ``sharing``).
* ``MIG-GPU-<uuid>/<gi>/<ci>``: a MIG instance in the old (R450) UUID form, which names its
  parent GPU and GPU instance.
* ``MIG-<uuid>``: a MIG instance in the current form; its parent and instance come from the
  node (NVML) — see :func:`mig_uuid_map` — or stay unknown (the holding waits, counted).
* a bare number: a GPU index on the node (Slurm, CUDA_VISIBLE_DEVICES).
* GKE's device plugin (container-engine-accelerators): ``nvidia<N>`` the GPU of minor number N
  (its index on the node), ``nvidia<N>/gi<G>`` MIG GPU instance G of it, and ``…/vgpu<K>``
  time-shared replica K of either (the physical device is the id without ``/vgpu<K>``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OLD_MIG = re.compile(r"^MIG-(GPU-[^/]+)/(\d+)/(\d+)$")
_REPLICA = re.compile(r"^(GPU-[^:/]+)::(\d+)$")
_GKE = re.compile(r"^(?P<physical>nvidia(?P<index>\d{1,5})(?:/gi(?P<gi>\d{1,3}))?)(?:/vgpu(?P<replica>\d{1,4}))?$")
_HOSTLIST = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<ranges>[^\]]+)\](?P<suffix>.*)$")


@dataclass(frozen=True)
class Device:
    device_id: str
    gpu_uuid: str | None = None
    mig_instance_id: int = -1
    gpu_index: int | None = None
    replica_of: str | None = None   # the physical GPU a time-sliced replica belongs to


def parse_device(device_id: str, mig_map: dict[str, tuple[str, int]] | None = None) -> Device:
    """What a reported device id says (see the module doc); ``mig_map``: MIG UUID → (GPU UUID, GI)."""
    text = device_id.strip()
    if text.isdigit():
        return Device(device_id=f"index:{int(text)}", gpu_index=int(text))
    if m := _REPLICA.match(text):
        return Device(device_id=text, gpu_uuid=m[1], replica_of=m[1])
    if m := _OLD_MIG.match(text):
        return Device(device_id=text, gpu_uuid=m[1], mig_instance_id=int(m[2]))
    if text.startswith("MIG-"):
        parent = (mig_map or {}).get(text)
        return Device(device_id=text, gpu_uuid=parent[0], mig_instance_id=parent[1]) if parent else Device(text)
    if text.startswith("GPU-"):
        return Device(device_id=text, gpu_uuid=text)
    if m := _GKE.match(text):
        gi = int(m["gi"]) if m["gi"] is not None else -1
        return Device(device_id=text, mig_instance_id=gi, gpu_index=int(m["index"]),
                      replica_of=m["physical"] if m["replica"] is not None else None)
    return Device(device_id=text)


def index_ranges(text: str) -> list[int]:
    """``"0-1,4"`` → [0, 1, 4] (Slurm's IDX lists)."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"{text!r} is not a list of indices like 0-1,4")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def expand_hostlist(text: str) -> list[str]:
    """A Slurm host list: ``"gpu[01-03,07],login"`` → gpu01 gpu02 gpu03 gpu07 login (one bracket
    group per name, zero padding kept)."""
    names: list[str] = []
    depth, start = 0, 0
    parts = []
    for i, ch in enumerate(text):  # split on commas outside brackets
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in filter(None, (p.strip() for p in parts)):
        m = _HOSTLIST.match(part)
        if not m:
            names.append(part)
            continue
        for r in m["ranges"].split(","):
            lo, _, hi = r.partition("-")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                names.append(f"{m['prefix']}{n:0{width}d}{m['suffix']}")
    return names


def mig_uuid_map() -> dict[str, tuple[str, int]]:
    """MIG UUID → (parent GPU UUID, GPU instance id) on this node, from NVML (the ``nvml``
    extra); empty where NVML or MIG is absent."""
    try:
        import pynvml
    except ImportError:
        return {}
    out: dict[str, tuple[str, int]] = {}
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver on this node: nothing to map
        return {}
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            gpu = pynvml.nvmlDeviceGetHandleByIndex(i)
            parent = _text(pynvml.nvmlDeviceGetUUID(gpu))
            try:
                count = pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu)
            except pynvml.NVMLError:
                continue
            for k in range(count):
                try:
                    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, k)
                except pynvml.NVMLError:
                    continue
                out[_text(pynvml.nvmlDeviceGetUUID(mig))] = (parent, int(pynvml.nvmlDeviceGetGpuInstanceId(mig)))
    finally:
        pynvml.nvmlShutdown()
    return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
