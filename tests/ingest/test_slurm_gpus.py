"""Which GPUs a Slurm job held, from the scheduler side (issue 20, part 1): the prolog/epilog pair
in deploy/slurm/ runs for real jobs on the real rig (scripts/slurm-rig.sh, 8 fake H100s from
gres.conf), `ingest slurm-gpus` reads its spool idempotently, and the scontrol poller sees the
same indices. The prolog's UUID lookup is tried with a stand-in nvidia-smi and with a real HTTP
dcgm-exporter page."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.ingest.holdings.slurm_scontrol import parse_text
from gpuledger.ingest.holdings.slurm_spool import read_spool
from tests.ingest.test_slurm import _ingest_live, _slurm, _wait_for_states, slurm_rig  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
HOLDINGS = REPO / "deploy" / "slurm" / "gpuledger-holdings.sh"
NODE = socket.gethostname().split(".")[0].lower()


def _ingest(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", "ingest", "slurm-gpus", *args],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False)


def _register_rig_gpus(path: Path) -> dict[int, str]:
    """The rig's 8 GPUs in the inventory as DCGM would name them (host, `gpu` index, UUID)."""
    uuids = {i: f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(8)}
    with warehouse.open_writer(path) as con:
        warehouse.register_gpus(con, pl.DataFrame({
            "cluster": ["gpuledger"] * 8, "gpu_uuid": list(uuids.values()), "host": [NODE] * 8,
            "gpu_index": list(range(8)), "model": ["H100"] * 8,
        }))
    return uuids


def _allocations(path: Path) -> pl.DataFrame:
    with warehouse.open_reader(path) as con:
        return con.sql("SELECT a.job_id, g.gpu_index, g.gpu_uuid, a.start_time, a.end_time, a.gpu_fraction, "
                       "a.source FROM job_allocations a JOIN gpus g USING (gpu_id) "
                       "ORDER BY a.job_id, g.gpu_index").pl()


@pytest.mark.slow
@pytest.mark.slurm
def test_the_prolog_records_a_real_jobs_gpus_and_they_land(slurm_rig, warehouse_file, tmp_path):
    rig = slurm_rig
    spool = rig["dir"] / "gpu-spool"
    uuids = _register_rig_gpus(warehouse_file)
    seen = tmp_path / "seen"
    seen.mkdir(mode=0o777)
    sbatch = ["sbatch", "--parsable", "--output=/dev/null", "--gres=gpu:h100:2"]
    # Each job writes the CUDA_VISIBLE_DEVICES Slurm gave it: the truth the spool must match.
    short = _slurm(rig, *sbatch, "--account=proj-a", "--wrap", f"echo $CUDA_VISIBLE_DEVICES > {seen}/short; sleep 1")
    long = _slurm(rig, *sbatch, "--account=proj-b", "--wrap", f"echo $CUDA_VISIBLE_DEVICES > {seen}/long; sleep 300")
    _wait_for_states(rig, {short: "COMPLETED", long: "RUNNING"})
    _ingest_live(rig, warehouse_file)  # the job records (sacct)
    deadline = time.monotonic() + 30
    while not (seen / "long").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    given = {job: [int(i) for i in (seen / name).read_text().strip().split(",")]
             for job, name in ((short, "short"), (long, "long"))}

    first = _ingest("--spool", str(spool), "-w", str(warehouse_file), env=rig["env"])
    assert first.returncode == 0, first.stderr
    assert "4 GPU holdings" in first.stderr and "4 job x device intervals linked" in first.stderr
    alloc = _allocations(warehouse_file)
    for job in (short, long):
        rows = alloc.filter(pl.col("job_id") == job)
        assert rows["gpu_index"].to_list() == given[job]
        assert rows["gpu_uuid"].to_list() == [uuids[i] for i in given[job]]
        assert set(rows["source"]) == {"slurm-prolog"}
    assert alloc.filter(pl.col("job_id") == short)["end_time"].is_not_null().all()  # the epilog ran
    assert alloc.filter(pl.col("job_id") == long)["end_time"].is_null().all()       # still held

    # Idempotent: the same spool again changes nothing.
    again = _ingest("--spool", str(spool), "-w", str(warehouse_file), env=rig["env"])
    assert again.returncode == 0, again.stderr
    assert _allocations(warehouse_file).equals(alloc)

    # The poller sees the running job on the same indices.
    text = _slurm(rig, "scontrol", "-d", "-o", "show", "job", long)
    polled = parse_text(text, cluster="gpuledger", now=datetime.now(UTC).replace(tzinfo=None))
    assert sorted(r["gpu_index"] for r in polled) == given[long] and {r["host"] for r in polled} == {NODE}

    # The JSON poller sees the same: on this 22.05 scontrol has no --json, so `--scontrol --json`
    # asks squeue --json (the same job documents) and says nothing of it.
    polled_json = _ingest("--scontrol", "--json", "--cluster", "gpuledger", "-w", str(tmp_path / "json.duckdb"),
                          env=rig["env"])
    assert polled_json.returncode == 0, polled_json.stderr
    with warehouse.open_reader(tmp_path / "json.duckdb") as con:
        held = con.execute("SELECT host, gpu_index FROM device_holdings WHERE scheduler_job = ? ORDER BY gpu_index",
                           [long]).fetchall()
    assert held == [(NODE, i) for i in given[long]]

    # The job ends: the epilog's record closes its holding.
    _slurm(rig, "scancel", long)
    _wait_for_states(rig, {long: "CANCELLED"})
    deadline = time.monotonic() + 30
    while not list(spool.glob(f"{long}.*.end")) and time.monotonic() < deadline:
        time.sleep(0.2)
    _ingest_live(rig, warehouse_file)
    done = _ingest("--spool", str(spool), "-w", str(warehouse_file), env=rig["env"])
    assert done.returncode == 0, done.stderr
    ended = _allocations(warehouse_file).filter(pl.col("job_id") == long)
    assert ended["end_time"].is_not_null().all() and ended.height == 2


