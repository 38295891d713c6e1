"""A CLI command timed end to end as the user waits for it (issue 41): its own process, interpreter
start included, its output read to the end, against the process-start floor (a bare
``python -c "import typer"`` in the same interpreter) measured in alternation with it, run by run,
so both see the same machine. Wall seconds and CPU-seconds (user + system, from the children's
rusage) are kept for each run; the ratios the issue sets targets on are median ÷ median."""

from __future__ import annotations

import compileall
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

FLOOR = [sys.executable, "-c", "import typer"]
# what gpuledger/cli/report prints on stderr when an answer was computed, not read (facts.COMPUTED)
COMPUTED_NOTE = "computed from the raw data"


def compile_sources(root: Path) -> None:
    """Byte-compile the package's source folders, as installing a wheel does: an editable install
    under ``PYTHONDONTWRITEBYTECODE=1`` (this project's dev machines) would otherwise compile every
    gpuledger module in every timed process (~0.06 s at each start), which no deployed CLI pays."""
    for folder in ("gpuledger", "warehouse", "pipelines", "enforce", "dashboards"):
        if (root / folder).is_dir():
            compileall.compile_dir(root / folder, quiet=1)


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_once(argv: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall s, CPU s, stderr) of one run of ``argv``; stdout is read and dropped; a failure raises."""
    cpu, began = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, _children_cpu() - cpu, done.stderr


def against_floor(argv: list[str], *, repeats: int, env: dict | None = None) -> dict:
    """``argv`` and the floor, alternated ``repeats`` times (floor first): medians, best, the ratio
    of the medians (wall and CPU), and where the answer came from (``computed`` when any run said
    so on stderr, else ``materialized``)."""
    wall, cpu, floor_wall, floor_cpu, computed = [], [], [], [], False
    for _ in range(repeats):
        w, c, _ = run_once(FLOOR, env)
        floor_wall.append(w)
        floor_cpu.append(c)
        w, c, err = run_once(argv, env)
        wall.append(w)
        cpu.append(c)
        computed = computed or COMPUTED_NOTE in err
    med = statistics.median
    return {"cli_s": med(wall), "cli_best_s": min(wall), "cli_cpu_s": med(cpu), "floor_s": med(floor_wall),
            "floor_cpu_s": med(floor_cpu), "cli_over_floor": med(wall) / med(floor_wall),
            "cli_over_floor_cpu": med(cpu) / med(floor_cpu) if med(floor_cpu) else None,
            "cli_runs": repeats, "cli_source": "computed" if computed else "materialized",
            "cli_command": " ".join(["gpuledger", *argv[1:]])}
