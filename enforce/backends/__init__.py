"""Backends: the thin layer that talks to a scheduler, one small module each behind one interface
(base.Backend). ``get(name, ...)`` builds one; the heavy client of each loads only then."""

from __future__ import annotations

NAMES = ("kueue", "kubernetes", "slurm", "plan-file")


def get(name: str, **options):
    """The backend called ``name`` (kueue / kubernetes / slurm / plan-file)."""
    if name == "kueue":
        from gpuledger.enforce.backends.kueue import KueueBackend
        return KueueBackend(**options)
    if name == "kubernetes":
        from gpuledger.enforce.backends.kubernetes import EvictionBackend
        return EvictionBackend(**options)
    if name == "slurm":
        from gpuledger.enforce.backends.slurm import SlurmBackend
        return SlurmBackend(**options)
    if name == "plan-file":
        from gpuledger.enforce.backends.planfile import PlanFileBackend
        return PlanFileBackend(**options)
    from gpuledger.errors import UsageError
    raise UsageError(f"--backend {name!r}: choose one of {', '.join(NAMES)}")
