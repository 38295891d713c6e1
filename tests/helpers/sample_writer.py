"""A writer process for the concurrency tests: ingests BATCHES batches of samples, each in its own
writer session, and touches MARKER after the first one is published."""

import datetime as dt
import sys
from pathlib import Path

import numpy as np
import polars as pl

from gpuledger import warehouse


def main(path: str, marker: str, batches: int, rows: int, first_gpu_id: int) -> None:
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
    print(f"wrote {batches * rows} rows at {dt.datetime.now(dt.UTC).isoformat()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
