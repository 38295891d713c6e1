"""A scheduler that never answers stops enforcement with one line, within the configured deadline
(policy.enforcement.scheduler_timeout_seconds), instead of hanging a cron job: a `scontrol` that
hangs (a real process that never replies), an API server that accepts connections and never
answers (a real listening socket)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "gpuledger"
CONFIG = """
currency: USD
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


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "c.yaml").write_text(CONFIG)
    hang = tmp_path / "bin"
    hang.mkdir()
    for tool in ("scontrol", "scancel"):  # the controller is wedged: the client never returns
        (hang / tool).write_text("#!/bin/sh\nexec sleep 120\n")
        (hang / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{hang}{os.pathsep}{os.environ['PATH']}", "GPULEDGER_WAREHOUSE": str(tmp_path / "w.duckdb")}
    env.pop("GPULEDGER_CONFIG", None)
    done = subprocess.run([str(BIN), "config", "load", "--config", str(tmp_path / "c.yaml")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return env, tmp_path


def run(env, *args) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    return done, time.monotonic() - started


@pytest.mark.parametrize("command", [("enforce", "plan", "--observe", "slurm"),
                                     ("enforce", "apply", "--backend", "slurm", "--yes")])
def test_a_hanging_scontrol_is_one_line_within_the_deadline(setup, command):
    env, _ = setup
    done, took = run(env, *command)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(err) == 1 and "scontrol show job -o: no answer within 1 s; check slurmctld" in err[0], err
    assert took < 60  # the hung client (sleep 120) was not waited for


def test_an_api_server_that_never_answers_is_one_line_within_the_deadline(setup):
    env, tmp = setup
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        kc = tmp / "kc"
        kc.write_text(f"apiVersion: v1\nkind: Config\nclusters:\n- name: s\n  cluster:\n    server: http://127.0.0.1:{port}\n"
                      "users:\n- name: u\n  user: {}\ncontexts:\n- name: s\n  context:\n    cluster: s\n    user: u\n"
                      "current-context: s\n")
        done, took = run(env, "enforce", "plan", "--observe", "kubernetes", "--kubeconfig", str(kc))
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(err) == 1 and "cannot reach the Kubernetes API server within 1 s" in err[0], err
    assert took < 60
