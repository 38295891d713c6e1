"""A user's mistake or a broken environment ends in one line that names the file / field / option
and the fix, exit 2 for a usage error and 1 for a failed run; never a Python traceback.

Every case runs the real program (``python -m gpuledger.cli``) as a subprocess against real files
in a temporary folder. The corpus runs concurrently in one fixture (a few interpreters at a time)
and each case is then asserted on its own. Sources that answer wrongly are real HTTP servers on
loopback (``http.server`` threads)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import orjson
import pytest

from gpuledger.config import example_config_text

BOX = re.compile(r"[\u2500-\u257f]")  # rich's panel borders, around typer's usage errors


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """stderr as one line of words: rich wraps typer's usage errors inside a bordered box."""
        return " ".join(BOX.sub(" ", self.stderr).split())


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    return {**env, "COLUMNS": "200", **extra}


def run_cli(args: list[str], cwd: Path, timeout: float = 120, **env: str) -> Ran:
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=_env(**env))
    return Ran(done.returncode, done.stdout, done.stderr)


# --- the corpus -----------------------------------------------------------------------------------
# (id, arguments with {placeholders} from the `place` fixture, exit code, words stderr must hold)
CASES = [
    # config files: impossible date (the field named), a directory, binary, broken YAML (line:column)
    ("config-impossible-date", ["config", "check", "-c", "{baddate}"], 2, ["budgets.0.start", "day value"]),
    ("config-directory", ["config", "check", "-c", "{folder}"], 2, ["is a directory", "--config FILE"]),
    ("config-binary", ["config", "check", "-c", "{binary}"], 2, ["not a YAML text file"]),
    ("config-bad-yaml", ["config", "check", "-c", "{badyaml}"], 2, ["badyaml.yaml:2:", "not valid YAML"]),
    ("config-empty", ["config", "check", "-c", "{empty}"], 2, ["expected a mapping"]),
    ("simulate-bad-config", ["simulate", "warehouse", "--gpus", "8", "--days", "0.01", "-c", "{baddate}",
                             "-w", "{tmp}/never.duckdb"], 2, ["budgets.0.start"]),
    # warehouse paths: /dev/null, a directory, an unwritable place, under a file, missing
    ("warehouse-dev-null-writer", ["warehouse", "migrate", "-w", "/dev/null"], 2, ["/dev/null is not a regular file", "--warehouse"]),
    ("warehouse-dev-null-reader", ["warehouse", "summary", "-w", "/dev/null"], 2, ["/dev/null is not a regular file"]),
    ("warehouse-directory-writer", ["warehouse", "migrate", "-w", "{folder}"], 2, ["is a directory", "--warehouse"]),
    ("warehouse-directory-reader", ["warehouse", "summary", "-w", "{folder}"], 2, ["is a directory"]),
    ("warehouse-read-only-dir", ["warehouse", "migrate", "-w", "{read_only}/gpuledger.duckdb"], 2, ["cannot write in", "--warehouse"]),
    ("warehouse-missing-dir-unmakeable", ["warehouse", "migrate", "-w", "{file_parent}/sub/x.duckdb"], 2, ["is a file", "--warehouse"]),
    ("warehouse-missing-reader", ["warehouse", "summary", "-w", "{tmp}/nowhere/x.duckdb"], 2, ["no warehouse at", "--warehouse"]),
    ("import-into-directory", ["ingest", "jobs-csv", "{jobs_ok}", "-w", "{folder}"], 2, ["is a directory"]),
    # --out into a missing directory / a directory, for every command with --out
    ("out-chargeback", ["report", "chargeback", "-p", "2026-11", "-f", "csv", "-o", "{tmp}/missing/x.csv",
                        "-w", "{wh}"], 2, ["--out", "does not exist"]),
    ("out-usage", ["report", "usage", "--start", "2026-11-01", "--end", "2026-11-02", "-f", "json",
                   "-o", "{tmp}/missing/x.json", "-w", "{wh}"], 2, ["--out", "does not exist"]),
    ("out-utilization", ["report", "utilization", "-f", "parquet", "-o", "{tmp}/missing/x.parquet",
                         "-w", "{wh}"], 2, ["--out", "does not exist"]),
    ("out-fairshare", ["report", "fairshare", "-f", "csv", "-o", "{folder}", "-w", "{wh}"], 2, ["--out", "is a directory"]),
    ("out-budget", ["report", "budget", "-o", "{tmp}/missing/b.txt", "-w", "{wh}"], 2, ["--out", "does not exist"]),
    ("out-squatters", ["report", "squatters", "-f", "csv", "-o", "{tmp}/missing/s.csv", "-w", "{wh}"], 2, ["--out"]),
    ("out-openmetrics", ["simulate", "openmetrics", "--gpus", "8", "--hours", "0.01",
                         "--out", "{tmp}/missing/x.om"], 2, ["--out", "does not exist"]),
    # bad values, bad periods, start after end (every command that takes a range)
    ("quarantine-negative-limit", ["warehouse", "quarantine", "--limit", "-1", "-w", "{wh}"], 2, ["--limit"]),
    ("period-month-13", ["report", "chargeback", "--period", "2026-13", "-w", "{wh}"], 2, ["--period", "01..12"]),
    ("period-impossible-day", ["report", "chargeback", "--period", "2026-02-30", "-w", "{wh}"], 2,
     ["--period", "2026-02-30", "YYYY-MM"]),
    ("period-week-60", ["report", "chargeback", "--period", "2026-W60", "-w", "{wh}"], 2, ["--period", "week"]),
    ("period-end-before-start", ["report", "chargeback", "--period", "2026-11-05..2026-11-01", "-w", "{wh}"], 2,
     ["--period", "end must come after the start"]),
    ("chargeback-bad-level", ["report", "chargeback", "-p", "2026-11", "--level", "team", "-w", "{wh}"], 2,
     ["--level", "job, project, node"]),
    ("usage-end-before-start", ["report", "usage", "--start", "2026-11-02", "--end", "2026-11-01", "-w", "{wh}"],
     2, ["--end", "is not after --start"]),
    ("usage-bad-by", ["report", "usage", "--start", "2026-11-01", "--end", "2026-11-02", "--by", "team",
                      "-w", "{wh}"], 2, ["--by", "job, user, project, node"]),
    ("usage-bad-time", ["report", "usage", "--start", "yesterday", "--end", "2026-11-02", "-w", "{wh}"], 2,
     ["--start", "ISO-8601"]),
    ("utilization-end-before-start", ["report", "utilization", "--start", "2026-11-02", "--end", "2026-11-01",
                                      "-w", "{wh}"], 2, ["--end", "is not after --start"]),
    ("utilization-start-after-data", ["report", "utilization", "--start", "2027-01-01", "-w", "{wh}"], 2,
     ["--end", "is not after --start"]),
    ("fairshare-bad-now", ["report", "fairshare", "--now", "soon", "-w", "{wh}"], 2, ["--now"]),
    ("link-devices-end-before-start", ["ingest", "link-devices", "--start", "2026-11-02", "--end", "2026-11-01",
                                       "-w", "{wh}"], 2, ["--end", "is not after --start"]),
    ("prometheus-end-before-start", ["ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start",
                                     "2026-11-02", "--end", "2026-11-01", "-w", "{tmp}/p.duckdb"], 2,
     ["--end", "is not after --start"]),
    ("prometheus-zero-step", ["ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start", "2026-11-01",
                              "--end", "2026-11-02", "--step", "0", "-w", "{tmp}/p.duckdb"], 2, ["--step"]),
    ("prometheus-zero-chunk", ["ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start", "2026-11-01",
                               "--end", "2026-11-02", "--chunk", "0s", "-w", "{tmp}/p.duckdb"], 2, ["--chunk"]),
    ("prometheus-url-without-scheme", ["ingest", "prometheus", "--url", "prometheus:9090", "--start",
                                       "2026-11-01", "--end", "2026-11-02", "--progress", "none",
                                       "-w", "{tmp}/p.duckdb"], 2, ["--url", "http://HOST:9090"]),
    ("scrape-negative-timeout", ["ingest", "scrape", "http://127.0.0.1:9/metrics", "--timeout", "-1",
                                 "-w", "{tmp}/s.duckdb"], 2, ["--timeout"]),
    ("simulate-impossible-start", ["simulate", "warehouse", "--gpus", "8", "--start", "2026-02-30",
                                   "-w", "{tmp}/never.duckdb"], 2, ["--start", "2026-02-30"]),
    # job files: empty, binary; the CSV field over the csv module's limit is the test below
    ("import-empty-csv", ["ingest", "jobs-csv", "{empty}", "-w", "{tmp}/j.duckdb"], 2, ["empty", "header lacks"]),
    ("import-binary-csv", ["ingest", "jobs-csv", "{binary}", "-w", "{tmp}/j.duckdb"], 2, ["not UTF-8 text"]),
    ("kubernetes-binary-kubeconfig", ["ingest", "kubernetes", "--kubeconfig", "{binary}", "-w", "{tmp}/k.duckdb"],
     2, ["cannot load the kubeconfig", "--kubeconfig"]),
    ("kubernetes-binary-namespace-map", ["ingest", "kubernetes", "--namespace-map", "{binary}",
                                         "-w", "{tmp}/k.duckdb"], 2, ["--namespace-map", "YAML file"]),
    ("slurm-no-sacct", ["ingest", "slurm", "--live", "--sacct", "{tmp}/no-such-sacct", "-w", "{tmp}/j.duckdb"], 1,
     ["not found", "slurm-client"]),
    # ports: out of range, past the last port, busy, an address that is not this host's
    ("serve-port-out-of-range", ["simulate", "serve", "--gpus", "8", "--port", "70000"], 2, ["--port", "65535"]),
    ("serve-ports-past-65535", ["simulate", "serve", "--gpus", "16", "--port", "65535"], 2,
     ["--port", "65535..65536"]),
    ("serve-busy-port", ["simulate", "serve", "--gpus", "8", "--port", "{busy_port}"], 1,
     ["already in use", "--port"]),
    ("serve-negative-days", ["simulate", "serve", "--gpus", "8", "--days", "-3"], 2, ["--days"]),
    ("serve-foreign-address", ["simulate", "serve", "--gpus", "8", "--port", "0", "--address", "192.0.2.1"], 2,
     ["--address", "not an address of this host"]),
]


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """Real files for the corpus, a small simulated warehouse, and a port someone else holds."""
    tmp = tmp_path_factory.mktemp("cli-errors")
    (tmp / "folder").mkdir()
    (tmp / "baddate.yaml").write_text(
        "currency: USD\norg: {name: acme, children: [{name: vision}]}\n"
        "budgets:\n  - {node: vision, gpu_hours: 10, start: 2026-02-30, end: 2026-03-05}\n")
    (tmp / "badyaml.yaml").write_text("org: {name: acme\n  children: [\n")
    (tmp / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (tmp / "empty.txt").write_text("")
    (tmp / "a-file").write_text("not a directory\n")
    (tmp / "jobs.csv").write_text(_JOBS_HEADER + "j1,c1,vision-gen,ana,H100,1,2026-11-01T00:00:00Z,"
                                  "2026-11-01T01:00:00Z\n")
    if os.geteuid() == 0:
        read_only = Path("/sys")  # root writes through file modes; sysfs refuses even root
    else:
        read_only = tmp / "read-only"
        read_only.mkdir()
        read_only.chmod(0o500)
    warehouse_file = tmp / "wh" / "gpuledger.duckdb"
    made = run_cli(["simulate", "warehouse", "--gpus", "8", "--days", "0.1", "-w", str(warehouse_file)], tmp)
    assert made.code == 0, made.stderr
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    values = {"tmp": tmp, "folder": tmp / "folder", "baddate": tmp / "baddate.yaml",
              "badyaml": tmp / "badyaml.yaml", "binary": tmp / "binary.bin", "empty": tmp / "empty.txt",
              "file_parent": tmp / "a-file", "jobs_ok": tmp / "jobs.csv", "read_only": read_only,
              "wh": warehouse_file, "busy_port": busy.getsockname()[1]}
    yield {k: str(v) for k, v in values.items()}
    busy.close()


@pytest.fixture(scope="module")
def corpus(place, request):
    """Every selected case run once, four interpreters at a time (each is a real program start)."""
    wanted = {item.callspec.params["name"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_bad_invocation_ends_in_one_line_naming_the_fix"}

    def one(case):
        name, args, _, _ = case
        return name, run_cli([a.format(**place) for a in args], Path(place["tmp"]), timeout=90)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, [c for c in CASES if c[0] in wanted]))


@pytest.mark.slow  # ~50 program starts (about 15 s on two quiet cores, all in the `corpus` fixture)
@pytest.mark.parametrize("name,args,code,words", CASES, ids=[c[0] for c in CASES])
def test_bad_invocation_ends_in_one_line_naming_the_fix(corpus, name, args, code, words):
    ran = corpus[name]
    assert "Traceback" not in ran.stderr and "Traceback" not in ran.stdout, ran.stderr
    assert ran.code == code, (ran.code, ran.stderr)
    for word in words:
        assert word in ran.text, (word, ran.stderr)
    # One line, typer's own option errors included (no bordered box, no "Usage:" block): the
    # command, what is wrong, the fix. A config error may list several problems, one per line.
    lines = [line for line in ran.stderr.splitlines()
             if line.strip() and not line.startswith("the warehouse had no config")]  # a notice
    assert lines, ran.stderr
    assert not BOX.search(ran.stderr) and "Usage:" not in ran.stderr, ran.stderr
    assert "internal error" not in ran.stderr, ran.stderr
    if "problem(s) in the config" not in ran.stderr:
        assert len(lines) == 1, ran.stderr


def test_debug_shows_the_traceback_and_the_default_does_not(place):
    tmp = Path(place["tmp"])
    plain = run_cli(["warehouse", "migrate", "-w", "/dev/null"], tmp)
    assert plain.code == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.count("\n") == 1  # one line
    for ran in (run_cli(["--debug", "warehouse", "migrate", "-w", "/dev/null"], tmp),
                run_cli(["warehouse", "migrate", "-w", "/dev/null"], tmp, GPULEDGER_DEBUG="1")):
        assert ran.code != 0 and "Traceback" in ran.stderr and "WarehousePathError" in ran.stderr


def test_an_unexpected_error_is_one_internal_error_line(monkeypatch, capsys):
    # The boundary itself, in process: an exception nobody anticipated.
    from gpuledger import cli

    def broken(**_):
        raise KeyError("surprise")

    monkeypatch.setattr(cli, "app", broken)
    monkeypatch.delenv("GPULEDGER_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stop:
        cli.main()
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpuledger: internal error: KeyError: 'surprise'; rerun with --debug and report it"]


def test_a_file_the_environment_refuses_is_one_line_naming_it(monkeypatch, capsys):
    # e.g. the disk filling up while a report is written: no traceback, the file named
    from gpuledger import cli

    def full_disk(**_):
        raise OSError(28, "No space left on device", "reports/chargeback.csv")

    monkeypatch.setattr(cli, "app", full_disk)
    monkeypatch.delenv("GPULEDGER_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stop:
        cli.main()
    assert stop.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "gpuledger: reports/chargeback.csv: No space left on device; check the path, its permissions "
        "and the free disk space"]


# --- cases with their own set-up -----------------------------------------------------------------
_JOBS_HEADER = "job_id,cluster,project,user,gpu_model,gpus,start_time,end_time\n"


def test_a_csv_field_over_the_csv_limit_is_quarantined_and_the_rest_lands(place, tmp_path):
    # csv's default field limit is 131,072 characters; line 3 carries a 200,000-character user name.
    jobs = tmp_path / "jobs.csv"
    row = "{id},c1,vision-gen,{user},H100,1,2026-11-01T00:00:00Z,2026-11-01T02:00:00Z\n"
    jobs.write_text(_JOBS_HEADER + row.format(id="j1", user="ana") + row.format(id="j2", user="x" * 200_000)
                    + row.format(id="j3", user="bo"))
    warehouse_file = tmp_path / "w.duckdb"
    ran = run_cli(["ingest", "jobs-csv", str(jobs), "-w", str(warehouse_file)], tmp_path)
    assert ran.code == 0 and "Traceback" not in ran.stderr, ran.stderr
    assert "3 rows read, 2 jobs imported, 1 quarantined" in ran.text
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        assert con.execute("SELECT job_id FROM jobs ORDER BY job_id").fetchall() == [("j1",), ("j3",)]
        location, reason, raw = con.execute(
            "SELECT location, reason, raw_text FROM quarantine WHERE source = 'jobs-csv'").fetchone()
    assert location == f"{jobs}:3" and "field larger than field limit" in reason
    assert raw.startswith("j2,c1,vision-gen,xxx") and len(raw) < 5000  # kept, but not 200 kB of it


def test_quarantine_never_prints_raw_control_bytes(tmp_path):
    jobs = tmp_path / "jobs.csv"
    # ESC [31m would turn the terminal red; BEL rings it; [/x] would be rich markup
    jobs.write_text(_JOBS_HEADER + "j1,c1,no-such-project,\x1b[31m\x07[/x],H100,1,2026-11-01T00:00:00Z,\n"
                    "j2,c1,vision-gen,\x1b[2Jbo,H100,1,2026-11-01T00:00:00Z,\n")
    warehouse_file = tmp_path / "w.duckdb"
    imported = run_cli(["ingest", "jobs-csv", str(jobs), "-w", str(warehouse_file)], tmp_path)
    assert imported.code == 0, imported.stderr
    # a name with control characters is refused at the door, so no report table ever shows it
    assert "0 jobs imported, 2 quarantined" in imported.text
    assert "user_name: '\\x1b[2Jbo' holds control characters" in imported.text
    shown = run_cli(["warehouse", "quarantine", "-w", str(warehouse_file)], tmp_path, COLUMNS="250")
    assert shown.code == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "\\x1b[31m\\x07[/x]" in shown.stdout


@pytest.mark.slow
def test_a_gpu_model_missing_from_the_rate_card_is_no_traceback(tmp_path):
    # The simulated 8-GPU cluster is one H100 node; this rate card prices only B200.
    config = tmp_path / "no-h100.yaml"
    config.write_text("\n".join(line for line in example_config_text().splitlines()
                                if "gpu_model: H100" not in line) + "\n")
    warehouse_file = tmp_path / "w.duckdb"
    made = run_cli(["simulate", "warehouse", "--gpus", "8", "--days", "0.1", "-c", str(config),
                    "-w", str(warehouse_file)], tmp_path)
    assert made.code == 0, made.stderr
    ran = run_cli(["report", "chargeback", "-p", "2026-11", "-c", str(config), "-w", str(warehouse_file)],
                  tmp_path)
    assert "Traceback" not in ran.stderr and "internal error" not in ran.stderr, ran.stderr
    assert ran.code in (0, 1)


# --- sources that answer wrongly ------------------------------------------------------------------
T0 = 1_793_491_200  # 2026-11-01T00:00:00Z
SERIES = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "node-1", "UUID": "GPU-0001", "gpu": "0",
          "instance": "node-1:9400", "job": "dcgm", "modelName": "NVIDIA H100 80GB HBM3"}


class _FakeSource:
    """A loopback HTTP server whose answers are chosen by ``mode``:
    'html'   an HTML page for every path (a login portal, a Grafana, a typo'd URL),
    'vector' Prometheus' label values, but query_range answers with an instant vector,
    'good'   a real matrix: four samples of one GPU at T0, T0+30, T0+60, T0+90,
    'json'   JSON that is not Prometheus' envelope; 'no-dcgm' a Prometheus without DCGM series;
    'bad-values' a matrix whose points are not [time, "value"] pairs,
    'page'   /metrics as HTML ('page-binary': as text/plain full of NUL bytes)."""

    def __init__(self, mode: str):
        self.mode = mode
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                kind, body = outer.answer(self.path)
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str) -> tuple[str, bytes]:
        html = b"<!DOCTYPE html><html><body><h1>Sign in</h1>" + b"<p>portal</p>" * 50 + b"</body></html>"
        if self.mode in ("html", "page"):
            return "text/html; charset=utf-8", html
        if self.mode == "page-binary":
            return "text/plain; version=0.0.4", b"\x00\x01\x02GPU\xff\xfe" * 40
        if self.mode == "json":
            return "application/json", b'{"hello": "world"}'
        if path.startswith("/api/v1/label/__name__/values"):
            data = ["up"] if self.mode == "no-dcgm" else ["DCGM_FI_DEV_GPU_UTIL", "up"]
        elif self.mode == "bad-values":
            data = {"resultType": "matrix", "result": [{"metric": SERIES, "values": [["soon"], [T0]]}]}
        elif self.mode == "vector":
            data = {"resultType": "vector", "result": [{"metric": SERIES, "value": [T0, "50"]}]}
        else:
            data = {"resultType": "matrix",
                    "result": [{"metric": SERIES, "values": [[T0 + 30 * k, "50"] for k in range(4)]}]}
        return "application/json", orjson.dumps({"status": "success", "data": data})

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def source():
    made = []

    def start(mode):
        made.append(_FakeSource(mode))
        return made[-1]

    yield start
    for s in made:
        s.stop()