def _run_holdings(tmp_path: Path, event: str, env: dict) -> Path:
    spool = tmp_path / "spool"
    base = {"PATH": "/usr/bin:/bin", "GPULEDGER_GPU_SPOOL": str(spool), "GPULEDGER_SLURM_GPUS_ENV": "/dev/null",
            "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "Node-7.example", "SLURM_CLUSTER_NAME": "c1"}
    done = subprocess.run(["sh", str(HOLDINGS), event], env={**base, **env}, capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return spool


def test_the_prolog_asks_nvidia_smi_for_the_uuids(tmp_path):
    # A stand-in for the driver's nvidia-smi, printing what `--query-gpu=index,uuid` prints.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0, GPU-aaaa\\n1, GPU-bbbb\\n2, GPU-cccc\\n'\n")
    smi.chmod(0o755)
    spool = _run_holdings(tmp_path, "start", {"SLURM_JOB_GPUS": "2,0", "GPULEDGER_NVIDIA_SMI": str(smi)})
    read = read_spool(spool)
    assert not read.quarantined
    got = {(r["gpu_index"], r["gpu_uuid"], r["host"], r["ended"]) for r in read.holdings}
    assert got == {(2, "GPU-cccc", "node-7", False), (0, "GPU-aaaa", "node-7", False)}


def test_without_a_driver_the_prolog_reads_the_nodes_dcgm_labels(tmp_path):
    page = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-d0",pci_bus_id="00000000:01:00.0",Hostname="n7"} 5\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-d1",pci_bus_id="00000000:02:00.0",Hostname="n7"} 0\n')

    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self):
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        spool = _run_holdings(tmp_path, "start", {"SLURM_JOB_GPUS": "1", "GPULEDGER_DCGM_URL": url,
                                                  "GPULEDGER_NVIDIA_SMI": str(tmp_path / "absent")})
    finally:
        server.shutdown()
    assert [(r["gpu_index"], r["gpu_uuid"]) for r in read_spool(spool).holdings] == [(1, "GPU-d1")]
    assert "uuid_source\tdcgm" in next(spool.glob("*.start")).read_text()


