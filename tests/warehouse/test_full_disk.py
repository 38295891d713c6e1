"""A full disk is a failed write, never a damaged warehouse (issue 36). Each writer — job import,
scrape, simulate, pipelines run-once, period close — runs on a real tmpfs filled to its last byte
(tests/helpers/full_disk.py: a private mount namespace, no root needed): it exits 1 with ONE line
saying the disk is full, what it was writing and that the write was rolled back; the warehouse's
counts are those seeded (nothing half-written), DuckDB and `warehouse summary` read it, and once
the filler is removed the same write lands: the file was never damaged.

Before issue 36 the import said "20000 jobs imported", exit 0 (DuckDB's close swallowed the failed
checkpoint) and every later command refused the ragged file as "damaged"."""

from __future__ import annotations

import pytest

from tests.helpers.full_disk import available, run_on_full_disk
from tests.helpers.hostile_servers import HostileServer, http_answer

pytestmark = [pytest.mark.slow, pytest.mark.skipif(available() is not None, reason=str(available()))]

CONFIG = """currency: USD
org:
  name: acme
  children:
    - {name: p, shares: 1}
rate_card:
  - {gpu_model: H100, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
"""
PAGE = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaa",Hostname="n1"} 50\n'


def _jobs_csv(path, n: int) -> str:
    lines = ["job_id,cluster,project,user,gpu_model,gpus,start_time,end_time"]
    lines += [f"j{i},c1,p,u{i % 50},H100,1,2026-03-01T00:00:00Z,2026-03-01T{i % 23 + 1:02d}:00:00Z" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def exporter():
    with HostileServer(lambda _l, _r: http_answer(PAGE, content_type="text/plain; version=0.0.4")) as server:
        yield f"{server.url}/metrics"


def _writers(folder, exporter_url):
    config = folder / "gpuledger.yaml"
    config.write_text(CONFIG)
    jobs = _jobs_csv(folder / "jobs.csv", 20_000)
    return {
        "import": ["ingest", "jobs-csv", jobs, "-w", "{w}"],
        "scrape": ["ingest", "scrape", exporter_url, "--timeout", "5", "-w", "{w}"],
        "simulate": ["simulate", "warehouse", "--gpus", "16", "--days", "0.1", "--start", "2026-03-02T00:00:00",
                     "--clean", "-w", "{w}", "-c", str(config)],
        "pipelines": ["pipelines", "run-once", "--squatting-evaluations", "1", "-w", "{w}", "-c", str(config)],
        "period-close": ["period", "close", "2026-03", "--provisional", "-w", "{w}"],
    }


@pytest.mark.parametrize("writer", ["import", "scrape", "simulate", "pipelines", "period-close"])
def test_a_write_onto_a_full_disk_is_rolled_back_in_one_line_and_the_file_still_opens(tmp_path, exporter, writer):
    args = _writers(tmp_path, exporter)[writer]
    mount = tmp_path / "disk"
    mount.mkdir()
    config = str(tmp_path / "gpuledger.yaml")
    seen = run_on_full_disk(
        mount, "16m",
        seed=[["config", "load", "-c", config, "-w", "{w}"],
              ["simulate", "warehouse", "--gpus", "8", "--days", "0.02", "--start", "2026-03-01T00:00:00", "--clean",
               "-w", "{w}", "-c", config]],
        writer=args, after=args, cwd=tmp_path)
    ran = seen["writer"]
    lines = ran["stderr"].strip().splitlines()
    assert ran["code"] == 1, (writer, ran)
    assert len(lines) == 1, (writer, ran["stderr"])
    said = lines[0]
    assert f"warehouse {mount / 'w.duckdb'}: the disk is full (No space left on device writing {mount}" in said, said
    assert "this write was rolled back, nothing of it was stored" in said, said
    for wrong in ("damaged", "internal error", "Traceback", "imported", "closed"):
        assert wrong not in said and wrong not in ran["stdout"], (writer, wrong, ran)
    # nothing half-written: every table as seeded (sample rows too), read by DuckDB and by gpuledger
    assert seen["full"] == seen["seeded"], writer
    assert seen["full_read"]["code"] == 0 and "damaged" not in seen["full_read"]["stderr"], seen["full_read"]
    # room again: the same write lands on the same file (it was never damaged)
    assert seen["after"]["code"] == 0, (writer, seen["after"]["stderr"])
    assert seen["freed"] != seen["seeded"], writer


def test_an_import_longer_than_a_chunk_that_fills_the_disk_says_which_rows_were_stored(tmp_path):
    """300,000 jobs with 8 MiB left free: the import writes 50,000 rows a chunk (each its own
    transaction, so memory stays flat), and the disk fills in a later chunk. Exit 1, one line that
    says the chunk being written was rolled back and how many rows were stored before it; the
    warehouse holds exactly those (whole chunks), the file is not "damaged", and the same import,
    once there is room, completes it without importing a row twice."""
    mount = tmp_path / "disk"
    mount.mkdir()
    config = tmp_path / "gpuledger.yaml"
    config.write_text(CONFIG)
    jobs = _jobs_csv(tmp_path / "jobs.csv", 300_000)
    import_jobs = ["ingest", "jobs-csv", jobs, "-w", "{w}"]
    seen = run_on_full_disk(mount, "96m", seed=[["config", "load", "-c", str(config), "-w", "{w}"]],
                            writer=import_jobs, after=import_jobs, cwd=tmp_path, leave_bytes=8 << 20)
    ran = seen["writer"]
    said = ran["stderr"].strip()
    assert ran["code"] == 1 and len(said.splitlines()) == 1, ran
    assert "the disk is full (No space left on device writing" in said, said
    stored = seen["full"]["jobs"] - seen["seeded"]["jobs"]
    assert stored and stored % 50_000 == 0 and stored < 300_000, stored  # whole chunks, not all
    assert f"the chunk being written was rolled back; the first {stored:,} rows of {jobs} ({stored:,} jobs) " \
           "were stored before it" in said, said
    assert "damaged" not in said and "imported" not in ran["stdout"], ran
    assert seen["full_read"]["code"] == 0 and "damaged" not in seen["full_read"]["stderr"], seen["full_read"]
    assert seen["after"]["code"] == 0, seen["after"]  # room again: the rerun completes it
    assert "300000 rows read, 300000 jobs imported" in seen["after"]["stderr"]
    assert seen["freed"]["jobs"] == seen["seeded"]["jobs"] + 300_000


# One write of 300,000 jobs in one statement through gpuledger's writer: DuckDB writes the row
# groups of so big an insert into the file at commit and the log only points at them, so with
# 8 MiB free the commit fits and folding the log into the file at close does not.
_ONE_BIG_WRITE = """
import sys
from datetime import datetime
import polars as pl
from gpuledger import warehouse
from gpuledger.cli import _known_exit_code
n = 300_000
jobs = pl.DataFrame({"cluster": ["c1"] * n, "job_id": [f"j{i}" for i in range(n)], "project": ["p"] * n,
                     "gpu_model": ["H100"] * n, "gpus": [1.0] * n, "start_time": [datetime(2026, 3, 1)] * n,
                     "end_time": [datetime(2026, 3, 1, 1)] * n, "state": ["COMPLETED"] * n, "source": ["t"] * n,
                     "updated_at": [datetime(2026, 3, 2)] * n})
try:
    with warehouse.open_writer("{w}") as con:
        warehouse.upsert(con, "jobs", jobs)
except Exception as exc:  # told as the CLI's error boundary tells it: one line, its exit code
    print(f"gpuledger: {exc}", file=sys.stderr)
    sys.exit(_known_exit_code(exc) or 99)
"""


def test_a_checkpoint_that_hits_a_full_disk_after_the_commit_says_so_and_the_file_still_opens(tmp_path):
    """Exit 1, one line that says the write WAS committed (to the write-ahead log) and is
    readable; the file's ragged tail (the checkpoint stopped while the file grew) is not called
    damage, and the next write, once there is room, folds the log in."""
    mount = tmp_path / "disk"
    mount.mkdir()
    config = tmp_path / "gpuledger.yaml"
    config.write_text(CONFIG)
    seen = run_on_full_disk(mount, "24m", seed=[["config", "load", "-c", str(config), "-w", "{w}"]],
                            writer=["--python", _ONE_BIG_WRITE], after=["warehouse", "migrate", "-w", "{w}"],
                            cwd=tmp_path, leave_bytes=8 << 20)
    ran = seen["writer"]
    said = ran["stderr"].strip()
    assert ran["code"] == 1 and len(said.splitlines()) == 1, ran
    assert "the disk is full (No space left on device writing" in said, said
    assert f"the write was committed to the write-ahead log {mount / 'w.duckdb'}.wal" in said, said
    assert "damaged" not in said
    assert seen["full"]["jobs"] == 300_000  # all of it, readable
    assert seen["full_read"]["code"] == 0 and "damaged" not in seen["full_read"]["stderr"], seen["full_read"]
    assert seen["after"]["code"] == 0, seen["after"]  # a writer opens it and folds the log in
    assert seen["freed"]["jobs"] == 300_000
