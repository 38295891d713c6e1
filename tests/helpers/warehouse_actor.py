"""Processes for the warehouse access tests, each speaking on stdout one line per step:

    hold PATH                       open a writer, print "held", wait for a line on stdin, exit
    long-write PATH CHUNKS ROWS     ONE writer session: CHUNKS sample batches, yielding to readers
                                    between them; prints "chunk i" after each, "done" at the end
    sessions PATH BATCHES ROWS GPU  BATCHES writer sessions of ROWS samples each (as separate
                                    Dagster runs or assets write)
    read-until PATH TOTAL           readers in a loop until gpu_samples holds TOTAL rows; prints
                                    each count seen (as an asset check in its own process reads)
"""

from __future__ import annotations

import sys

import numpy as np
import polars as pl

from gpuledger import warehouse

T0 = np.datetime64("2026-11-01T00:00:00", "us")


def batch(gpu_id: int, first: int, rows: int) -> pl.DataFrame:
    return pl.DataFrame({
        "gpu_id": np.full(rows, gpu_id, dtype=np.int32),
        "ts": T0 + (np.arange(rows) + first) * np.timedelta64(30, "s"),
        "sm_active_ratio": np.linspace(0, 1, rows),
    })


def say(line: str) -> None:
    print(line, flush=True)


def main(mode: str, path: str, *args: str) -> None:
    if mode == "hold":
        with warehouse.open_writer(path):
            say("held")
            sys.stdin.readline()
    elif mode == "long-write":
        chunks, rows = int(args[0]), int(args[1])
        with warehouse.open_writer(path) as con:
            for i in range(chunks):
                warehouse.write_samples(con, batch(1, i * rows, rows), "access-test")
                con.yield_to_readers(after_s=0.0)
                say(f"chunk {i}")
        say("done")
    elif mode == "sessions":
        batches, rows, gpu_id = int(args[0]), int(args[1]), int(args[2])
        for i in range(batches):
            with warehouse.open_writer(path) as con:
                warehouse.write_samples(con, batch(gpu_id, i * rows, rows), "access-test")
            say(f"batch {i}")
    elif mode == "read-until":
        total = int(args[0])
        seen = -1
        while seen < total:
            with warehouse.open_reader(path) as con:
                seen = con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]
            say(f"seen {seen}")
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(*sys.argv[1:])
