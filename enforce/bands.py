"""The priority bands gpuledger sets (enforce.policy.target_priorities; Slurm's Nice layout in
enforce.backends.slurm maps the same bands). Kueue priorities are int32. Inside a band: fair-share
position × PROJECT_STEP + the job's position inside its project (< PROJECT_STEP), so up to 398
projects fit below the quick lane, which takes the funded band's top position (399): Slurm's Nice
layout keeps its three bands."""

EXEMPT_BASE = 1_000_000
FUNDED_BASE = 500_000
UNFUNDED_BASE = 100_000
PROJECT_STEP = 1000
QUICK_BASE = FUNDED_BASE + 399 * PROJECT_STEP


def quick_band(priority: int) -> bool:
    """Whether ``priority`` is in the quick lane (the funded band's top position)."""
    return QUICK_BASE <= priority < EXEMPT_BASE


def on_top(priority: int) -> bool:
    """Whether ``priority`` is the exempt band's (production inference within its share)."""
    return priority >= EXEMPT_BASE


def band_of(priority: int) -> str:
    """The band a gpuledger priority lies in: exempt, quick, funded or unfunded (a lead's order
    permutes priorities inside one band only: enforce.team)."""
    if priority >= EXEMPT_BASE:
        return "exempt"
    if priority >= QUICK_BASE:
        return "quick"
    return "funded" if priority >= FUNDED_BASE else "unfunded"
