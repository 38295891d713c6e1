"""The `gpuledger` command as a user runs it: every subcommand has --help; files come from
--warehouse / --config or the environment."""

import subprocess
import sys

import typer
from typer.testing import CliRunner

from gpuledger.cli import app


def _all_commands(group, path=()):
    yield path
    if hasattr(group, "commands"):  # typer groups (typer may not subclass click.Group)
        for name, sub in group.commands.items():
            yield from _all_commands(sub, (*path, name))


def test_every_subcommand_has_help():
    root = typer.main.get_command(app)
    paths = list(_all_commands(root))
    assert ("import", "jobs") in paths and ("simulate", "warehouse") in paths
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage" in result.output, path
    # And once as the installed program is run, in its own process.
    top = subprocess.run([sys.executable, "-m", "gpuledger.cli", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert top.returncode == 0 and "simulate" in top.stdout, top.stderr


def test_warehouse_and_config_come_from_the_environment(tmp_path, monkeypatch):
    target = tmp_path / "env-chosen.duckdb"
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("org: {name: x, shares: -1}\n")
    env = {"GPULEDGER_WAREHOUSE": str(target), "GPULEDGER_CONFIG": str(bad_config)}
    migrated = subprocess.run([sys.executable, "-m", "gpuledger.cli", "migrate"], capture_output=True,
                              text=True, env={**_base_env(), **env}, timeout=60)
    assert migrated.returncode == 0, migrated.stderr
    assert target.exists()
    checked = subprocess.run([sys.executable, "-m", "gpuledger.cli", "config", "check"],
                             capture_output=True, text=True, env={**_base_env(), **env}, timeout=60)
    # The invalid config chosen by $GPULEDGER_CONFIG is the one read: exit 2 naming the field.
    assert checked.returncode == 2
    assert "org.shares" in checked.stderr and str(bad_config) in checked.stderr


def _base_env():
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
