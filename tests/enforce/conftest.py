"""The real Slurm rig for enforcement tests: the one at $GPULEDGER_SLURM_DIR when it runs already
(an engineer's own, left running), else a fresh one started by scripts/slurm-rig.sh in a private
directory and stopped at the end of the session."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

RIG = Path(__file__).resolve().parents[2] / "scripts" / "slurm-rig.sh"


def _env(rig_dir: Path) -> dict:
    return {**os.environ, "SLURM_CONF": str(rig_dir / "etc" / "slurm.conf"), "TZ": "UTC"}


@pytest.fixture(scope="session")
def slurm():
    """{"env": the client environment, "dir": the rig's directory}."""
    mine = os.environ.get("GPULEDGER_SLURM_DIR")
    if mine and subprocess.run(["bash", str(RIG), "status", mine], capture_output=True, timeout=60,
                               check=False).returncode == 0:
        yield {"env": _env(Path(mine)), "dir": Path(mine)}
        return
    if os.geteuid() != 0 or (shutil.which("apt-get") is None and shutil.which("slurmctld") is None):
        pytest.skip("the Slurm rig needs root and apt-get (Debian) or an installed Slurm")
    # Not under pytest's tmp tree: it is mode 700, and munged / mariadbd run as their own users.
    rig_dir = Path(tempfile.mkdtemp(prefix="gpuledger-slurm-", dir=os.environ.get("TMPDIR", "/tmp")))
    done = subprocess.run(["bash", str(RIG), "start", str(rig_dir)], capture_output=True, text=True, timeout=600,
                          check=False)
    try:
        if done.returncode != 0:
            pytest.fail(f"slurm-rig.sh start failed ({done.returncode}): {done.stderr[-2000:]}")
        yield {"env": _env(rig_dir), "dir": rig_dir}
    finally:
        stopped = subprocess.run(["bash", str(RIG), "stop", str(rig_dir)], capture_output=True, text=True,
                                 timeout=120, check=False)
        if stopped.returncode == 0:
            shutil.rmtree(rig_dir, ignore_errors=True)