def _backfill(url: str, warehouse_file: Path, cwd: Path) -> Ran:
    return run_cli(["ingest", "prometheus", "--url", url, "--start", str(T0), "--end", str(T0 + 120),
                    "--workers", "1", "--progress", "none", "-w", str(warehouse_file)], cwd)


@pytest.mark.slow
@pytest.mark.parametrize("mode,says", [
    ("html", "answered HTTP 200 with an HTML page, not Prometheus' JSON API"),
    ("json", "not Prometheus' API envelope"),
    ("no-dcgm", "holds no DCGM series"),
    ("bad-values", "values are not [time, \"value\"] pairs"),
])
def test_backfill_from_a_source_that_answers_wrongly_says_so_and_records_nothing(source, tmp_path, mode, says):
    server = source(mode)
    warehouse_file = tmp_path / "w.duckdb"
    ran = _backfill(server.url, warehouse_file, tmp_path)
    assert ran.code == 1 and "Traceback" not in ran.stderr, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr  # one line: never the page itself
    assert says in lines[0] and ("--url" in lines[0] or "nothing was recorded" in lines[0]), lines[0]
    assert "<html" not in ran.stderr and "rerun the same command" not in ran.stderr
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM ingest_checkpoints").fetchone() == (0,)


@pytest.mark.slow
def test_a_result_that_is_not_a_matrix_is_an_error_and_the_range_is_not_checkpointed(source, tmp_path):
    warehouse_file = tmp_path / "w.duckdb"
    server = source("vector")
    ran = _backfill(server.url, warehouse_file, tmp_path)
    assert ran.code == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert "'vector' result, not a matrix" in ran.text and "nothing was recorded" in ran.text
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM ingest_checkpoints").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (0,)
    # The same range from a good source: nothing was recorded as done, so it is all fetched now.
    server.mode = "good"
    again = _backfill(server.url, warehouse_file, tmp_path)
    assert again.code == 0, again.stderr
    assert "1 chunks ingested, 0 already done, 4 new samples" in again.text
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (4,)
        assert con.execute("SELECT count(*) FROM ingest_checkpoints").fetchone() == (1,)


@pytest.mark.parametrize("mode,why", [("page", "Content-Type text/html"), ("page-binary", "NUL bytes")])
def test_a_scrape_page_that_is_not_exposition_text_fails_that_target(source, tmp_path, mode, why):
    server = source(mode)
    warehouse_file = tmp_path / "w.duckdb"
    ran = run_cli(["ingest", "scrape", f"{server.url}/metrics", "--retries", "0", "-w", str(warehouse_file)],
                  tmp_path)
    assert ran.code == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert "did not answer with Prometheus exposition text" in ran.text and why in ran.text
    assert "0 pages" in ran.text and "1 targets failed" in ran.text
    with duckdb.connect(str(warehouse_file), read_only=True) as con:
        # one row for the failed target, not one per line of the page
        assert con.execute("SELECT count(*) FROM quarantine").fetchone() == (1,)
