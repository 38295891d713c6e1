"""The hostile new user's corpus (issue 25), one table per class: each case is the real CLI as a
subprocess, against real loopback servers that accept and never answer, stall mid-body or trickle
(tests/helpers/hostile_servers.py), a closed port, a `scontrol` that hangs, or a file that cannot be
meant. Each asserts the exit code, the one line (and what it must not hold: library text, a
traceback) and that the warehouse is unchanged: a copy of one seeded warehouse per case with its
row counts compared (hangs, config), or, for a usage error, no warehouse file made at all (nothing
began). The cases of a class run a few at a time in one fixture; the tests read the results.

Not here, because they are not one command and one line: the signal tests (they talk to a running
process: tests/ingest/test_scrape_hostile.py, test_kubernetes_deadlines.py, tests/metrics,
tests/simulator), the backfill that stalls after its first chunk (the chunk before is kept:
test_prometheus_deadlines.py), and the data edges (tests/ingest/test_edges.py, in-process).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest

from gpuledger.errors import UsageError
from gpuledger.whatif.trace import inventory_from_file
from tests.helpers.configs import vision_nlp
from tests.helpers.hostile_servers import SILENT, STALL, T0, TRICKLE, HostileServer, prometheus_until

LIBRARY_TEXT = ("Traceback", "internal error", "MaxRetryError", "Retrying", "InvalidSchema", "No connection adapters",
                "urllib3", "HTTPConnectionPool")
SEED_CONFIG = """currency: USD
org:
  name: acme
  children:
    - {name: p, shares: 1}
