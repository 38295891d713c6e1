"""A config version stored before a file had to name its currency. (Config that cannot be meant,
refused by `config check` and `config load` alike: tests/cli/test_hostile_corpus.py.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.configs import vision_nlp

_config = vision_nlp  # vision (budgeted) and nlp; shares, hours and price varied per case


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", "gpuledger.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


@pytest.mark.slow
def test_a_stored_version_without_currency_is_read_as_usd_and_said_so(tmp_path):
    """Versions stored before a file had to name its currency were accepted as USD: they stay in
    force as USD, `config versions` says which they are, and the same file with `currency: USD`
    added is the same content (no new version)."""
    from gpuledger import warehouse
    from gpuledger.config import parse_config_text
    from gpuledger.config_store import stored_config_in_force
    from gpuledger.ledger.config_versions import load_version

    old_text = _config(price="\"2.50\"").replace("currency: USD\n", "")
    wh = tmp_path / "w.duckdb"
    with warehouse.open_writer(wh) as con:  # as a release before the rule stored it
        load_version(con, parse_config_text(old_text), text=old_text, source="/etc/old.yaml")
    with warehouse.open_reader(wh) as con:
        assert stored_config_in_force(con).currency == "USD"
    versions = _run(["config", "versions", "-w", str(wh)], tmp_path)
    assert versions.returncode == 0, versions.stderr
    assert "config version(s) 1 name no currency; they were accepted and are read as USD" in " ".join(
        versions.stderr.split()), versions.stderr
    path = tmp_path / "gpuledger.yaml"
    path.write_text(_config(price='"2.50"'))
    loaded = _run(["config", "load", "-c", str(path), "-w", str(wh)], tmp_path)
    assert loaded.returncode == 0 and "unchanged" in loaded.stdout, loaded.stdout + loaded.stderr


def test_a_version_hashed_by_an_older_release_is_the_same_content_after_an_upgrade(tmp_path):
    """A release that adds a config key (with its default) fingerprints the same file differently:
    the stored text is read again, so the same file is neither refused as different nor stored twice."""
    from gpuledger import warehouse
    from gpuledger.config import parse_config_text
    from gpuledger.ledger.config_versions import config_in_force, ensure_config, load_version

    text = _config(price='"2.50"')
    path = tmp_path / "gpuledger.yaml"
    path.write_text(text)
    wh = tmp_path / "w.duckdb"
    with warehouse.open_writer(wh) as con:
        load_version(con, parse_config_text(text), text=text, source=str(path))
        con.execute("UPDATE config_versions SET content_sha256 = repeat('0', 64)")  # as the older release hashed it
        assert config_in_force(con, path, write=False).version == 1  # not refused as "differs"
        assert load_version(con, parse_config_text(text), text=text, source=str(path)).added is False
        # nor by the simulator's writer (`simulate warehouse`, `make demo` again after an upgrade)
        assert ensure_config(con, parse_config_text(text)) == 1