def _dcgm_exporter(page: str) -> ThreadingHTTPServer:
    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self):
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_failing_nvidia_smi_falls_back_to_the_dcgm_labels(tmp_path):
    # nvidia-smi is there but fails as it does on a driver/library version mismatch (exit 18,
    # its complaint on stdout): the dcgm-exporter page is asked instead, and the log says so
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18\n")
    smi.chmod(0o755)
    server = _dcgm_exporter('DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-d3",Hostname="n7"} 5\n')
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        env = {"PATH": "/usr/bin:/bin", "GPULEDGER_GPU_SPOOL": str(tmp_path / "spool"),
               "GPULEDGER_SLURM_GPUS_ENV": "/dev/null", "SLURM_JOB_ID": "78", "SLURMD_NODENAME": "n7", "SLURM_CLUSTER_NAME": "c1",
               "SLURM_JOB_GPUS": "3", "GPULEDGER_NVIDIA_SMI": str(smi), "GPULEDGER_DCGM_URL": url}
        done = subprocess.run(["sh", str(HOLDINGS), "start"], env=env, capture_output=True, text=True, timeout=30)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    assert f"{smi} failed or printed no index,uuid lines; trying the dcgm-exporter page" in done.stderr
    spool = tmp_path / "spool"
    assert [(r["gpu_index"], r["gpu_uuid"]) for r in read_spool(spool).holdings] == [(3, "GPU-d3")]
    assert "uuid_source\tdcgm" in next(spool.glob("*.start")).read_text()


def test_the_env_file_is_read_as_key_value_lines_never_sourced(tmp_path):
    """A typo in the optional settings file used to make the prolog exit 2 (Slurm drains the
    node): each bad line is now logged and skipped, the good lines beside it still apply, and
    nothing in it runs."""
    spool = tmp_path / "from-the-file"
    pwned = tmp_path / "pwned"
    conf = tmp_path / "slurm-gpus.env"
    conf.write_text("# gpuledger Slurm settings\n"
                    f"GPULEDGER_GPU_SPOOL=\"{spool}\"\n"
                    "GPULEDGER_NVIDIA_SMI /usr/bin/nvidia-smi\n"      # line 3: the typo (no =)
                    f"$(touch {pwned})\n"                              # line 4: would run if sourced
                    "GPULEDGER_DCGM_URL='http://127.0.0.1:9/metrics\n"   # an unterminated quote: kept as written
                    f"PATH=/nowhere; touch {pwned}\n")                 # line 6: not a gpuledger setting
    done = subprocess.run(["sh", str(HOLDINGS), "start"], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "GPULEDGER_SLURM_GPUS_ENV": str(conf), "SLURM_JOB_ID": "79", "SLURM_CLUSTER_NAME": "c1",
                               "SLURMD_NODENAME": "n7", "SLURM_JOB_GPUS": "GPU-u1",
                               "GPULEDGER_NVIDIA_SMI": str(tmp_path / "absent")})
    assert done.returncode == 0, done.stderr
    assert f"{conf} line 3: not KEY=value, skipped" in done.stderr
    assert f"{conf} line 4: not KEY=value, skipped" in done.stderr
    assert f"{conf} line 6: unknown setting 'PATH', skipped" in done.stderr
    assert not pwned.exists()
    # the good line applied: the record went to the file's spool, with the UUID the job was given
    assert [r["gpu_uuid"] for r in read_spool(spool).holdings] == ["GPU-u1"]


def test_a_prolog_that_cannot_write_still_exits_0(tmp_path):
    # Slurm drains a node whose prolog fails: the recorder reports and never fails the job.
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = subprocess.run(["sh", str(HOLDINGS), "start"], capture_output=True, text=True, timeout=30, check=False,
                          env={"PATH": "/usr/bin:/bin", "GPULEDGER_GPU_SPOOL": str(blocker / "spool"),
                               "GPULEDGER_SLURM_GPUS_ENV": "/dev/null", "SLURM_JOB_ID": "5", "SLURM_JOB_GPUS": "0"})
    assert done.returncode == 0 and "not recorded" in done.stderr


