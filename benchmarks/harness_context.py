"""What every part of `make bench` shares: where things are (the repo, the scripts, data/bench),
how commands are spelled (relative to the repo) and whether a dataset is built."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DASHBOARD_GPUS = 1024


class HarnessError(Exception):
    """A part could not be prepared (dataset missing, materialization failed): one line."""


@dataclass
class Context:
    root: Path                      # the repository (commands are recorded relative to it)
    scripts_dir: Path               # where the *_bench.py scripts are
    data_dir: Path                  # data/bench: weekN.duckdb(.done), prom/, harness/
    raw_dir: Path                   # each script's JSON output
    python: str = sys.executable
    gpuledger: str = str(Path(sys.executable).parent / "gpuledger")
    timeout_s: float = 3 * 3600
    dashboard_gpus: int = DASHBOARD_GPUS
    part_args: dict[str, list[str]] = field(default_factory=dict)  # extra options per part
    echo: Callable[[str], None] = print
    machine: dict | None = None     # this run's machine (machine.machine()), stored with every section


def rel(path: Path | str, root: Path) -> str:
    """A path as the command line that reproduces a figure should spell it: relative to the repo."""
    p = Path(os.path.abspath(path))  # not resolve(): .venv/bin/python is a symlink out of the repo
    try:
        return str(p.relative_to(os.path.abspath(root)))
    except ValueError:
        return str(p)


def dataset(ctx: Context, gpus: int) -> Path:
    return ctx.data_dir / f"week{gpus}.duckdb"


def dataset_ready(ctx: Context, gpus: int) -> bool:
    """The background build writes weekN.duckdb.done once the file is complete."""
    return (ctx.data_dir / f"week{gpus}.duckdb.done").exists()
