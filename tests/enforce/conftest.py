"""The real Slurm rig for enforcement tests: the one at $GPULEDGER_SLURM_DIR when it runs already
(an engineer's own, left running), else the session's rig (tests/ingest/test_slurm.py's
``slurm_rig``: started once by scripts/slurm-rig.sh, stopped at the end)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.ingest.test_slurm import slurm_rig  # noqa: F401 - the session's rig, used by name

RIG = Path(__file__).resolve().parents[2] / "scripts" / "slurm-rig.sh"


@pytest.fixture(scope="session")
def slurm(request):
    """{"env": the client environment, "dir": the rig's directory}."""
    mine = os.environ.get("GPULEDGER_SLURM_DIR")
    if mine and subprocess.run(["bash", str(RIG), "status", mine], capture_output=True, timeout=60,
                               check=False).returncode == 0:
        return {"env": {**os.environ, "SLURM_CONF": str(Path(mine) / "etc" / "slurm.conf"), "TZ": "UTC"},
                "dir": Path(mine)}
    return request.getfixturevalue("slurm_rig")
