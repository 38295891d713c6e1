"""Every command in the README's shell blocks runs (issue 7, "Done when"): against a small
simulated warehouse, each `gpuledger ...` line exits 0 and prints no traceback. `make` lines are
what `make demo` / `make test` do and are left to CI itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv running the tests holds the `gpuledger` script

pytestmark = pytest.mark.slow


def readme_commands() -> list[str]:
    """The `gpuledger` lines of every ```sh block, trailing comments removed."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if re.match(r"(\.venv/bin/)?gpuledger\b", line):
                commands.append(line)
    return commands


def test_readme_has_command_blocks():
    assert len(readme_commands()) >= 5  # the quick-start block; parsing nothing cannot pass below


@pytest.fixture(scope="module")
def small_warehouse(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("readme")
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(work / "data" / "gpuledger.duckdb"),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "120"}
    env.pop("GPULEDGER_CONFIG", None)
    # 16 GPUs for the first week of November: the README's dates fall inside it
    done = subprocess.run([str(BIN / "gpuledger"), "simulate", "warehouse", "--gpus", "16", "--days", "7",
                           "--interval", "300", "--seed", "7"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return {"cwd": work, "env": env}


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs(command, small_warehouse):
    line = re.sub(r"^(\.venv/bin/)?gpuledger", str(BIN / "gpuledger"), command)
    done = subprocess.run(["bash", "-c", line], cwd=small_warehouse["cwd"], env=small_warehouse["env"],
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
