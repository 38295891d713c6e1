"""Edges as data: samples stamped before 2000-01-01 (a clock at the epoch) or beyond the allowed
skew are quarantined with the reason and never register a GPU as present since 1970; the rows
beside them land."""

from __future__ import annotations

import time
from datetime import datetime

import duckdb
import polars as pl

from gpuledger import warehouse
from gpuledger.ingest.metrics.plausible import split_implausible_times
from gpuledger.ingest.metrics.scrape import ingest_page

NOW_MS = int(time.time() * 1000)
PAGE = (f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",Hostname="n1"}} 50 {NOW_MS}\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2",Hostname="n1"} 50 1000\n'  # 1970-01-01T00:00:01Z
        'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-3",Hostname="n1"} 50 946684799000\n')  # 1999-12-31T23:59:59Z


def test_a_page_with_1970_samples_keeps_the_good_line_and_quarantines_the_rest(tmp_path):
    path = tmp_path / "w.duckdb"
    with warehouse.open_writer(path) as con:
        stats = ingest_page(con, PAGE, location="http://n1:9400/metrics", scrape_ms=NOW_MS)
    assert (stats.samples_new, stats.quarantined) == (1, 2)
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT gpu_uuid FROM gpus").fetchall() == [("GPU-1",)]  # no GPU "since 1970"
        reasons = [r[0] for r in con.execute("SELECT reason FROM quarantine ORDER BY location").fetchall()]
    assert reasons == [("1 samples refused: sample time before 2000-01-01: a clock at the epoch or a unit "
                        "error (milliseconds read as seconds?); fix the exporter's clock")] * 2


def test_the_window_edges_themselves():
    now_s = datetime(2026, 12, 1).timestamp()  # naive: the same offset on both sides
    wide = pl.DataFrame({"gpu_uuid": ["A", "A", "A", "A"], "mig_instance_id": [-1] * 4, "ts": [
        datetime(1999, 12, 31, 23, 59, 59), datetime(2000, 1, 1),  # refused, kept
        datetime.fromtimestamp(now_s + 300), datetime.fromtimestamp(now_s + 301)]})  # kept, refused
    kept, rejects = split_implausible_times(wide, source="t", location="x", now_s=now_s, max_future_s=300)
    assert kept["ts"].to_list() == [datetime(2000, 1, 1), datetime.fromtimestamp(now_s + 300)]
    assert [r.reason.split(":")[1].strip().split(" ")[2] for r in rejects] == ["more", "before"]


def _page(host: str, gpu: str = "0") -> str:
    return f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-7",Hostname="{host}"}} 50 {NOW_MS}\n'


def test_one_uuid_on_two_hosts_is_a_quarantined_conflict_on_both_scrape_paths(tmp_path):
    from gpuledger.ingest.metrics.scrape import ingest_pages

    big = "# pad\n" * 9000  # over BULK_FROM_CHARS: the bulk parser's path
    for pad in ("", big):
        path = tmp_path / f"w{len(pad)}.duckdb"
        with warehouse.open_writer(path) as con:
            stats = ingest_pages(con, [(pad + _page("node-b.example.org"), "http://b:9400/metrics", NOW_MS),
                                       (pad + _page("node-a"), "http://a:9400/metrics", NOW_MS)])
        # node-a wins (first by name), node-b's 1 sample refused with the reason; nothing silent
        assert (stats.samples_new, stats.quarantined) == (1, 1), pad[:1]
        with duckdb.connect(str(path), read_only=True) as con:
            assert con.execute("SELECT host FROM gpus").fetchall() == [("node-a",)]
            reason = con.execute("SELECT reason FROM quarantine").fetchone()[0]
        assert reason.startswith("GPU GPU-7 is reported by 2 hosts (node-a, node-b); a UUID names one "
                                 "physical GPU, so node-b's 1 samples are refused and node-a's kept"), reason


