"""The weeks `make bench` reads (data/bench/weekN.duckdb), built where missing, so a fresh checkout's
`make bench` measures every size instead of skipping the analytics and Prometheus parts.

A week is the simulator's, as BENCHMARKS.md's "How these figures are made" states it; it is written
beside its final name (weekN.duckdb.tmp) and moved into place, then weekN.duckdb.done is written:
a build that stops half way leaves no dataset that looks whole. A .tmp already there is another
build in progress (or one that died): left alone, the size skipped, and the note says so."""

from __future__ import annotations

import collections
import os
import shlex
import subprocess
from pathlib import Path

from harness_context import Context, dataset, dataset_ready, rel
from machine import utc_now

WEEK = ["--days", "7", "--start", "2026-11-01T00:00:00"]  # seed 1, dirty data, 30-s samples: the defaults
NEEDS_DATASETS = ("analytics", "prometheus")


def build_command(ctx: Context, gpus: int) -> list[str]:
    tmp = Path(f"{dataset(ctx, gpus)}.tmp")
    return [ctx.gpuledger, "simulate", "warehouse", "--gpus", str(gpus), *WEEK, "--warehouse", str(tmp)]


def shown(ctx: Context, cmd: list[str]) -> str:
    """A command as the console and the dry run print it: paths relative to the repository."""
    return shlex.join(rel(c, ctx.root) if "/" in c else c for c in cmd)


def to_build(ctx: Context, only: list[str], sizes: list[int]) -> list[int]:
    """Sizes a requested part reads whose week is neither built nor being built."""
    if not any(kind in only for kind in NEEDS_DATASETS):
        return []
    return [n for n in sizes if not dataset_ready(ctx, n) and not Path(f"{dataset(ctx, n)}.tmp").exists()]


def build(ctx: Context, gpus: int) -> str | None:
    """Build one week (the simulator's own progress goes to the console); None, or why it failed."""
    final, tmp = dataset(ctx, gpus), Path(f"{dataset(ctx, gpus)}.tmp")
    ctx.data_dir.mkdir(parents=True, exist_ok=True)
    cmd = build_command(ctx, gpus)
    ctx.echo(f"== dataset {gpus} GPUs: {shown(ctx, cmd)} "
             "(a week of 30-s samples: ~2 min at 256 GPUs, ~40 min at 4,096 on 2 cores)")
    tail: collections.deque[str] = collections.deque(maxlen=1)
    with subprocess.Popen(cmd, cwd=ctx.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, "GPULEDGER_WAREHOUSE": str(tmp)}) as proc:
        for line in proc.stdout:  # the simulator's own progress, as it comes
            if line.strip():
                tail.append(line.strip())
                ctx.echo(f"   {line.rstrip()}")
    if proc.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        return (f"exit status {proc.returncode}: {tail[-1] if tail else 'no output'}" if proc.returncode
                else f"wrote no {tmp.name}")
    os.replace(tmp, final)
    if Path(f"{tmp}.wal").exists():  # not checkpointed: its log goes with it
        os.replace(f"{tmp}.wal", f"{final}.wal")
    for side in (".gate", ".lock", ".readers"):  # the writer's coordination files, named after the .tmp
        Path(f"{tmp}{side}").unlink(missing_ok=True)
    Path(f"{final}.done").write_text(utc_now() + "\n")
    return None


def build_missing(ctx: Context, only: list[str], sizes: list[int]) -> dict[int, str]:
    """Build every missing week; size -> why its build failed (its parts then skip with that)."""
    return {n: why for n in to_build(ctx, only, sizes) if (why := build(ctx, n))}
