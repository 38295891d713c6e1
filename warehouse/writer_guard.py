"""Guards of the one writer, in the running system (not only in the manifests):

* a StatefulSet's replica other than ordinal 0 refuses to start (``replicas: 2`` would give a
  second, empty warehouse on its own volume sharing one Dagster database). Only where
  ``$GPULEDGER_STATEFULSET`` names the StatefulSet (the manifests set it): the pod's hostname is
  ``<name>-<ordinal>``. A Slurm admin node's hostname means nothing here.
* a second long-running writer (the Dagster daemon) refuses to start while another holds the
  warehouse's writer lease: an exclusive flock on ``<warehouse>.writer-lease``, held for the
  holder's life (released by the kernel when it dies), naming its host and PID for the message.
  flock holds on one kernel: the deployment keeps every writer on the volume's one node.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from gpuledger.errors import RunError
from gpuledger.rules.clock import epoch_iso_z

STATEFULSET_ENV = "GPULEDGER_STATEFULSET"


class WriterRefused(RunError):
    """This process must not be a writer; the message says why and what to do (exit code 1)."""


def check_ordinal(hostname: str | None = None, environ=os.environ) -> None:
    """Refuse to run as a StatefulSet replica other than ordinal 0 (when $GPULEDGER_STATEFULSET is set)."""
    name = environ.get(STATEFULSET_ENV)
    if not name:
        return
    # the container runtime sets $HOSTNAME to the pod's name (the StatefulSet's <name>-<ordinal>)
    hostname = hostname or environ.get("HOSTNAME") or socket.gethostname()
    suffix = hostname.removeprefix(f"{name}-") if hostname.startswith(f"{name}-") else None
    if suffix is None or not suffix.isdigit():
        raise WriterRefused(
            f"this pod is {hostname!r}, not a replica of the StatefulSet {name!r} (${STATEFULSET_ENV}): "
            "set it to the StatefulSet's name, or unset it outside Kubernetes")
    if int(suffix) != 0:
        raise WriterRefused(
            f"this pod is {hostname}, ordinal {suffix} of the StatefulSet {name}: gpuledger has one "
            f"writer (ordinal 0) — a second replica would write an empty warehouse of its own; set "
            f"replicas: 1 (`kubectl scale statefulset {name} --replicas 1`)")


def lease_path(warehouse: Path) -> Path:
    return Path(f"{warehouse}.writer-lease")


def take_lease(warehouse: Path, *, role: str) -> int:
    """Take the warehouse's writer lease for this process's life; returns the file descriptor
    (inheritable, so an ``exec`` keeps it). Raises WriterRefused naming the holder."""
    path = lease_path(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read(fd)
        os.close(fd)
        since = epoch_iso_z(holder.get("since", 0)) if holder else "?"
        raise WriterRefused(
            f"another gpuledger writer holds {warehouse} ({holder.get('role', '?')} on host "
            f"{holder.get('host', '?')}, PID {holder.get('pid', '?')}, since {since}): one writer "
            "per warehouse; stop that one first") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"role": role, "host": socket.gethostname(), "pid": os.getpid(),
                              "since": int(time.time())}).encode(), 0)
    os.set_inheritable(fd, True)
    return fd


def _read(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}
