"""Backends: the thin layer that talks to a scheduler, one small module each behind one interface
(base.Backend). ``get(name, ...)`` builds one; the heavy client of each loads only then."""

from __future__ import annotations

from gpuledger.enforce.backends.kubernetes import EvictionBackend
from gpuledger.enforce.backends.kueue import KueueBackend
from gpuledger.enforce.backends.planfile import PlanFileBackend
from gpuledger.enforce.backends.slurm import SlurmBackend

from gpuledger.errors import UsageError

NAMES = ("kueue", "kubernetes", "slurm", "plan-file")


def get(name: str, **options):
    """The backend called ``name`` (kueue / kubernetes / slurm / plan-file)."""
    if name == "kueue":
        return KueueBackend(**options)
    if name == "kubernetes":
        return EvictionBackend(**options)
    if name == "slurm":
        return SlurmBackend(**options)
    if name == "plan-file":
        return PlanFileBackend(**options)
    raise UsageError(f"--backend {name!r}: choose one of {', '.join(NAMES)}")
