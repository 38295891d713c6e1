"""A command whose optional dependency is missing names the extra to install (issue 7 §1), in one
line through the CLI's error boundary. The missing package is simulated by blocking its import
(``sys.modules[name] = None``, which makes Python raise ModuleNotFoundError for it) in a real
subprocess of the program."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuledger.extras import EXTRAS, MissingExtra, require

RUN_WITHOUT = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # as if the extra were not installed
from gpuledger.cli import main
sys.argv = ["gpuledger", *{args!r}]
main()
"""


def test_require_names_the_extra(monkeypatch):
    # a package that is surely not installed, declared as an extra's (in-process: an already
    # imported real package cannot be hidden again; the subprocess cases below hide real ones)
    monkeypatch.setitem(EXTRAS, "gpuledger_absent_pkg", ("kubernetes", "talking to a Kubernetes API server"))
    with pytest.raises(MissingExtra, match=r"pip install 'gpuledger\[kubernetes\]'"):
        require("gpuledger_absent_pkg.client")


@pytest.mark.parametrize("blocked,args,extra", [
    (["kubernetes"], ["ingest", "kubernetes", "-w", "{tmp}/w.duckdb"], "kubernetes"),
    (["dagster"], ["pipelines", "run-once", "-w", "{tmp}/w.duckdb"], "pipelines"),
    (["openpyxl"], ["report", "statement", "--period", "2026-11", "--out", "{tmp}", "-w", "{tmp}/w.duckdb"],
     "reports"),
])
def test_a_command_without_its_extra_says_which_to_install(blocked, args, extra, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run([sys.executable, "-c", RUN_WITHOUT.format(blocked=blocked, args=args)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()
             and not line.startswith("the warehouse had no config")]
    assert len(lines) == 1 and f"pip install 'gpuledger[{extra}]'" in lines[0], done.stderr