@pytest.mark.slow
def test_bad_spool_files_are_quarantined_and_rereading_adds_nothing(tmp_path, warehouse_file):
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "9.n1.1796040000.start").write_text(
        "format\tgpuledger-slurm-gpus/1\nevent\tstart\njob_id\t9\ncluster\tc1\nnode\tn1\ntime\t1796040000\n"
        "gpu\t0\tGPU-x0\n")
    (spool / "9.n1.1796043600.end").write_text(
        "format\tgpuledger-slurm-gpus/1\nevent\tend\njob_id\t9\ncluster\tc1\nnode\tn1\ntime\t1796043600\n")
    (spool / "10.n1.1796040000.start").write_text("format\tgpuledger-slurm-gpus/1\nevent\tstart\njob_id\t10\n")
    (spool / "11.n1.1796040000.end").write_text(
        "format\tgpuledger-slurm-gpus/1\nevent\tend\njob_id\t11\ncluster\tc1\nnode\tn1\ntime\t1796040000\n")
    (spool / ".incoming.abc").write_text("half")
    for _ in range(2):
        done = _ingest("--spool", str(spool), "-w", str(warehouse_file))
        assert done.returncode == 0, done.stderr
    with warehouse.open_reader(warehouse_file) as con:
        held = con.execute("SELECT scheduler_job, device_id, first_seen, last_seen, ended FROM device_holdings").fetchall()
        bad = con.execute("SELECT location, reason FROM quarantine WHERE source = 'slurm-gpus' ORDER BY location").fetchall()
    # 2026-11-30 12:00 to 13:00 UTC (epoch 1796040000 + 3600)
    assert held == [("9", "GPU-x0", datetime(2026, 11, 30, 12), datetime(2026, 11, 30, 13), True)]
    assert [Path(loc).name for loc, _ in bad] == ["10.n1.1796040000.start", "11.n1.1796040000.end"]
    assert "missing node" in bad[0][1] and "without its start" in bad[1][1]
    assert "2 files or records quarantined" in done.stderr


def test_a_spool_of_many_files_and_a_huge_stray_one_is_read_a_file_at_a_time(tmp_path):
    # 3,000 jobs' start / end pairs beside a 1 GiB file named like an event (sparse: no disk used):
    # every pair lands, and the stray file is one quarantine row read no further than its limit
    from gpuledger.ingest.holdings import slurm_spool

    spool = tmp_path / "spool"
    spool.mkdir()
    head = "format\tgpuledger-slurm-gpus/1\ncluster\tc1\nnode\tn1\n"
    for job in range(3000):
        (spool / f"{job}.n1.1796040000.start").write_text(f"{head}event\tstart\njob_id\t{job}\ntime\t1796040000\n"
                                                          f"gpu\t{job % 8}\tGPU-x{job % 8}\n")
        (spool / f"{job}.n1.1796043600.end").write_text(f"{head}event\tend\njob_id\t{job}\ntime\t1796043600\n")
    with open(spool / "99999.n1.1796040000.start", "wb") as huge:
        huge.truncate(1 << 30)
    read = slurm_spool.read_spool(spool)
    assert read.files == 6001 and len(read.holdings) == 3000
    assert all(h["ended"] and h["last_seen"] == datetime(2026, 11, 30, 13) for h in read.holdings)
    [bad] = read.quarantined
    assert bad.location.endswith("99999.n1.1796040000.start") and "larger than 64 KiB" in bad.reason
    assert len(bad.raw_text) == 4000  # its head only


def test_a_node_spool_file_past_its_limit_is_refused_unread(tmp_path):
    from gpuledger.ingest.holdings import node_spool

    spool = tmp_path / "node-spool"
    spool.mkdir()
    with open(spool / "c1.n7.json", "wb") as huge:
        huge.truncate(node_spool.MAX_NODE_FILE_BYTES + 1)
    read = node_spool.read_node_spool(spool)
    assert read.files == 1 and read.holdings == []
    [bad] = read.quarantined
    assert "larger than 32 MiB: not a node agent's file" in bad.reason and len(bad.raw_text) == 4000


# --- scontrol's JSON form ---------------------------------------------------------------------
# Slurm 23.02+ (data_parser v0.0.39): tests/fixtures/slurm/scontrol-show-job-23.02.json is written
# to the shape `scontrol -d show job --json` prints there (state lists, {"set", "infinite",
# "number"} times, one gres_detail string per node of `nodes`), from Slurm's documented v0.0.39
# job fields (this machine has no 23.02 to capture it from). On the rig's Slurm 22.05
# scontrol has no --json; its squeue --json prints the same job documents (data_parser v0.0.38:
# state a string, times plain epochs): tests/fixtures/slurm/squeue-json-22.05-rig.json is one,
# captured from the rig (`squeue --json`, one running `sbatch --gres=gpu:h100:2` job), and the rig
# test above polls it live through `ingest slurm-gpus --scontrol --json`.

