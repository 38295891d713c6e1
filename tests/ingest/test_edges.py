"""Edges as data: samples stamped before 2000-01-01 (a clock at the epoch) or beyond the allowed
skew are quarantined with the reason and never register a GPU as present since 1970; the rows
beside them land."""

from __future__ import annotations

import time
from datetime import datetime

import duckdb
import polars as pl
import pytest

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


@pytest.mark.slow
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


# --- the cluster's own window: clusters.<name>.first_day, policy.samples.clock_skew_seconds -------
WINDOWED = """currency: USD
org: {name: acme, children: [{name: vision}]}
clusters:
  east: {first_day: 2026-06-01}
policy:
  samples: {clock_skew_seconds: 0}
"""
MAY_31 = 1_780_185_600_000  # 2026-05-31T00:00:00Z in ms: 1,780,272,000 s (2026-06-01) - 86,400 s


def test_samples_before_the_clusters_first_day_are_quarantined_and_the_skew_is_the_configs(tmp_path):
    from gpuledger.config import parse_config_text
    from gpuledger.ledger.config_versions import load_version

    future_ms = NOW_MS + 60_000  # a minute ahead: within the default 300 s, beyond the configured 0 s
    page = (f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",Hostname="n1"}} 50 {NOW_MS}\n'
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-2",Hostname="n1"}} 50 {MAY_31}\n')
    ahead = f'DCGM_FI_DEV_GPU_UTIL{{gpu="2",UUID="GPU-3",Hostname="n1"}} 50 {future_ms}\n'
    path = tmp_path / "w.duckdb"
    with warehouse.open_writer(path) as con:
        before = ingest_page(con, page + ahead, location="x", scrape_ms=NOW_MS, cluster="east")
        load_version(con, parse_config_text(WINDOWED), text=WINDOWED)
        east = ingest_page(con, page + ahead, location="east-page", scrape_ms=NOW_MS, cluster="east")
        west = ingest_page(con, page, location="west-page", scrape_ms=NOW_MS, cluster="west")
    assert (before.samples_new, before.quarantined) == (3, 0)  # no config: 2000-01-01 and 300 s
    # east: the good sample is stored already (0 new); May 31 and the minute ahead refused
    assert (east.samples_new, east.quarantined) == (0, 2)
    assert (west.samples_new, west.quarantined) == (2, 0)  # west has no first day: the floor is 2000-01-01
    with duckdb.connect(str(path), read_only=True) as con:
        reasons = [r[0] for r in con.execute(
            "SELECT reason FROM quarantine WHERE location LIKE 'east-page%' ORDER BY reason").fetchall()]
    assert reasons[0] == ("1 samples refused: sample time before 2026-06-01 (clusters.east.first_day, cluster "
                          "east's first day); fix the exporter's clock, or the day in the config if it is wrong")
    assert "in the future" in reasons[1] or "after" in reasons[1], reasons


def test_job_times_before_the_clusters_first_day_are_quarantined():
    from gpuledger.ingest.jobs.checks import JobLimits, job_problem

    limits = JobLimits(first_days={"east": datetime(2026, 6, 1)})
    row = {"cluster": "east", "start_time": datetime(2026, 5, 31, 23, 0), "end_time": datetime(2026, 6, 1, 1, 0)}
    assert job_problem(row, limits, now=datetime(2026, 12, 1)) == (
        "start_time: 2026-05-31 23:00:00 is before cluster east's first day 2026-06-01 "
        "(clusters.east.first_day); fix the source's clock, or the day in the config if it is wrong")
    assert job_problem({**row, "cluster": "west"}, limits, now=datetime(2026, 12, 1)) is None