def test_one_uuid_on_two_hosts_across_batches_is_the_same_quarantined_conflict(tmp_path):
    """Host A's batch is stored first; a later batch brings the UUID from host B: B's samples are
    refused against the stored device (before, B re-registered the device under its own name)."""
    from gpuledger.ingest.metrics.scrape import ingest_pages

    big = "# pad\n" * 9000  # over BULK_FROM_CHARS: the bulk parser's path
    later = NOW_MS + 30_000
    for pad in ("", big):
        path = tmp_path / f"w{len(pad)}.duckdb"
        with warehouse.open_writer(path) as con:
            first = ingest_pages(con, [(pad + _page("node-a"), "http://a:9400/metrics", NOW_MS)])
            second = ingest_pages(con, [(pad + _page("node-b").replace(str(NOW_MS), str(later)),
                                         "http://b:9400/metrics", later)])
        assert (first.samples_new, first.quarantined) == (1, 0), pad[:1]
        assert (second.samples_new, second.quarantined) == (0, 1), pad[:1]
        with duckdb.connect(str(path), read_only=True) as con:
            assert con.execute("SELECT host FROM gpus").fetchall() == [("node-a",)]
            assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (1,)
            location, reason = con.execute("SELECT location, reason FROM quarantine").fetchone()
        assert location == "http://b:9400/metrics UUID=GPU-7 host=node-b", location
        assert reason.startswith("GPU GPU-7 is already stored on host node-a (cluster default); a UUID names "
                                 "one physical GPU, so host node-b's 1 samples are refused"), reason


def test_one_uuid_under_two_spellings_of_one_host_is_no_conflict(tmp_path):
    from gpuledger.ingest.metrics.scrape import ingest_pages

    with warehouse.open_writer(tmp_path / "w.duckdb") as con:
        stats = ingest_pages(con, [(_page("Node-A.example.org"), "x", NOW_MS), (_page("node-a"), "y", NOW_MS)])
    assert (stats.samples_new, stats.quarantined) == (1, 0)


# --- a priority beyond 64 bits quarantines its row only -------------------------------------------
HEADER = "JobID|JobName|Cluster|Account|User|AllocTRES|ReqTRES|Submit|Start|End|State|QOS|Partition|Priority|TimelimitRaw"


def _sacct_line(job: int, priority: str) -> str:
    return (f"{job}|j|c1|proj-a|root|gres/gpu=1|gres/gpu=1|2026-11-29T21:22:33|2026-11-29T21:22:34|"
            f"2026-11-29T21:22:36|COMPLETED|normal|gpu|{priority}|UNLIMITED")


def test_a_sacct_priority_beyond_64_bits_quarantines_that_row_only():
    from gpuledger.ingest.jobs.slurm import parse_parsable

    text = "\n".join([HEADER, _sacct_line(1, "10"), _sacct_line(2, str(2**63)), _sacct_line(3, str(2**63 - 1))])
    batch = parse_parsable(text, origin="x.txt")
    assert sorted(batch.jobs["job_id"].to_list()) == ["1", "3"]  # 2^63 - 1 is the largest BIGINT
    assert [(r.location, r.reason.split(";")[0]) for r in batch.rejected] == [
        ("x.txt:3", "Priority: 9223372036854775808 is beyond the 64-bit range the warehouse stores (|n| < 2^63)")]


def test_a_job_csv_priority_beyond_64_bits_quarantines_that_row_only(tmp_path):
    import subprocess
    import sys

    rows = [f"c1,j{i},llm-pretrain,alice,H100,1,2026-11-01T00:00:00Z,2026-11-01T01:00:00Z,{p}"
            for i, p in enumerate(["5", str(2**64), "-7"])]
    (tmp_path / "jobs.csv").write_text("cluster,job_id,project,user,gpu_model,gpus,start_time,end_time,priority\n"
                                       + "\n".join(rows) + "\n")
    ran = subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "jobs-csv", "jobs.csv", "-w", "w.duckdb"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
                         env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert "Traceback" not in ran.stderr and "internal error" not in ran.stderr, ran.stderr
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert con.execute("SELECT job_id, priority FROM jobs ORDER BY job_id").fetchall() == [("j0", 5), ("j2", -7)]
        assert con.execute("SELECT location FROM quarantine").fetchall() == [("jobs.csv:3",)]
