"""deploy/systemd (a Slurm admin node): `systemd-analyze verify` accepts every unit with no
warning (the install path /opt/gpuledger/bin mapped onto this environment's bin, which holds the
same commands); every ExecStart is a command this package installs and that parses its options;
the environment file sets what the code reads and points Dagster at the production instance."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy/systemd"
BIN = Path(sys.executable).parent
ANALYZE = shutil.which("systemd-analyze")


def exec_starts() -> dict[str, list[list[str]]]:
    """Each unit's ExecStart lines, in order (a oneshot runs several)."""
    return {unit.name: [x.removeprefix("ExecStart=").split() for x in unit.read_text().splitlines()
                        if x.startswith("ExecStart=")]
            for unit in sorted(UNITS.glob("*.service"))}


@pytest.mark.skipif(ANALYZE is None, reason="no systemd-analyze on this machine")
def test_units_verify_without_warnings(tmp_path):
    for unit in [*UNITS.glob("*.service"), UNITS / "gpuledger.target"]:
        (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/gpuledger/bin/", f"{BIN}/"))
    names = sorted(str(p) for p in tmp_path.iterdir())
    done = subprocess.run([ANALYZE, "verify", "--man=no", *names], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


@pytest.mark.slow
def test_every_exec_start_is_an_installed_command_that_parses(tmp_path):
    starts = exec_starts()
    assert set(starts) == {"gpuledger-migrate.service", "gpuledger-dagster-daemon.service",
                           "gpuledger-dagster-webserver.service", "gpuledger-scrape.service",
                           "gpuledger-dashboards.service", "gpuledger-metrics.service"}
    # the warehouse, then Dagster's schema, each by one process before the daemon and webserver
    assert starts["gpuledger-migrate.service"] == [["/opt/gpuledger/bin/gpuledger", "warehouse", "migrate"],
                                                   ["/opt/gpuledger/bin/dagster", "instance", "migrate"]]
    assert all(len(lines) == 1 for unit, lines in starts.items() if unit != "gpuledger-migrate.service")
    for unit, lines in starts.items():
        for argv in lines:
            assert argv[0].startswith("/opt/gpuledger/bin/"), unit
            local = [str(BIN / Path(argv[0]).name), *argv[1:]]
            # the same options with --help: typer / click parse every option given before answering
            done = subprocess.run([*local, "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
            assert done.returncode == 0, f"{unit}: {done.stderr[-2000:]}"


def test_environment_file_names_what_the_code_reads():
    env = dict(line.split("=", 1) for line in (UNITS / "gpuledger.env").read_text().splitlines()
               if line and not line.startswith("#"))
    instance = (REPO / "deploy/kubernetes/base/dagster.yaml").read_text()
    for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD"):
        assert name in env and f"env: {name}" in instance
    from gpuledger.warehouse.paths import WAREHOUSE_ENV

    from gpuledger.channels import SECRETS_ENV
    from gpuledger.config_files import CONFIG_ENV

    for name in (WAREHOUSE_ENV, CONFIG_ENV, SECRETS_ENV, "DAGSTER_HOME"):
        assert env[name].startswith(("/var/lib/gpuledger", "/etc/gpuledger")), name
    # every service runs as the unprivileged user, with the writable state on one folder
    for unit in UNITS.glob("*.service"):
        text = unit.read_text()
        assert "User=gpuledger" in text and "ProtectSystem=strict" in text and "ReadWritePaths=/var/lib/gpuledger" in text
