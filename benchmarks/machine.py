"""What a benchmark figure was measured on: cores, memory, CPU model, library versions, the commit
and the load average. Read once per `make bench` run and stored beside every figure, because the
figures on a shared 2-core box mean nothing without the box and its load."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path


def _meminfo_gib(path: Path = Path("/proc/meminfo")) -> float | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)  # kB -> GiB
    except OSError:
        pass
    return None


def _cpu_model(path: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _prometheus_version(binary: str = "prometheus") -> str | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (out.stdout or out.stderr).splitlines()
    # "prometheus, version 2.42.0+ds (branch: ...)" -> "2.42.0+ds"
    return first[0].split("version", 1)[1].split()[0] if first and "version" in first[0] else None


def machine() -> dict:
    """The box: usable cores (the affinity mask, which is what a benchmark can use), memory in GiB,
    CPU model, Python and the versions of the libraries the figures depend on."""
    return {
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": _meminfo_gib(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "polars": _version("polars"),
        "duckdb": _version("duckdb"),
        "prometheus": _prometheus_version(),
    }


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages, rounded (what else shared the box)."""
    return [round(x, 2) for x in os.getloadavg()]


def git_commit(root: Path) -> str:
    """HEAD's short hash, with "+dirty" when tracked files differ from it (the figures then belong
    to an uncommitted tree), or "unknown" outside a git checkout."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=20, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=20, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("+dirty" if dirty else "")


def utc_now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