rate_card:
  - {gpu_model: H100, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
policy:
  enforcement:
    dry_run: false
    scheduler_timeout_seconds: 1
"""


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # {silent} {stall} {trickle} {prom_stall} {prom_trickle} {gone} {kc_silent} {kc_gone} {kc_broken}
    code: int
    says: tuple[str, ...]  # words the one line holds (whitespace-normalised)
    lines: int = 1  # lines on stderr
    made_ok: bool = False  # (usage) the command may open the warehouse before it refuses
    seeded: bool = False  # (usage) needs a warehouse: runs on a seeded copy, its counts compared


def _prom(url: str, *extra: str) -> tuple[str, ...]:
    return ("ingest", "prometheus", "--url", url, "--start", str(T0), "--end", str(T0 + 120), "--step", "30s",
            "--chunk", "60s", "--workers", "1", "--progress", "none", "--read-timeout", "0.4",
            "--deadline", "1.2", *extra)


def _k8s(kubeconfig: str, *extra: str) -> tuple[str, ...]:
    return ("ingest", "kubernetes", "--kubeconfig", kubeconfig, "--read-timeout", "0.5", "--connect-timeout", "0.5",
            *extra)


# --- hangs: every call out ends within its deadline, exit 1, one line naming the endpoint ------------
HANGS = [
    Case("prometheus-silent", _prom("{silent}"), 1, ("{silent}/api/v1/label/__name__/values: no answer within 0.4 s",)),
    Case("prometheus-stall-mid-body", _prom("{prom_stall}"), 1,
         ("{prom_stall}/api/v1/query_range: the answer stalled", "rerun the same command")),
    Case("prometheus-trickle", _prom("{prom_trickle}"), 1, ("still arriving when the 1.2 s deadline passed",)),
    Case("kubernetes-silent", _k8s("{kc_silent}"), 1,
         (("gpuledger ingest kubernetes: cannot reach {silent}: no answer within 0.5 s; nothing was written by "
           "this request (check the server, or raise --read-timeout / --connect-timeout)"),)),
    Case("kubernetes-gone", _k8s("{kc_gone}"), 1, ("cannot reach {gone}: connection refused",)),
    # the first call asks the controller which cluster it is (ClusterName): that one hangs first
    Case("enforce-plan-scontrol-hangs", ("enforce", "plan", "--observe", "slurm"), 1,
         ("scontrol show config: no answer within 1 s; check slurmctld",)),
    Case("enforce-apply-scontrol-hangs", ("enforce", "apply", "--backend", "slurm", "--yes"), 1,
         ("scontrol show config: no answer within 1 s; check slurmctld",)),
    Case("enforce-plan-api-silent", ("enforce", "plan", "--observe", "kubernetes", "--kubeconfig", "{kc_silent}"), 1,
         ("cannot reach the Kubernetes API server within 1 s",)),
]

# --- usage errors at the door: exit 2 naming the option and its limit, before any work -------------
USAGE = [
    Case("seed-negative", ("simulate", "warehouse", "--gpus", "16", "--days", "0.01", "--seed", "-1"), 2, ("--seed", "0")),
    Case("keep-days-inf", ("warehouse", "prune", "--keep-days", "inf"), 2, ("--keep-days", "36500")),
    Case("keep-days-1e12", ("warehouse", "prune", "--keep-days", "1e12"), 2, ("--keep-days", "36500")),
    Case("spot-rate-1e9", ("whatif", "procurement", "--spot-interruptions-per-hour", "1e9"), 2,
         ("--spot-interruptions-per-hour", "60")),
    Case("policies-empty", ("whatif", "schedule", "--policies", ""), 2, ("--policies", "give at least one of")),
    Case("start-year-1", ("ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start", "0001-01-01",
                          "--end", "2026-01-01"), 2, ("--start", "from 1970-01-01 to before 9999-12-01")),
    Case("end-year-9999", ("ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start", "2026-01-01",
                           "--end", "9999-12-31"), 2, ("--end", "from 1970-01-01")),
    Case("epoch-1e30", ("ingest", "prometheus", "--url", "http://127.0.0.1:9", "--start", "1e30", "--end", "1"), 2,
         ("--start",)),
    Case("period-9999-12", ("period", "close", "9999-12"), 2, ("9999-12", "1970-01 to 9999-11"), made_ok=True),
    Case("outbox-unknown-status", ("alerts", "outbox", "--status", "sending"), 2, ("--status", "pending, sent or failed")),
    Case("quarantine-limit-huge", ("warehouse", "quarantine", "--limit", str(10**30)), 2, ("--limit",)),
    Case("scrape-timeout-huge", ("ingest", "scrape", "http://127.0.0.1:9/metrics", "--timeout", "1e12"), 2, ("--timeout",)),
    Case("scrape-ftp", ("ingest", "scrape", "ftp://exporter:9400/metrics"), 2, ("URLS", "http://HOST:9400/metrics")),
    Case("scrape-no-scheme", ("ingest", "scrape", "exporter:9400/metrics"), 2, ("URLS", "http://")),
    Case("scrape-port-99999", ("ingest", "scrape", "http://host:99999/metrics"), 2, ("URLS", "1-65535")),
    Case("prometheus-deadline-0", _prom("http://127.0.0.1:9", "--deadline", "0"), 2, ("--deadline",)),
    Case("prometheus-read-timeout-nan", _prom("http://127.0.0.1:9", "--read-timeout", "nan"), 2, ("--read-timeout",)),
    Case("prometheus-connect-timeout-1e12", _prom("http://127.0.0.1:9", "--connect-timeout", "1e12"), 2,
         ("--connect-timeout",)),
    Case("kubernetes-read-timeout-inf", _k8s("{kc_gone}", "--read-timeout", "inf"), 2, ("--read-timeout",)),
    Case("kubeconfig-not-yaml", _k8s("{kc_broken}"), 2, ("{kc_broken}:", "not valid YAML")),
    Case("metrics-host-unresolvable", ("metrics", "serve", "--address", "999.1.1.1", "--port", "19999"), 2,
         ("--address 999.1.1.1: not an address of this host",), seeded=True),
    # commands that only read or add to a warehouse, given one that is not there (a mistyped -w):
    # exit 2 naming it, as every reader, and no folder or warehouse made (issue 36)
    Case("link-devices-no-warehouse", ("ingest", "link-devices", "--start", "2026-01-01", "--end", "2026-01-02"), 2,
         ("no warehouse at", "usage-link-devices-no-warehouse.duckdb", "a mistyped --warehouse?")),
    Case("run-once-no-warehouse", ("pipelines", "run-once"), 2, ("no warehouse at", "usage-run-once-no-warehouse")),
    Case("prune-no-warehouse", ("warehouse", "prune"), 2, ("no warehouse at", "usage-prune-no-warehouse")),
    Case("retire-no-warehouse", ("warehouse", "retire-gpu", "GPU-1"), 2, ("no warehouse at",)),
    # inputs that cannot be meant (issue 36): one line naming them, exit 2
    Case("scrape-ipv6-unclosed", ("ingest", "scrape", "http://[::1"), 2, ("URLS", "is not a URL", "http://[::1]:9400")),
    Case("prometheus-ipv6-unclosed", ("ingest", "prometheus", "--url", "http://[::1", "--start", "2026-01-01",
                                      "--end", "2026-01-02"), 2, ("--url 'http://[::1' is not a URL",)),
    Case("plan-proc-self-mem", ("enforce", "apply", "--backend", "plan-file", "--out", "{folder}/o.json", "--plan",
                                "/proc/self/mem"), 2, ("--plan /proc/self/mem: cannot be read as a plan file",),
         seeded=True),
    Case("sacct-proc-self-mem", ("ingest", "slurm", "--file", "/proc/self/mem", "--cluster", "c"), 2,
         ("--file /proc/self/mem: cannot be read (Input/output error)",)),
    # an export read a batch at a time (issue 36) is still refused before anything is written when its
    # first batch cannot be read: a document cut mid-job, one without a jobs list
    Case("sacct-json-cut", ("ingest", "slurm", "--file", "{folder}/sacct-cut.json", "--cluster", "c"), 2,
         ("{folder}/sacct-cut.json:1: not JSON (Expecting value at column",)),
    Case("sacct-json-no-jobs-list", ("ingest", "slurm", "--file", "{folder}/sacct-no-jobs.json", "--cluster", "c"),
         2, ("{folder}/sacct-no-jobs.json: no 'jobs' list",)),
    # a device plugin config whose replicas cannot be meant: refused before the kubelet is asked
    Case("pod-resources-sharing-config-zero", ("ingest", "agent", "pod-resources", "--socket", "{folder}/none.sock",
                                               "--once", "--sharing-config", "{folder}/sharing-zero.yaml"), 2,
         ("--sharing-config {folder}/sharing-zero.yaml: sharing.timeSlicing.resources[0]: expected a name and "
          "replicas 1..1024",)),
    Case("reserved-negative", ("whatif", "procurement", "--reserved", "H100=-5"), 2,
         ("--reserved", "'-5' is not a finite number of 0 or more")),
    # a reader of a warehouse that is not there (a mistyped -w): exit 2 naming it, as every reader
    Case("metrics-serve-no-warehouse", ("metrics", "serve", "--port", "19997"), 2, ("usage-metrics-serve-no-warehouse.duckdb does not exist",)),
    Case("metrics-host-not-ours", ("metrics", "serve", "--address", "192.0.2.1", "--port", "19999"), 2,
         ("--address 192.0.2.1: not an address of this host",), seeded=True),  # TEST-NET-1: never this host's
]

# --- config that cannot be meant: `config check` and `config load` refuse it alike, exit 2 ----------
_config = vision_nlp  # vision (budgeted) and nlp; shares, hours and price varied per case


def _deep(levels: int) -> str:
    """An org tree ``levels`` deep, in flow style on one line."""
    return ("currency: USD\norg: " + "".join(f"{{name: n{i}, children: [" for i in range(levels))
            + "{name: leaf}" + "]}" * levels + "\n")


CONFIGS = [  # (id, config text, words its message holds)
    ("duplicate-key", _config() + "budgets: []\n", ("key 'budgets' appears twice (lines 7 and 11)",)),
    ("duplicate-currency", _config(head="currency: EUR\n"), ("key 'currency' appears twice",)),
    ("missing-currency", _config().replace("currency: USD\n", ""),
     ("no `currency:` given", "currency: USD", "ISO 4217")),
    ("lower-case-currency", _config().replace("currency: USD", "currency: usd"), ("currency", "in capitals, 'USD'")),
    ("not-iso-currency", _config().replace("currency: USD", "currency: XYZ"), ("currency", "ISO 4217")),
    ("infinite-shares", _config(shares=".inf"), ("org.children.0.shares", "finite")),
    ("nan-shares", _config(shares=".nan"), ("org.children.0.shares",)),
    ("float-price", _config(price="2.50"), ("rate_card.0.price_per_gpu_hour", 'quoted string, e.g. "2.5"')),
    ("budget-beyond-precision", _config(hours="1e30"), ("budgets.0.gpu_hours", "18 digits")),
    ("price-beyond-precision", _config(price='"123456789012345.5"'),
     ("rate_card.0.price_per_gpu_hour", "12 digits before the decimal point")),
    ("first-day-before-2000", _config() + "clusters:\n  east: {first_day: 1999-12-31}\n",
     ("clusters.east.first_day", "before 2000-01-01")),
    ("org-400-deep", _deep(400), ("nested too deeply to read",)),
    ("org-40-deep", _deep(40), ("more than 32 levels deep",)),
]


# --- the rig: servers, files, one seeded warehouse ---------------------------------------------------
@dataclass
class Rig:
    folder: Path
    seed: Path  # a warehouse with SEED_CONFIG loaded: each hang / config case runs on its own copy
    env: dict[str, str]
    places: dict[str, str] = field(default_factory=dict)

    def fill(self, text: str) -> str:
        for key, value in self.places.items():
            text = text.replace("{" + key + "}", value)
        return text


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nobody listens there


def _kubeconfig(path: Path, server: str) -> str:
    path.write_text("apiVersion: v1\nkind: Config\n"
                    f"clusters:\n- name: c\n  cluster:\n    server: {server}\n"
                    "users:\n- name: u\n  user: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n"
                    "current-context: c\n")
    return str(path)


def _counts(path: Path) -> dict[str, int]:
    with duckdb.connect(str(path), read_only=True) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables "
                                            "WHERE table_type = 'BASE TABLE' ORDER BY 1").fetchall()]
        return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    hang = folder / "bin"
    hang.mkdir()
    for tool in ("scontrol", "scancel"):  # the controller is wedged: the client never returns
        (hang / tool).write_text("#!/bin/sh\nexec sleep 120\n")
        (hang / tool).chmod(0o755)
    (folder / "gpuledger.yaml").write_text(SEED_CONFIG)
    (folder / "sacct-cut.json").write_text('{"jobs": [{"job_id": 1, "account": "p"}, {"job_id": 2, "account": ')
    (folder / "sacct-no-jobs.json").write_text('{"meta": {}, "jobs": {"1": {"account": "p"}}}')
    (folder / "sharing-zero.yaml").write_text("sharing:\n  timeSlicing:\n    resources:\n"
                                              "    - {name: nvidia.com/gpu, replicas: 0}\n")
    env = {"COLUMNS": "200", "PATH": f"{hang}{os.pathsep}/usr/bin:/bin", "HOME": str(folder)}
    seed = folder / "seed.duckdb"
    loaded = subprocess.run([sys.executable, "-m", "gpuledger.cli", "config", "load", "-w", str(seed)], cwd=folder,
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert loaded.returncode == 0, loaded.stderr
    servers = [HostileServer(SILENT), HostileServer(STALL), HostileServer(TRICKLE),
               HostileServer(prometheus_until(STALL, from_s=T0)), HostileServer(prometheus_until(TRICKLE, from_s=T0))]
    gone = f"http://127.0.0.1:{_closed_port()}"
    broken = folder / "kubeconfig-broken"
    broken.write_text("apiVersion: v1\nclusters: [\n  - name: c\n    cluster: {server: x\n")
    places = {"silent": servers[0].url, "stall": servers[1].url, "trickle": servers[2].url,
              "prom_stall": servers[3].url, "prom_trickle": servers[4].url, "gone": gone,
              "kc_silent": _kubeconfig(folder / "kc-silent", servers[0].url),
              "kc_gone": _kubeconfig(folder / "kc-gone", gone), "kc_broken": str(broken), "folder": str(folder)}
    try:
        yield Rig(folder, seed, env, places)
    finally:
        for server in servers:
            server.stop()


def _cli(rig: Rig, args, warehouse_file: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *(rig.fill(a) for a in args)], cwd=rig.folder,
                          env={**rig.env, "GPULEDGER_WAREHOUSE": str(warehouse_file)}, capture_output=True, text=True,
                          timeout=120, check=False)


def _in_parallel(jobs):
    with ThreadPoolExecutor(max_workers=4) as pool:  # subprocesses: the GIL is not the limit
        return dict(pool.map(lambda job: job(), jobs))


def _check(rig: Rig, case: Case, ran: subprocess.CompletedProcess) -> None:
    lines = ran.stderr.strip().splitlines()
    assert ran.returncode == case.code, (case.id, ran.returncode, ran.stderr)
    assert len(lines) == case.lines, (case.id, ran.stderr)
    words = " ".join(ran.stderr.split())
    for said in case.says:
        assert " ".join(rig.fill(said).split()) in words, (case.id, ran.stderr)
    for library in LIBRARY_TEXT:
        assert library not in ran.stderr, (case.id, library, ran.stderr)


# --- the classes ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hang_results(rig):
    seeded = _counts(rig.seed)

    def job(case):
        def run():
            copy = rig.folder / f"{case.id}.duckdb"
            shutil.copyfile(rig.seed, copy)
            began = time.monotonic()
            ran = _cli(rig, case.args, copy)
            return case.id, (ran, _counts(copy) == seeded, time.monotonic() - began)
        return run

    return _in_parallel([job(c) for c in HANGS])


@pytest.mark.slow
@pytest.mark.parametrize("case", HANGS, ids=[c.id for c in HANGS])
def test_hangs_end_within_the_deadline_in_one_line_and_write_nothing(rig, hang_results, case):
    ran, unchanged, took = hang_results[case.id]
    _check(rig, case, ran)
    assert unchanged, case.id  # every table's row count as seeded
    # deadlines of 0.4-1.2 s; the rest is interpreter start and exit, four at a time on a loaded
    # machine. Without them: Prometheus waits 60 s per read, the hung scontrol 120 s.
    assert took < 45, (case.id, took)


@pytest.fixture(scope="module")
def usage_results(rig):
    seeded = _counts(rig.seed)

    def job(case):
        def run():
            path = rig.folder / f"usage-{case.id}.duckdb"
            if case.seeded:
                shutil.copyfile(rig.seed, path)
                ran = _cli(rig, case.args, path)
                return case.id, (ran, _counts(path) != seeded)
            ran = _cli(rig, case.args, path)
            return case.id, (ran, path.exists())
        return run

    return _in_parallel([job(c) for c in USAGE])


@pytest.mark.slow
@pytest.mark.parametrize("case", USAGE, ids=[c.id for c in USAGE])
def test_usage_errors_are_one_line_exit_2_before_any_work(rig, usage_results, case):
    ran, touched = usage_results[case.id]
    _check(rig, case, ran)
    # no warehouse made (period close opens it before it reads the month), or the seeded one's counts kept
    assert case.made_ok or not touched, case.id


@pytest.fixture(scope="module")
def config_results(rig):
    seeded = _counts(rig.seed)

    def job(name, text, command):
        def run():
            path = rig.folder / f"{name}.yaml"
            path.write_text(text)
            copy = rig.folder / f"config-{name}-{command}.duckdb"
            shutil.copyfile(rig.seed, copy)
            ran = _cli(rig, ("config", command, "-c", str(path)), copy)
            return (name, command), (ran, _counts(copy) == seeded)
        return run

    return _in_parallel([job(n, t, cmd) for n, t, _ in CONFIGS for cmd in ("check", "load")])


@pytest.mark.slow
@pytest.mark.parametrize("name,text,says", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_config_that_cannot_be_meant_is_refused_by_check_and_load_alike(rig, config_results, name, text, says):
    for command in ("check", "load"):
        ran, unchanged = config_results[(name, command)]
        assert ran.returncode == 2, (name, command, ran.stderr)
        assert "Traceback" not in ran.stderr and "internal error" not in ran.stderr, ran.stderr
        words = " ".join(ran.stderr.split())
        assert all(w in words for w in says), (name, command, ran.stderr)
        assert unchanged, (name, command)  # config load stored no version


@pytest.mark.slow
def test_the_largest_config_values_stored_are_accepted_by_both(rig, tmp_path):
    path = tmp_path / "gpuledger.yaml"
    path.write_text(_config(hours='"999999999999999.999"', price='"999999999999.999999"'))
    for command in ("check", "load"):
        ran = _cli(rig, ("config", command, "-c", str(path)), tmp_path / "w.duckdb")
        assert ran.returncode == 0, (command, ran.stderr)


def test_a_binary_inventory_file_is_a_usage_error(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(UsageError, match="not a text file"):
        inventory_from_file(path)