SCONTROL_JSON = REPO / "tests" / "fixtures" / "slurm" / "scontrol-show-job-23.02.json"


def _epoch(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def test_scontrol_json_of_slurm_23_gives_each_nodes_indices():
    from gpuledger.ingest.holdings.slurm_scontrol import parse_json

    now = _epoch(1796097600)
    rows = parse_json(SCONTROL_JSON.read_text(), cluster="ignored", now=now)
    got = sorted((r["scheduler_job"], r["host"], r["gpu_index"], r["first_seen"], r["last_seen"], r["ended"])
                 for r in rows)
    start, a100, array = _epoch(1796090400), _epoch(1796094000), (_epoch(1796086800), _epoch(1796088600))
    assert got == sorted(
        # 4242 runs on two nodes: gres_detail[0] is gpu01's 0-3, [1] gpu02's 4-7; seen until now
        [("4242", "gpu01", i, start, now, False) for i in range(4)]
        + [("4242", "gpu02", i, start, now, False) for i in range(4, 8)]
        # 4243 (RUNNING + COMPLETING flag): both GPU types of one node, 0 and 2 then 4; mps is no GPU
        + [("4243", "gpu07", i, a100, now, False) for i in (0, 2, 4)]
        # the array task 4244_6 is its own job id 4250 (as sacct names it), over: start to end
        + [("4250", "gpu03", 5, *array, True)])
    # 4251 is pending (no node, start 0) and 4252 holds no GPU (gpu:0(IDX:)): no rows
    assert {r["cluster"] for r in rows} == {"hopper"}  # each job's own cluster field wins


@pytest.mark.slow
def test_scontrol_json_errors_are_one_clear_line(tmp_path):
    from gpuledger.ingest.holdings.slurm_scontrol import ScontrolError, parse_json

    now = _epoch(1796097600)
    with pytest.raises(ScontrolError, match=r"reported 1 error\(s\): Unable to contact slurm controller"):
        parse_json('{"jobs": [], "errors": [{"error": "Unable to contact slurm controller", "error_number": 1007}]}',
                   cluster="c", now=now)
    with pytest.raises(ScontrolError, match=r"jobs\[0\] has no job_id"):
        parse_json('{"jobs": [{"nodes": "n1"}]}', cluster="c", now=now)
    bad = tmp_path / "scontrol.json"
    bad.write_text('{"jobs": {"oops": 1}}')
    done = _ingest("--scontrol-file", str(bad), "--cluster", "c", "-w", str(tmp_path / "w.duckdb"))
    assert done.returncode == 2 and "not scontrol --json output" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_scontrol_json_file_lands_through_the_cli(tmp_path):
    done = _ingest("--scontrol-file", str(SCONTROL_JSON), "--cluster", "hopper", "-w", str(tmp_path / "w.duckdb"))
    assert done.returncode == 0, done.stderr
    assert f"12 GPU holdings from {SCONTROL_JSON}" in done.stderr
    with warehouse.open_reader(tmp_path / "w.duckdb") as con:
        assert con.execute("SELECT count(*), count(DISTINCT scheduler_job) FROM device_holdings "
                           "WHERE source = 'slurm-scontrol'").fetchone() == (12, 3)


def test_the_rigs_captured_22_05_json_reads_the_same():
    from gpuledger.ingest.holdings.slurm_scontrol import parse_json

    doc = REPO / "tests" / "fixtures" / "slurm" / "squeue-json-22.05-rig.json"
    now = _epoch(1796173400)
    rows = parse_json(doc.read_text(), cluster="ignored", now=now)
    # job 1 RUNNING on node vm since 1796173271 with gres_detail gpu:h100:2(IDX:0-1)
    assert sorted((r["scheduler_job"], r["host"], r["gpu_index"], r["first_seen"], r["last_seen"], r["ended"],
                   r["cluster"]) for r in rows) == [("1", "vm", i, _epoch(1796173271), now, False, "gpuledger")
                                                    for i in (0, 1)]
