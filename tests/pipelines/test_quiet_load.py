"""Issue 22 §7: loading the Dagster code location (what `make demo`, `pipelines run-once` and
`dg dev` do first) prints no warning a newcomer must read: a fresh interpreter, every warning shown."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_code_location_loads_without_warnings(tmp_path):
    code = ("import gpuledger.pipelines.definitions as d, gpuledger.pipelines.run_once; "
            "print(len(list(d.defs().resolve_all_asset_specs())))")
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) > 10  # the assets were really built
    assert "Warning" not in done.stderr, done.stderr
