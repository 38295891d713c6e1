"""How much memory DuckDB's buffer manager may hold in a gpuledger process.

DuckDB's own default is 80 % of the machine's RAM (of a cgroup v2 container's limit since DuckDB
1.3; cgroup v1 limits it has read wrongly) for its buffer manager alone, and a long reader (the
dashboards, the exporter, a Dagster run) keeps the blocks it has read cached up to that limit
(issue 41: +7.5 KiB per GPU-day of history read). In gpuledger polars works beside DuckDB in the same
process: 80 % for DuckDB plus polars' frames is how a pod is OOM-killed. So every warehouse
connection sets ``memory_limit``: by default half of what the process may use (the smaller of RAM and the cgroup's limit), the other
half left to polars and Python; ``GPULEDGER_DUCKDB_MEMORY_LIMIT`` sets it (a DuckDB size such as
``4GiB`` / ``512MB``, or a percentage such as ``30%`` of what the process may use). Over its limit
DuckDB spills to its temporary directory instead of growing.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

MEMORY_LIMIT_ENV = "GPULEDGER_DUCKDB_MEMORY_LIMIT"
DEFAULT_SHARE = "50%"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_FLOOR_BYTES = 128 * 2**20  # DuckDB needs ~128 MB per thread; below it a query fails, not spills


class MemoryLimitError(ValueError):
    """GPULEDGER_DUCKDB_MEMORY_LIMIT cannot be read; the message names it and the forms it takes."""


def usable_bytes(proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What this process may use: the smaller of the machine's RAM and every cgroup memory limit
    above the process (v2 ``memory.max``, v1 ``memory.limit_in_bytes``); None when neither reads."""
    found: list[int] = []
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                found.append(int(line.split()[1]) * 1024)
                break
    except (OSError, ValueError, IndexError):
        pass
    try:
        groups = (proc / "self/cgroup").read_text().splitlines()
    except OSError:
        groups = []
    for line in groups:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2: the limit of each group up the path
            base, name = cgroup_root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = cgroup_root / "memory", "memory.limit_in_bytes"
        else:
            continue
        folder = base / path.lstrip("/")
        while True:
            try:
                text = (folder / name).read_text().strip()
                if text and text != "max" and int(text) < 2**62:  # v1 writes ~2^63 for "none"
                    found.append(int(text))
            except (OSError, ValueError):
                pass
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    return min(found) if found else None


@functools.cache
def _usable_here() -> int | None:
    """:func:`usable_bytes` of this process, read once: RAM and cgroup limits do not change while
    it runs, and every warehouse connection asks."""
    return usable_bytes()


def memory_limit(environ=os.environ, usable=_usable_here) -> str | None:
    """The ``memory_limit`` to SET (a DuckDB size), or None to keep DuckDB's default (nothing
    readable to take a share of)."""
    given = environ.get(MEMORY_LIMIT_ENV, "").strip() or DEFAULT_SHARE
    if _SIZE.match(given):
        return given.replace(" ", "")
    share = _PERCENT.match(given)
    if share is None or not 0 < float(share.group(1)) <= 100:
        raise MemoryLimitError(
            f"{MEMORY_LIMIT_ENV}={given!r}: give a size such as 4GiB or 512MB, or a percentage such as 30% of the "
            f"memory this process may use (default {DEFAULT_SHARE}); unset it for the default")
    total = usable()
    if total is None:
        return None
    return f"{max(_FLOOR_BYTES, int(total * float(share.group(1)) / 100)) // 2**20}MiB"
