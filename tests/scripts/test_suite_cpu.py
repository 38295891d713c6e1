"""scripts/suite_cpu.py on a hand-written GPULEDGER_TEST_CPU_LOG: per-file sums, each worker's end and
the run's tail, and a foreign file told in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/suite_cpu.py"


def _run(log: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(log)], capture_output=True, text=True, timeout=60)


def test_files_are_summed_and_the_tail_is_the_time_one_worker_ran_alone(tmp_path):
    rows = [  # (test, own, children, wall, worker, ended_at)
        ("tests/a.py::one", 1.0, 2.0, 10.0, "gw0", 110.0),  # gw0 from 100 to 110
        ("tests/a.py::two", 1.0, 0.0, 5.0, "gw0", 115.0),   # then to 115
        ("tests/b.py::one", 1.0, 0.0, 50.0, "gw1", 150.0),  # gw1 from 100 to 150
    ]
    log = tmp_path / "cpu.jsonl"
    log.write_text("".join(json.dumps({"test": t, "own_cpu_s": o, "children_cpu_s": c, "wall_s": w, "worker": k,
                                       "ended_at": e}) + "\n" for t, o, c, w, k, e in rows))
    done = _run(log)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # a.py: own 1 + 1, children 2: 4 CPU-s, 15 s wall, 2 tests; b.py: 1 CPU-s, 50 s; b.py is listed second
    assert lines[0] == "3 tests in 2 files: CPU 5 s (own 3, children 2), wall 65 s summed"
    assert lines[2].split() == ["4.0", "2.0", "2.0", "15.0", "2", "tests/a.py"]
    assert lines[3].split() == ["1.0", "1.0", "0.0", "50.0", "1", "tests/b.py"]
    # both started at 100: gw0 done 15 s in, gw1 50 s in: 35 s of tail
    assert "gw0 done at 15 (last: tests/a.py); gw1 done at 50 (last: tests/b.py)" in lines[4]
    assert lines[5] == "tail: 35 s with fewer workers than the run started"


def test_a_file_that_is_not_the_log_is_one_line_exit_2(tmp_path):
    other = tmp_path / "other.txt"
    other.write_text("not json\n")
    done = _run(other)
    assert done.returncode == 2 and "other.txt:1: not a line of GPULEDGER_TEST_CPU_LOG" in done.stderr
    assert "Traceback" not in done.stderr
