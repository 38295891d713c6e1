"""A writer process for the concurrency tests: ingests BATCHES batches of samples, each in its own
writer session, and touches MARKER after the first one is published. After each of the first
HOLD batches it waits (at most a minute) for MARKER.read<k> — a reader saying it read — so a reader
on a loaded machine sees the ingest between batches, not only its end."""

import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from gpuledger import warehouse


HOLD = 2


def main(path: str, marker: str, batches: int, rows: int, first_gpu_id: int, hold: int = 0) -> None:
    t0 = np.datetime64("2026-11-01T00:00:00", "us")
    for batch in range(batches):
        with warehouse.open_writer(path) as con:
            frame = pl.DataFrame({
                "gpu_id": np.full(rows, first_gpu_id, dtype=np.int32),
                "ts": t0 + (np.arange(rows) + batch * rows) * np.timedelta64(30, "s"),
                "sm_active_ratio": np.linspace(0, 1, rows),
            })
            warehouse.write_samples(con, frame, "concurrency-test")
        if batch == 0:
            Path(marker).touch()
        if batch < hold:
            ack, deadline = Path(f"{marker}.read{batch}"), time.monotonic() + 60
            while not ack.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
    print(f"wrote {batches * rows} rows at {dt.datetime.now(dt.UTC).isoformat()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
         int(sys.argv[6]) if len(sys.argv) > 6 else 0)
