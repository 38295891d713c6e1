"""Shared fixtures: a fresh warehouse file per test, the packaged example config."""

from __future__ import annotations

import os

import pytest

# xdist's workers start with COLUMNS=80 / LINES=24 set though the run that spawned them had none,
# so every table the CLI prints would fit 80 columns there and not in a one-process run: workers
# get the environment the run started with.
_SIZE = ("COLUMNS", "LINES")
if "PYTEST_XDIST_WORKER" in os.environ and "GPULEDGER_TEST_SIZE" in os.environ:
    for name, value in zip(_SIZE, os.environ["GPULEDGER_TEST_SIZE"].split(","), strict=True):
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)
else:
    os.environ["GPULEDGER_TEST_SIZE"] = ",".join(os.environ.get(n, "") for n in _SIZE)

from gpuledger.config import load_config
from tests.helpers.dashboard_rig import dashboard_warehouse, single_cluster_analysed  # noqa: F401 - session fixtures


@pytest.fixture
def warehouse_file(tmp_path):
    """Path of a warehouse that does not exist yet (writers create and migrate it)."""
    return tmp_path / "warehouse" / "gpuledger.duckdb"


@pytest.fixture(scope="session")
def example_config():
    return load_config(None)



# `make test` runs the suite on two xdist workers: much of it waits on real servers (Slurm, Dagster,
# PostgreSQL, Chromium). Each test file stays on one worker (module-level caches hold), and the
# files sharing an expensive session rig go to one worker together, so each rig starts once per
# run. (xdist's own `--dist loadgroup` does nothing under pytest 9: it renames nodes through an
# attribute pytest 9 no longer reads.) A file missing here only starts its rig a second time.
RIG_FILES = {
    "slurm": ("tests/ingest/test_slurm.py", "tests/ingest/test_slurm_gpus.py", "tests/enforce/test_slurm.py",
              "tests/enforce/test_slurm_rig.py", "tests/enforce/test_team_slurm_rig.py", "tests/enforce/test_waits_rig.py"),
    "dashboards": ("tests/dashboards/", "tests/bench/test_prometheus_bench.py", "tests/metrics/test_exporter_facts.py",
                   "tests/reports/test_focus.py"),
    "image": ("tests/deploy/test_image_build.py", "tests/deploy/test_image.py"),  # one build: tests/deploy/conftest.py
}


# The scopes that take a worker longest (wall seconds in a fresh clone's `make test`, session 28:
# dashboards ~330, image ~250, dagster_postgres 157, slurm ~160, prometheus_aggregate 103, ...),
# handed out first, longest first. xdist orders scopes by their number of tests, which sent the
# one-test files of 50-160 s last: the run ended on one of them with the other worker idle (121 s
# of tail). A scope missing here only goes in xdist's order.
LONGEST_FIRST = ("dashboards", "image", "slurm", "tests/deploy/test_dagster_postgres.py",
                 "tests/ingest/test_prometheus_aggregate.py", "tests/cli/test_readme_commands.py",
                 "tests/warehouse/test_full_disk.py", "tests/pipelines/test_dev.py",
                 "tests/deploy/test_daemon_recovery.py", "tests/reports/test_statement.py",
                 "tests/pipelines/test_assets.py", "tests/cli/test_hostile_corpus.py",
                 "tests/analytics/test_end_to_end.py", "tests/cli/test_errors.py", "tests/enforce/test_demo.py")


class _LongestFirst(dict):
    """xdist's work queue (scope -> its tests), handing out the LONGEST_FIRST scopes first: xdist
    takes the next unit with ``popitem(last=False)``."""

    def popitem(self, last: bool = True):
        if not last:
            for scope in LONGEST_FIRST:
                if scope in self:
                    return scope, self.pop(scope)
            first = next(iter(self))
            return first, self.pop(first)
        return super().popitem()


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent from a venv without it
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class RigScheduling(LoadFileScheduling):
        def __init__(self, config, log=None):
            super().__init__(config, log)
            self.workqueue = _LongestFirst()

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            for rig, paths in RIG_FILES.items():
                if path.startswith(paths):
                    return rig
            return path

    return RigScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """A test on the dashboards' rig is slow: the rig is a simulated warehouse two clusters wide,
    analysed by the pipelines' run-once (~20 s of one worker before its first test, quiet), so
    `make test-fast` leaves every user of it to `make test` rather than build it for a few."""
    for item in items:
        if "dashboard_warehouse" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


# GPULEDGER_TEST_CPU_LOG=FILE: one JSON line per test — the CPU-seconds of the test's process and of
# the child processes it reaped (servers a session fixture keeps count when they are reaped, daemons
# never), its wall seconds, its xdist worker and when it ended — to see where the suite's time goes (it is CPU-bound on two cores:
# BENCHMARKS.md "Foundation"). Summed per file: `python scripts/suite_cpu.py FILE`.
_CPU_LOG = os.environ.get("GPULEDGER_TEST_CPU_LOG")
if _CPU_LOG:
    import json
    import resource
    import time

    def _cpu_now() -> tuple[float, float]:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        (own, children), began = _cpu_now(), time.perf_counter()
        yield
        (own_after, children_after), wall = _cpu_now(), time.perf_counter() - began
        with open(_CPU_LOG, "a", encoding="utf-8") as log:  # one short append per test: workers interleave lines
            log.write(json.dumps({"test": item.nodeid, "own_cpu_s": round(own_after - own, 3),
                                  "children_cpu_s": round(children_after - children, 3),
                                  "wall_s": round(wall, 3), "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                                  "ended_at": round(time.time(), 1)}) + "\n")
