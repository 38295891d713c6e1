"""The `gpuledger` command as a user runs it: every subcommand has --help; files come from
--warehouse / --config or the environment."""

import subprocess
import sys

import typer
from typer.testing import CliRunner

from gpuledger.cli import app
from tests.helpers.command_tree import command_paths


def test_every_subcommand_has_help():
    paths = [tuple(p) for p in command_paths()]
    assert ("ingest", "jobs-csv") in paths and ("simulate", "warehouse") in paths
    assert ("import",) not in paths and ("fairshare",) not in paths  # removed names are not listed
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
    bad_config.write_text("currency: USD\norg: {name: x, shares: -1}\n")
    env = {"GPULEDGER_WAREHOUSE": str(target), "GPULEDGER_CONFIG": str(bad_config)}
    migrated = subprocess.run([sys.executable, "-m", "gpuledger.cli", "warehouse", "migrate"], capture_output=True,
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


def test_one_tree_and_the_domains_hold_no_cli_code():
    # every command module lives in gpuledger/cli/; a domain importing typer would be a second tree
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    domains = [p for d in ("gpuledger", "warehouse", "enforce", "pipelines") for p in (root / d).rglob("*.py")
               if "cli" not in p.relative_to(root).parts and p.name != "tables.py"]
    assert len(domains) > 50  # the walk found the code
    offenders = [str(p.relative_to(root)) for p in domains if "import typer" in p.read_text()]
    assert offenders == []
    groups = {p[0] for p in command_paths() if len(p) == 1}
    assert {"ingest", "report", "warehouse", "config", "period", "enforce", "alerts", "whatif", "pipelines",
            "simulate", "metrics"} <= groups


def test_a_removed_name_says_what_replaced_it_and_runs_nothing(tmp_path):
    # `gpuledger migrate` (deprecated for a release) is gone: one line naming `gpuledger warehouse
    # migrate`, exit 2, and no warehouse made; the new name runs
    env_path = tmp_path / "w.duckdb"
    old = subprocess.run([sys.executable, "-m", "gpuledger.cli", "migrate", "-w", str(env_path)],
                         capture_output=True, text=True, timeout=120)
    assert old.returncode == 2 and old.stdout == ""
    assert old.stderr.strip() == ("gpuledger migrate was removed (deprecated the release before): "
                                  "use `gpuledger warehouse migrate`")
    assert not env_path.exists()
    new = subprocess.run([sys.executable, "-m", "gpuledger.cli", "warehouse", "migrate", "-w", str(env_path)],
                         capture_output=True, text=True, timeout=120)
    assert new.returncode == 0 and "schema version" in new.stdout
    # the group alias too, whatever arguments it is given
    ran = subprocess.run([sys.executable, "-m", "gpuledger.cli", "import", "jobs", "x.csv", "-w", str(env_path)],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2 and ran.stderr.strip().endswith("use `gpuledger ingest jobs-csv`")
    # and none of them is listed in the help any more
    listed = subprocess.run([sys.executable, "-m", "gpuledger.cli", "--help"], capture_output=True, text=True,
                            timeout=120).stdout
    assert "Deprecated" not in listed and "fairshare" not in listed.split("Commands")[1]