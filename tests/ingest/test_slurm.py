"""Slurm job records: sacct exports captured from a real Slurm 22.05 (tests/fixtures/slurm/), and
one end-to-end run against a real single-node Slurm with accounting (scripts/slurm-rig.sh).

Fixtures (captured from the rig on 2026-11-29, host TZ UTC):
  sacct-parsable2-running.txt / sacct-running.json   jobs 2 and 8 RUNNING, 4 PENDING, 3 CPU-only
  sacct-parsable2-running-new-york.txt               the same, printed with TZ=America/New_York
  sacct-parsable2-later.txt / sacct-later.json       20 s later: job 8 COMPLETED
  sacct-parsable2-with-steps.txt                     without -X: step lines (1.batch, ...)
  sacct-parsable2-malformed.txt / sacct-malformed.json   hand-made bad lines beside good ones
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
import typer
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.ingest.jobs.slurm import (
    SACCT_FIELDS,
    SacctFormatError,
    parse_json,
    parse_parsable,
    parse_tres_gpus,
    run_sacct,
    write_batch,
)
from gpuledger.cli.ingest.slurm import app as slurm_app

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RIG = REPO / "scripts" / "slurm-rig.sh"


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def ingest(*args: str):
    """`gpuledger ingest slurm ...` as the real CLI will register it."""
    root = typer.Typer()
    root.add_typer(slurm_app, name="ingest")
    result = CliRunner().invoke(root, ["ingest", "slurm", *args])
    return result


def rows(path: Path, sql: str) -> list[tuple]:
    with warehouse.open_reader(path) as con:
        return con.execute(sql).fetchall()


def jobs_by_id(path: Path) -> dict[str, dict]:
    with warehouse.open_reader(path) as con:
        frame = con.sql("SELECT * FROM jobs ORDER BY job_id").pl()
    return {row["job_id"]: row for row in frame.iter_rows(named=True)}


# --- TRES -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tres", "gpus", "model"),
    [
        ("billing=21,cpu=1,gres/gpu:h100=2,gres/gpu=2,node=1", 2.0, "H100"),
        ("billing=21,cpu=1,gres/gpu=2,mem=62.50G,node=1", 2.0, None),
        ("gres/gpu:nvidia_h100_80gb_hbm3=8,gres/gpu=8", 8.0, "H100"),
        ("gres/gpu:a100=1,gres/gpu:h100=2,gres/gpu=3", 3.0, "A100+H100"),
        ("gres/gpu:nvidia_a100_3g.40gb=1,gres/gpu=1", 3 / 7, "A100"),
        ("gres/gpu:1g.10gb=2,gres/gpu=2", 2 / 7, "1G.10GB"),
        ("billing=1,cpu=4,mem=1G,node=1", 0.0, None),
        ("", 0.0, None),
    ],
)
def test_tres_gpu_counts_and_types(tres, gpus, model):
    got_gpus, got_model = parse_tres_gpus(tres)
    assert got_gpus == pytest.approx(gpus)
    assert got_model == model


@pytest.mark.parametrize("tres", ["gres/gpu=two", "cpu=1,gres/gpu", "gres/gpu:h100=-1"])
def test_tres_errors_name_the_field(tres):
    with pytest.raises(ValueError, match="^AllocTRES: "):
        parse_tres_gpus(tres)


# --- parsing captured sacct output ------------------------------------------------------------


def test_parsable_export_maps_real_sacct_output():
    batch = parse_parsable(fixture_text("sacct-parsable2-running.txt"), origin="running.txt")
    jobs = {r["job_id"]: r for r in batch.jobs.iter_rows(named=True)}
    assert batch.records_read == 8 and batch.skipped_no_gpu == 1 and not batch.rejected
    assert sorted(jobs) == ["1", "2", "4", "5", "6", "7", "8"]  # 3 is the CPU-only job

    done = jobs["1"]
    assert (done["cluster"], done["project"], done["user_name"], done["name"]) == (
        "gpuledger", "proj-a", "root", "train-a")
    assert (done["gpus"], done["gpu_model"], done["state"], done["qos"]) == (2.0, "H100", "COMPLETED", "normal")
    assert done["submit_time"] == datetime(2026, 11, 29, 21, 22, 33)
    assert done["end_time"] == datetime(2026, 11, 29, 21, 22, 36)
    assert done["priority"] == 10000

    running = jobs["2"]  # End=Unknown; asked for untyped gpu:2, AllocTRES names the type
    assert running["state"] == "RUNNING" and running["end_time"] is None
    assert running["start_time"] == datetime(2026, 11, 29, 21, 22, 34)
    assert (running["gpus"], running["gpu_model"], running["qos"], running["priority"]) == (2.0, "H100", "high", 20000)
    assert running["name"] == "infer b|pipe"  # a '|' in JobName is joined back, not quarantined

    pending = jobs["4"]  # no allocation yet: GPUs from ReqTRES, Start=Unknown
    assert (pending["gpus"], pending["gpu_model"], pending["state"], pending["start_time"]) == (
        8.0, "H100", "PENDING", None)
    assert jobs["6"]["state"] == "CANCELLED"  # "CANCELLED by 0"
    assert jobs["6"]["start_time"] is None     # Start=None


def test_json_export_matches_parsable_export():
    parsable = parse_parsable(fixture_text("sacct-parsable2-running.txt"), origin="p")
    from_json = parse_json(fixture_text("sacct-running.json"), origin="j")
    assert from_json.records_read == 8 and from_json.skipped_no_gpu == 1 and not from_json.rejected
    where = ("updated_at", "_location", "_raw")  # the source's own text and place differ, by design
    assert from_json.jobs.drop(where).equals(parsable.jobs.drop(where))


def test_tz_option_converts_local_times_to_utc():
    utc = parse_parsable(fixture_text("sacct-parsable2-running.txt"), origin="utc")
    new_york = parse_parsable(
        fixture_text("sacct-parsable2-running-new-york.txt"), origin="ny", tz="America/New_York"
    )
    where = ("updated_at", "_location", "_raw")
    assert new_york.jobs.drop(where).equals(utc.jobs.drop(where))
    naive = parse_parsable(fixture_text("sacct-parsable2-running-new-york.txt"), origin="ny")
    first = naive.jobs.filter(job_id="1")["submit_time"][0]
    assert first == datetime(2026, 11, 29, 16, 22, 33)  # read as UTC: five hours off, as told


def test_step_lines_are_skipped_and_counted():
    batch = parse_parsable(fixture_text("sacct-parsable2-with-steps.txt"), origin="steps")
    assert batch.skipped_steps == 6 and batch.jobs.height == 7 and not batch.rejected


def test_header_is_read_by_name_in_any_order():
    text = (
        "State|AllocTRES|Account|JobID|Start|End\n"
        "RUNNING|gres/gpu:b200=4,gres/gpu=4|proj-x|77|2026-11-29T09:00:00|Unknown\n"
    )
    batch = parse_parsable(text, origin="reordered", cluster="site-b", tz="Europe/Berlin")
    (job,) = batch.jobs.iter_rows(named=True)
    assert (job["cluster"], job["job_id"], job["project"], job["gpus"], job["gpu_model"]) == (
        "site-b", "77", "proj-x", 4.0, "B200")
    assert job["start_time"] == datetime(2026, 11, 29, 8, 0, 0)  # 09:00 CET = 08:00 UTC
    assert job["submit_time"] is None and job["end_time"] is None


def test_header_without_required_field_is_refused():
    with pytest.raises(SacctFormatError, match=r"x\.txt:1: the header lacks Account"):
        parse_parsable("JobID|AllocTRES|State\n1|gres/gpu=1|RUNNING\n", origin="x.txt")


def test_malformed_lines_are_quarantined_beside_good_ones():
    batch = parse_parsable(fixture_text("sacct-parsable2-malformed.txt"), origin="bad.txt")
    reasons = {r.location: r.reason for r in batch.rejected}
    assert sorted(reasons, key=lambda loc: int(loc.split(":")[1])) == [
        "bad.txt:3", "bad.txt:4", "bad.txt:5", "bad.txt:6", "bad.txt:7", "bad.txt:8", "bad.txt:11",
    ]
    assert reasons["bad.txt:3"].startswith("Submit: 'yesterday'")
    assert reasons["bad.txt:4"].startswith("AllocTRES: GPU count 'two'")
    assert reasons["bad.txt:5"].startswith("line has 6 field(s), the header 15")
    assert reasons["bad.txt:7"].startswith("Account: empty")
    assert reasons["bad.txt:8"].startswith("Priority: 'top'")
    assert reasons["bad.txt:11"].startswith("State: '??'")
    raw = {r.location: r.raw_text for r in batch.rejected}
    assert raw["bad.txt:6"] == "not a sacct line at all"
    good = {r["job_id"]: r for r in batch.jobs.iter_rows(named=True)}
    assert sorted(good) == ["101", "107", "110_3", "111"]
    assert good["107"]["end_time"] is None and good["107"]["gpus"] == 4.0 and good["107"]["gpu_model"] is None
    assert good["110_3"]["gpus"] == pytest.approx(3 / 7) and good["110_3"]["state"] == "CANCELLED"
    assert batch.skipped_no_gpu == 1 and batch.skipped_steps == 1


def test_malformed_json_jobs_are_quarantined_beside_good_ones():
    batch = parse_json(fixture_text("sacct-malformed.json"), origin="bad.json")
    reasons = {r.location: r.reason for r in batch.rejected}
    assert reasons == {
        "bad.json:job 901": "time.submission: 'yesterday' is not a number",
        "bad.json:job 902": "account: empty; the account is the job's project (sacctmgr add account)",
        "bad.json:job 903": "tres.allocated: expected a list of TRES entries, got str",
        "bad.json:jobs[5]": "jobs[5]: expected an object, got str",
    }
    assert batch.jobs["job_id"].to_list() == ["1", "2"] and batch.skipped_no_gpu == 1


def test_not_json_is_refused_with_position():
    with pytest.raises(SacctFormatError, match=r"x\.json:1: not JSON"):
        parse_json("{jobs: nope", origin="x.json")


# --- the command, into a warehouse ------------------------------------------------------------


def test_file_import_is_idempotent_and_updates_finished_jobs(warehouse_file):
    first = ingest("--file", str(FIXTURES / "sacct-parsable2-running.txt"), "-w", str(warehouse_file))
    assert first.exit_code == 0, first.output
    assert "7 new" in first.output
    before = jobs_by_id(warehouse_file)
    assert before["8"]["state"] == "RUNNING" and before["8"]["end_time"] is None

    again = ingest("--file", str(FIXTURES / "sacct-running.json"), "-w", str(warehouse_file))
    assert again.exit_code == 0, again.output
    assert rows(warehouse_file, "SELECT count(*) FROM jobs") == [(7,)]

    later = ingest("--file", str(FIXTURES / "sacct-later.json"), "-w", str(warehouse_file))
    assert later.exit_code == 0, later.output
    after = jobs_by_id(warehouse_file)
    assert len(after) == 7
    assert after["8"]["state"] == "COMPLETED"
    assert after["8"]["end_time"] == datetime(2026, 11, 29, 21, 23, 29)
    assert after["2"]["state"] == "RUNNING" and after["2"]["end_time"] is None
    assert {r["source"] for r in after.values()} == {"slurm-sacct"}


def test_file_import_quarantines_and_reimport_adds_nothing(warehouse_file):
    path = FIXTURES / "sacct-parsable2-malformed.txt"
    for _ in range(2):
        result = ingest("--file", str(path), "--input-format", "parsable", "-w", str(warehouse_file))
        assert result.exit_code == 0, result.output
        assert "7 quarantined" in result.output
        assert rows(warehouse_file, "SELECT count(*) FROM jobs") == [(4,)]
        assert rows(warehouse_file, "SELECT count(*) FROM quarantine") == [(7,)]
    stored = rows(
        warehouse_file,
        "SELECT location, reason FROM quarantine WHERE source = 'slurm-sacct' AND location LIKE '%:4'",
    )
    assert stored == [(f"{path}:4", "AllocTRES: GPU count 'two' in 'gres/gpu=two' is not a whole number")]


def test_command_refuses_an_unreadable_header(warehouse_file, tmp_path):
    bad = tmp_path / "no-header.txt"
    bad.write_text("1|2|3\n")
    result = ingest("--file", str(bad), "-w", str(warehouse_file))
    assert result.exit_code == 2
    assert "the header lacks JobID" in result.output
    assert not warehouse_file.exists()


def test_command_needs_exactly_one_source(warehouse_file):
    assert ingest("-w", str(warehouse_file)).exit_code == 2
    both = ingest("--live", "--file", str(FIXTURES / "sacct-running.json"), "-w", str(warehouse_file))
    assert both.exit_code == 2


def test_live_call_runs_the_documented_sacct(tmp_path, warehouse_file):
    """The live path with a stand-in sacct that records how it was called."""
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "sacct"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "TZ=$TZ SLURM_TIME_FORMAT=$SLURM_TIME_FORMAT $*" >> {calls}\n'
        f"cat {FIXTURES / 'sacct-parsable2-running-new-york.txt'}\n"
    )
    fake.chmod(0o755)
    result = ingest("--live", "--sacct", str(fake), "--tz", "America/New_York",
                    "--start", "2026-11-29T00:00", "--end", "now", "-w", str(warehouse_file))
    assert result.exit_code == 0, result.output
    assert calls.read_text().strip() == (
        "TZ=America/New_York SLURM_TIME_FORMAT=standard -a -X -D -S 2026-11-29T00:00 -E now "
        f"--parsable2 --format={','.join(SACCT_FIELDS)}"
    )
    assert jobs_by_id(warehouse_file)["1"]["submit_time"] == datetime(2026, 11, 29, 21, 22, 33)


def test_live_call_failure_is_reported(tmp_path):
    from gpuledger.ingest.jobs.slurm import SacctCallError

    with pytest.raises(SacctCallError, match="not found: install slurm-client"):
        run_sacct("parsable", "now-1hour", "now", sacct=str(tmp_path / "no-sacct"))
    failing = tmp_path / "sacct"
    failing.write_text("#!/bin/sh\necho 'sacct: error: Problem talking to the database' >&2\nexit 1\n")
    failing.chmod(0o755)
    with pytest.raises(SacctCallError, match="exited 1: sacct: error: Problem talking"):
        run_sacct("json", "now-1hour", "now", sacct=str(failing))


# --- a real Slurm -----------------------------------------------------------------------------


def _rig_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the Slurm rig needs root (apt-get install, daemons as root and munge)"
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        return "the Slurm rig needs apt-get (Debian) to install munge, slurm and mariadb"
    return None


@pytest.fixture(scope="session")
def slurm_rig():
    """A real single-node Slurm with accounting, started by scripts/slurm-rig.sh; stopped at the end.

    Yields the environment (SLURM_CONF) a client needs and the rig's directory.
    """
    reason = _rig_skip_reason()
    if reason:
        pytest.skip(reason)
    # Not under pytest's tmp tree: it is mode 700, and munged / mariadbd run as their own users.
    rig_dir = Path(tempfile.mkdtemp(prefix="gpuledger-slurm-", dir=os.environ.get("TMPDIR", "/tmp")))
    started = time.monotonic()
    done = subprocess.run(["bash", str(RIG), "start", str(rig_dir)], capture_output=True, text=True,
                          timeout=300, check=False)
    try:
        if done.returncode != 0:
            logs = "\n".join(
                f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted((rig_dir / "log").glob("*"))
            )
            pytest.fail(f"slurm-rig.sh start failed ({done.returncode}):\n{done.stderr}\n{logs}")
        print(f"\nslurm rig up in {time.monotonic() - started:.1f} s: {done.stderr.strip()}")
        env = {**os.environ, "SLURM_CONF": str(rig_dir / "etc" / "slurm.conf"), "TZ": "UTC"}
        yield {"env": env, "dir": rig_dir}
    finally:
        stopped = subprocess.run(["bash", str(RIG), "stop", str(rig_dir)], capture_output=True,
                                 text=True, timeout=120, check=False)
        if stopped.returncode == 0:
            shutil.rmtree(rig_dir, ignore_errors=True)


def _slurm(rig, *command: str) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True, env=rig["env"], cwd=rig["dir"],
                          timeout=60, check=False)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stderr}"
    return done.stdout.strip()


def _wait_for_states(rig, wanted: dict[str, str], deadline_s: float = 60.0) -> None:
    """Poll sacct until every job shows its wanted state (sacct lags the controller slightly)."""
    deadline = time.monotonic() + deadline_s
    seen: dict[str, str] = {}
    while time.monotonic() < deadline:
        out = _slurm(rig, "sacct", "-a", "-X", "-n", "-P", "-j", ",".join(wanted), "--format=JobID,State")
        seen = {line.split("|")[0]: line.split("|")[1].split()[0] for line in out.splitlines() if "|" in line}
        if all(seen.get(job) == state for job, state in wanted.items()):
            return
        time.sleep(0.5)
    pytest.fail(f"sacct did not show {wanted} within {deadline_s:.0f} s; last seen {seen}")


def _ingest_live(rig, warehouse_path: Path, *extra: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gpuledger.cli", "ingest", "slurm", "--live",
         "--start", "now-1hour", "-w", str(warehouse_path), *extra],
        capture_output=True, text=True, env=rig["env"], cwd=REPO, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.slurm
def test_live_ingest_from_a_real_slurm(slurm_rig, warehouse_file):
    rig = slurm_rig
    submitted_at = datetime.now(UTC).replace(tzinfo=None)
    sbatch = ["sbatch", "--parsable", "--output=/dev/null", "--gres=gpu:h100:2"]
    short = _slurm(rig, *sbatch, "--account=proj-a", "-J", "gl-short", "--wrap", "sleep 2").split(";")[0]
    long = _slurm(rig, *sbatch, "--account=proj-b", "-J", "gl-long", "--wrap", "sleep 300").split(";")[0]
    cpu = _slurm(rig, "sbatch", "--parsable", "--output=/dev/null", "--account=proj-a", "--wrap", "true")
    _wait_for_states(rig, {short: "COMPLETED", long: "RUNNING", cpu.split(";")[0]: "COMPLETED"})

    out = _ingest_live(rig, warehouse_file)
    assert "without GPUs skipped" in out
    jobs = jobs_by_id(warehouse_file)
    assert set(jobs) >= {short, long} and cpu not in jobs
    for job_id, project in ((short, "proj-a"), (long, "proj-b")):
        job = jobs[job_id]
        assert (job["cluster"], job["project"], job["gpus"], job["gpu_model"], job["user_name"]) == (
            "gpuledger", project, 2.0, "H100", "root")
        # Times arrive as UTC: within a minute of when the test submitted them.
        assert abs(job["submit_time"] - submitted_at) < timedelta(minutes=1)
    assert jobs[short]["state"] == "COMPLETED" and jobs[short]["end_time"] >= jobs[short]["start_time"]
    assert jobs[long]["state"] == "RUNNING" and jobs[long]["end_time"] is None

    # The JSON form of the same live call agrees and adds no rows.
    _ingest_live(rig, warehouse_file, "--input-format", "json")
    assert jobs_by_id(warehouse_file).keys() == jobs.keys()

    # The running job ends; the next import updates it in place.
    _slurm(rig, "scancel", long)
    _wait_for_states(rig, {long: "CANCELLED"})
    _ingest_live(rig, warehouse_file)
    after = jobs_by_id(warehouse_file)
    assert after.keys() == jobs.keys()
    assert after[long]["state"] == "CANCELLED" and after[long]["end_time"] is not None


@pytest.mark.slow
def test_warehouse_rows_readable_with_plain_duckdb(warehouse_file):
    """The stored jobs are ordinary rows: a reader sees the types the analytics expect."""
    assert ingest("--file", str(FIXTURES / "sacct-later.json"), "-w", str(warehouse_file)).exit_code == 0
    con = duckdb.connect(str(warehouse_file), read_only=True)  # no writer holds it now
    try:
        types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_name = 'jobs'").fetchall())
        total = con.execute("SELECT sum(gpus) FROM jobs WHERE state = 'COMPLETED'").fetchone()[0]
    finally:
        con.close()
    assert types["end_time"] == "TIMESTAMP" and types["gpus"] == "DOUBLE"
    assert total == 3.0  # jobs 1 (2 GPUs) and 8 (1 GPU)


# --- issue 8, item 8: a requeued job's earlier run keeps its GPU-hours -------------------------
# Fixtures from the rig (2026-12-01): `sbatch --gres=gpu:h100:2 --time=60 --time-min=30`, running
# from 06:49:39, `scontrol requeue 1` at 06:49:51, running again from 06:50:05. With -D sacct shows
# both runs (REQUEUED 06:49:39..06:49:51, then RUNNING; Slurm reset Submit to 06:49:51); without
# it only the latest run.

REQUEUE_NOW = datetime(2026, 12, 1, 6, 51, 5)


def _runs(con):
    return con.execute("SELECT job_id, scheduler_job, state, start_time, end_time, gpus FROM jobs "
                       "ORDER BY start_time").fetchall()


@pytest.mark.slow
def test_sacct_duplicates_keep_each_run(warehouse_file):
    batch = parse_parsable(fixture_text("sacct-parsable2-requeued.txt"), origin="requeued.txt", now=REQUEUE_NOW)
    assert batch.jobs["job_id"].to_list() == ["1@2026-12-01T06:49:39", "1"]
    assert batch.jobs["scheduler_job"].to_list() == ["1", "1"]
    as_json = parse_json(fixture_text("sacct-requeued.json"), origin="requeued.json", now=REQUEUE_NOW)
    assert sorted(as_json.jobs["job_id"].to_list()) == ["1", "1@2026-12-01T06:49:39"]
    with warehouse.open_writer(warehouse_file) as con:
        write_batch(con, batch)
        runs = _runs(con)
    # Run 1: 12 s on 2 GPUs; run 2 still running. Today the second line overwrites the first.
    assert [(r[0], r[2], r[4]) for r in runs] == [
        ("1@2026-12-01T06:49:39", "REQUEUED", datetime(2026, 12, 1, 6, 49, 51)),
        ("1", "RUNNING", None),
    ]


@pytest.mark.slow
def test_an_export_without_duplicates_does_not_erase_the_earlier_run(warehouse_file):
    # First import while run 1 ran: the REQUEUED line as it read then (RUNNING, End Unknown).
    header, run1, _run2 = fixture_text("sacct-parsable2-requeued.txt").splitlines()
    running = run1.replace("|2026-12-01T06:49:51|REQUEUED|", "|Unknown|RUNNING|")
    with warehouse.open_writer(warehouse_file) as con:
        write_batch(con, parse_parsable(f"{header}\n{running}\n", origin="first.txt",
                                        now=datetime(2026, 12, 1, 6, 49, 45)))
        # Then an export made without -D: only run 2 (Submit reset to the requeue time, 06:49:51).
        write_batch(con, parse_parsable(fixture_text("sacct-parsable2-requeued-latest-only.txt"),
                                        origin="latest.txt", now=REQUEUE_NOW))
        runs = _runs(con)
        # Reading again with -D changes nothing: the earlier run already has its own row.
        write_batch(con, parse_parsable(fixture_text("sacct-parsable2-requeued.txt"), origin="d.txt",
                                        now=REQUEUE_NOW))
        assert _runs(con) == runs
    # Run 1 kept, ended at the requeue (the new Submit): 06:49:39..06:49:51 on 2 GPUs = 12 s × 2.
    assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in runs] == [
        ("1@2026-12-01T06:49:39", "1", "REQUEUED", datetime(2026, 12, 1, 6, 49, 39),
         datetime(2026, 12, 1, 6, 49, 51), 2.0),
        ("1", "1", "RUNNING", datetime(2026, 12, 1, 6, 50, 5), None, 2.0),
    ]


def test_time_min_is_the_minimum_runtime():
    text = ("JobID|Account|State|AllocTRES|Cluster|TimeMin\n"
            "7|proj-a|RUNNING|gres/gpu=1|c|00:30:00\n8|proj-a|RUNNING|gres/gpu=1|c|1-02:00:00\n"
            "9|proj-a|RUNNING|gres/gpu=1|c|45\n10|proj-a|RUNNING|gres/gpu=1|c|\n")
    batch = parse_parsable(text, origin="t")
    # 30 min = 1800 s; 1 day 2 h = 93,600 s; "45" is minutes = 2,700 s; empty = none.
    assert batch.jobs["min_runtime_s"].to_list() == [1800, 93_600, 2700, None]
