"""A small simulated warehouse for the dashboard tests, built the way a user builds one (the CLI:
simulate, the pipelines' run-once, an enforcement plan), and a real `streamlit run` server on it.

Alerts of its squatters wait in the outbox (the receiver is down). Roles in its config: admin@ / finance@ see everything; vision-lead@ leads the `vision` program
(vision-gen, vision-eval), llm-lead@ leads `llm` (llm-pretrain, llm-posttrain). Two clusters:
`sim` (16 GPUs) and `east` (8 GPUs)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
APP = ROOT / "dashboards" / "app.py"
ROLES = {"admins": ["admin@example.com"], "finance": ["finance@example.com"],
         "leads": {"vision-lead@example.com": ["vision"], "LLM-Lead@example.com": ["llm"]}}
# squatting alerts go to an on-call channel whose receiver is down (port 9): the outbox keeps them,
# retrying, which is what the Squatters page shows per finding
ALERT_URL = "json://127.0.0.1:9/hook"
LEADS = {"vision-lead@example.com": ("vision-gen", "vision-eval"), "llm-lead@example.com": ("llm-pretrain", "llm-posttrain")}


@dataclass(frozen=True)
class Rig:
    folder: Path
    warehouse: Path
    config: Path
    # the same warehouse before `east` was added (cluster `sim` only, not analysed): for comparisons
    # with one simulated cluster rebuilt elsewhere; `single_cluster_analysed` runs its pipelines
    single_cluster: Path | None = None

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULEDGER_", "STREAMLIT_"))}
        env.update(GPULEDGER_WAREHOUSE=str(self.warehouse), GPULEDGER_CONFIG=str(self.config),
                   DAGSTER_HOME=str(self.folder / "dagster"), GPULEDGER_ALERT_ONCALL_URL=ALERT_URL, NO_COLOR="1",
                   COLUMNS="200", **extra)
        return env


def run_cli(rig: Rig, *args: str, timeout: float = 600, stored_config: bool = False) -> subprocess.CompletedProcess:
    """``gpuledger ARGS`` on the rig; ``stored_config``: without $GPULEDGER_CONFIG (the config
    version the warehouse stores)."""
    env = rig.env()
    if stored_config:
        env.pop("GPULEDGER_CONFIG")
    done = subprocess.run([str(BIN / "gpuledger"), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, f"gpuledger {' '.join(args)}: {done.stderr[-2000:]}"
    return done


def build(folder: Path, *, gpus: int = 16, days: float = 2) -> Rig:
    import yaml

    from gpuledger.config import example_config_text

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dagster").mkdir(exist_ok=True)
    (folder / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    config = folder / "gpuledger.yaml"
    raw = yaml.safe_load(example_config_text())
    raw["dashboards"] = ROLES
    raw.setdefault("policy", {}).setdefault("alerts", {})["on_call"] = ["oncall"]
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    rig = Rig(folder, folder / "gpuledger.duckdb", config, folder / "sim-only.duckdb")
    run_cli(rig, "simulate", "warehouse", "--gpus", str(gpus), "--days", str(days), "--seed", "3")
    shutil.copyfile(rig.warehouse, rig.single_cluster)
    # a second, smaller cluster: every page's cluster filter has something to leave out
    run_cli(rig, "simulate", "warehouse", "--gpus", "8", "--days", str(days), "--seed", "5", "--cluster", "east")
    run_cli(rig, "pipelines", "run-once")
    run_cli(rig, "enforce", "plan", stored_config=True)
    run_cli(rig, "alerts", "run", stored_config=True)
    return rig


@pytest.fixture(scope="session")
def dashboard_warehouse(tmp_path_factory) -> Rig:
    return build(tmp_path_factory.mktemp("dashboards"))


@pytest.fixture(scope="session")
def single_cluster_analysed(dashboard_warehouse) -> Path:
    """The rig's cluster `sim` alone, analysed by the pipelines' run-once (~13 CPU-s: only the
    Prometheus side-by-side needs it, so only its run pays)."""
    run_cli(dataclasses.replace(dashboard_warehouse, warehouse=dashboard_warehouse.single_cluster), "pipelines",
            "run-once")
    return dashboard_warehouse.single_cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, deadline_s: float, proc: subprocess.Popen | None = None) -> None:
    """Poll ``url`` until it answers 200, the process dies, or the deadline passes."""
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]} exited with {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {deadline_s} s ({last})")


class Server:
    """`streamlit run dashboards/app.py` on a free port, headless, in its own folder (for
    .streamlit/secrets.toml)."""

    def __init__(self, rig: Rig, cwd: Path, *, port: int | None = None, env: dict | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log = open(cwd / f"streamlit-{self.port}.log", "w")  # noqa: SIM115 - closed in stop()
        self._log = log
        self.proc = subprocess.Popen(
            [str(BIN / "streamlit"), "run", str(APP), "--server.headless", "true", "--server.port", str(self.port),
             "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=cwd, env={**rig.env(), **(env or {})}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_http(f"{self.url}/_stcore/health", 90, self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
