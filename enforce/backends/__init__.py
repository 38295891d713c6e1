"""Backends: the thin layer that talks to a scheduler, one small module each behind one interface
(base.Backend). ``get(name, ...)`` builds one; the heavy client of each loads only then."""

from __future__ import annotations

from gpuledger.errors import UsageError

NAMES = ("kueue", "kubernetes", "slurm", "plan-file")


def get(name: str, **options):
    """The backend called ``name`` (kueue / kubernetes / slurm / plan-file)."""
    if name == "kueue":
        # lazy: a backend's client loads only when it is chosen
        from gpuledger.enforce.backends.kueue import KueueBackend
        return KueueBackend(**options)
    if name == "kubernetes":
        # lazy: a backend's client loads only when it is chosen
        from gpuledger.enforce.backends.kubernetes import EvictionBackend
        return EvictionBackend(**options)
    if name == "slurm":
        # lazy: a backend's client loads only when it is chosen
        from gpuledger.enforce.backends.slurm import SlurmBackend
        return SlurmBackend(**options)
    if name == "plan-file":
        # lazy: a backend's client loads only when it is chosen
        from gpuledger.enforce.backends.planfile import PlanFileBackend
        return PlanFileBackend(**options)
    raise UsageError(f"--backend {name!r}: choose one of {', '.join(NAMES)}")
