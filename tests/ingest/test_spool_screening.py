"""A spool's holdings screened in bounded batches (issue 36: holdings/screening.py) give what the
whole list screened at once gives (checks.screen_holdings): the same holdings land, the same
records are refused with the same reasons, whatever the batch size; two claims on one whole GPU
that arrive in different batches are the same refusal as two in one batch."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger.ingest.holdings import slurm_spool
from gpuledger.ingest.holdings.checks import WHERE, screen_holdings
from gpuledger.ingest.holdings.screening import Scratch, SpoolScreen
from gpuledger.ingest.holdings.store import holdings_frame

NOW = datetime(2026, 12, 1, 12)
T0 = datetime(2026, 12, 1, 8)
H = timedelta(hours=1)


def _holding(job: str, device: str, first: datetime, last: datetime, *, host: str = "n1", **extra) -> dict:
    return {"cluster": "c1", "source": "slurm-prolog", "scheduler_job": job, "host": host, "device_id": device,
            "first_seen": first, "last_seen": last, "ended": True, "gpu_uuid": device if device.startswith("GPU-")
            else None, "mig_instance_id": -1, "gpu_index": None, "resource": "gres/gpu",
            WHERE: f"spool/{job}.{host}.start", **extra}


def _screened(rows: list[dict], batch: int, partitioned: frozenset[str] = frozenset()):
    """(what lands as a frame sorted, quarantine rows sorted) through SpoolScreen in ``batch``es."""
    with Scratch() as scratch:
        screen = SpoolScreen(scratch, source="slurm-gpus", now=NOW, batch=batch)
        for k in range(0, len(rows), 2):  # handed over two at a time, as a reader hands its files over
            screen.add(rows[k:k + 2])
        landed, refused = [], []
        for frame, bad in screen.results(partitioned):
            landed.append(frame)
            refused += bad
    return _sorted(pl.concat(landed)), _in_order(refused)


def _in_order(rows: list) -> list:
    return sorted(rows, key=lambda r: (r.source, r.location, r.raw_text, r.reason))


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def _whole(rows: list[dict], partitioned: frozenset[str] = frozenset()):
    kept, refused = screen_holdings(rows, source="slurm-gpus", now=NOW, partitioned=partitioned)
    return _sorted(holdings_frame(kept)), _in_order(refused)


def test_two_claims_on_one_gpu_in_different_batches_are_refused_as_in_one():
    # job a holds GPU-1 08:00-10:00; job b claims it 09:00-11:00 (overlap: refused), job c 10:30-12:00
    # (a ended by then: kept); between them, fillers on other GPUs push each claim into its own batch
    fillers = [_holding(f"f{k}", f"GPU-f{k}", T0, T0 + H) for k in range(6)]
    rows = [_holding("a", "GPU-1", T0, T0 + 2 * H), *fillers[:3],
            _holding("b", "GPU-1", T0 + H, T0 + 3 * H), *fillers[3:],
            _holding("c", "GPU-1", T0 + 2.5 * H, T0 + 4 * H)]
    landed, refused = _screened(rows, batch=2)
    assert sorted(landed["scheduler_job"]) == sorted(["a", "c", *(f"f{k}" for k in range(6))])
    [clash] = refused
    assert clash.location == "spool/b.n1.start"
    assert clash.reason.startswith("GPU GPU-1 on n1 is held by job a from 2026-12-01 08:00:00 and by job b "
                                   "from 2026-12-01 09:00:00 at once")
    whole_landed, whole_refused = _whole(rows)
    assert_frame_equal(landed, whole_landed)
    assert refused == whole_refused


def _random_rows(rng: random.Random, n: int) -> list[dict]:
    """Holdings on a few GPUs (by UUID, by index, MIG instances, time-sliced replicas), some
    overlapping, some sharing a first-seen time, and a few records no check lets through."""
    rows = []
    for k in range(n):
        first = T0 + timedelta(minutes=rng.randrange(0, 240, 15))
        last = first + timedelta(minutes=rng.randrange(0, 180, 15))
        job = f"j{rng.randrange(12)}"
        kind = rng.random()
        if kind < 0.45:
            row = _holding(job, f"GPU-{rng.randrange(4)}", first, last)
        elif kind < 0.7:
            row = _holding(job, str(rng.randrange(3)), first, last, host=f"n{rng.randrange(2)}",
                           gpu_index=rng.randrange(3))
        elif kind < 0.8:
            row = _holding(job, f"MIG-GPU-{rng.randrange(4)}/{rng.randrange(1, 3)}/0", first, last,
                           mig_instance_id=rng.randrange(1, 3))
        elif kind < 0.9:
            row = _holding(job, f"GPU-{rng.randrange(4)}::{rng.randrange(4)}", first, last)
        else:  # refused by the per-record checks
            row = rng.choice([_holding(job, "GPU-9", first, first - H), _holding(job, "../etc", first, last),
                              _holding(job, "GPU-9", datetime(1970, 1, 1), last),
                              _holding(job, "GPU-9", first, last, pod=5)])
        row[WHERE] = f"spool/{k}"
        rows.append(row)
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_any_batch_size_screens_as_the_whole_list(seed):
    rng = random.Random(seed)
    rows = _random_rows(rng, 120)
    partitioned = frozenset({"c1/GPU-3"}) if seed % 2 else frozenset()
    want = _whole(rows, partitioned)
    assert want[1], "the sample should hold refusals"
    for batch in (1, 7, 10_000):
        landed, refused = _screened(rows, batch, partitioned)
        assert_frame_equal(landed, want[0])
        assert refused == want[1]


def _run_key(row: dict) -> tuple:
    return row["scheduler_job"], row["device_id"], row["first_seen"]


def test_a_spool_read_in_small_batches_pairs_its_events_as_one_read(tmp_path, monkeypatch):
    """stream_spool stages the events and pairs them read back in order: batches of one event give
    the read of one batch (runs without an end, ends without a start, two runs of one job)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    head = "format\tgpuledger-slurm-gpus/1\ncluster\tc1\n"
    t = 1796040000
    events = [("7", "n1", t, "start", "gpu\t0\tGPU-a\ngpu\t1\tGPU-b\n"), ("7", "n1", t + 600, "end", ""),
              ("7", "n1", t + 900, "start", "gpu\t0\tGPU-a\n"),  # requeued: a second run, still open
              ("8", "n2", t + 60, "end", ""),  # no start
              ("9", "n1", t + 30, "start", "gpu\t2\tGPU-c\n"), ("9", "n1", t + 40, "start", "gpu\t2\tGPU-c\n")]
    for job, node, at, kind, gpus in events:
        (spool / f"{job}.{node}.{at}.{kind}").write_text(
            f"{head}node\t{node}\nevent\t{kind}\njob_id\t{job}\ntime\t{at}\n{gpus}")
    whole = slurm_spool.read_spool(spool)
    for batch in (1, 2):
        got = slurm_spool.SpoolRead()
        with Scratch() as scratch:
            got.files = slurm_spool.stream_spool(spool, cluster=None, scratch=scratch, batch=batch,
                                                 holdings=got.holdings.extend, bad=got.quarantined.append)
        assert sorted(got.holdings, key=_run_key) == sorted(whole.holdings, key=_run_key)
        assert got.quarantined == whole.quarantined and got.files == whole.files == 6
    began = datetime(2026, 11, 30, 12)  # t
    runs = sorted((r["scheduler_job"], r["device_id"], (r["first_seen"] - began).seconds,
                   (r["last_seen"] - began).seconds, r["ended"]) for r in whole.holdings)
    # job 7: its first run closed at +600 s on both GPUs, the requeued run open; job 9: two starts,
    # the first's end unknown (it ends where it began), the second still open
    assert runs == [("7", "GPU-a", 0, 600, True), ("7", "GPU-a", 900, 900, False), ("7", "GPU-b", 0, 600, True),
                    ("9", "GPU-c", 30, 30, False), ("9", "GPU-c", 40, 40, False)]
    [bad] = whole.quarantined
    assert "an end for job 8 on n2 without its start" in bad.reason


def test_a_scratch_folder_that_fails_is_one_line_naming_it():
    """The scratch folder removed (or its disk full) under a read: a RunError in one line naming
    the folder and the fix (the CLI prints it, exit 1), not DuckDB's or Arrow's own words."""
    import shutil

    from gpuledger.errors import RunError

    with Scratch() as scratch:
        screen = SpoolScreen(scratch, source="slurm-gpus", now=NOW, batch=2)
        screen.add([_holding("a", "GPU-1", T0, T0 + H), _holding("b", "GPU-2", T0, T0 + H)])
        shutil.rmtree(scratch.root / "held")
        with pytest.raises(RunError) as raised:
            list(screen.results())
        said = str(raised.value)
        assert said.startswith(f"the spool read's scratch folder {scratch.root}: ") and "\n" not in said
        assert "set TMPDIR to a folder with room" in said
