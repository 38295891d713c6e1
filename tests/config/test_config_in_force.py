"""One config rule (issue 22 §2, issue 25): the warehouse's stored version is the config in force
for the CLI, the pipelines and the dashboards; a file change becomes a new version only through the
ledger's load (the path `config load` takes), said in the run's metadata; no file never loads the
packaged example over a stored config. A real warehouse file, real Dagster runs."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from gpuledger import warehouse
from gpuledger.config import ConfigError, example_config_text, parse_config_text
from gpuledger.config_store import stored_config
from gpuledger.ledger.config_versions import config_in_force, load_version


@pytest.fixture
def user_warehouse(tmp_path, monkeypatch):
    """A warehouse whose config is the user's (the example billed in EUR), run from a folder with
    no gpuledger.yaml and no $GPULEDGER_CONFIG."""
    monkeypatch.delenv("GPULEDGER_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    text = example_config_text().replace("currency: USD", "currency: EUR", 1)
    path = tmp_path / "data" / "w.duckdb"
    path.parent.mkdir()
    with warehouse.open_writer(path) as con:
        load_version(con, parse_config_text(text), text=text, source="/etc/gpuledger/site.yaml", by="alice")
    return path


def _versions(path: Path) -> list[tuple[int, str, str]]:
    with warehouse.open_reader(path) as con:
        return con.execute("SELECT version, source_path, loaded_by FROM config_versions ORDER BY version").fetchall()


def _reference_tables(path: Path, config: Path | None):
    from gpuledger.pipelines.defs.ingest.assets import reference_tables
    from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

    resources = {"warehouse": Warehouse(path=str(path)),
                 "gpuledger_config": GpuledgerConfig(path=str(config) if config else None, warehouse_path=str(path))}
    result = dg.materialize([reference_tables], resources=resources, instance=dg.DagsterInstance.ephemeral())
    assert result.success
    [event] = result.get_asset_materialization_events()
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_run_without_a_config_file_keeps_the_stored_config(user_warehouse):
    # issue 25: `pipelines run-once` here loaded the packaged example as version 2, over the user's
    meta = _reference_tables(user_warehouse, None)
    assert _versions(user_warehouse) == [(1, "/etc/gpuledger/site.yaml", "alice")]
    assert meta["config_version"] == 1 and meta["new_version"] is False
    assert "no config file given" in meta["config_in_force"] and "stays in force" in meta["config_in_force"]


def test_a_changed_file_becomes_a_new_version_through_the_ledger_and_says_so(user_warehouse, tmp_path):
    edited = tmp_path / "gpuledger.yaml"  # the folder's own file: the pipelines read it each run
    edited.write_text(example_config_text().replace("currency: USD", "currency: GBP", 1))
    meta = _reference_tables(user_warehouse, None)
    assert [(v, by) for v, _, by in _versions(user_warehouse)] == [(1, "alice"), (2, "dagster")]
    assert meta["new_version"] is True and meta["config_in_force"].endswith("loaded as config version 2")
    again = _reference_tables(user_warehouse, None)  # the same content: no new version
    assert again["new_version"] is False and len(_versions(user_warehouse)) == 2


def test_pipeline_assets_read_the_stored_version_not_the_file(user_warehouse, tmp_path):
    from gpuledger.pipelines.defs.resources import GpuledgerConfig

    other = tmp_path / "other.yaml"
    other.write_text(example_config_text().replace("currency: USD", "currency: CHF", 1))
    # until reference_tables loads it, the file is not in force: the stored EUR config is
    assert GpuledgerConfig(path=str(other), warehouse_path=str(user_warehouse)).load().currency == "EUR"
    assert GpuledgerConfig(path=None, warehouse_path=str(user_warehouse)).load().currency == "EUR"


def test_dashboards_use_the_stored_config_for_roles_and_policy(user_warehouse, tmp_path):
    # the dashboards read ./gpuledger.yaml for roles and policy and the stored version for chargeback
    from gpuledger.dashboards.queries import config_in_force as dashboards_config

    (tmp_path / "gpuledger.yaml").write_text(example_config_text().replace("currency: USD", "currency: JPY", 1))
    assert dashboards_config(str(user_warehouse)).currency == "EUR"


def test_cli_refuses_a_differing_file_and_keeps_the_stored_one_without(user_warehouse, tmp_path):
    from gpuledger.ledger.config_versions import ConfigMismatch

    other = tmp_path / "other.yaml"
    other.write_text(example_config_text())
    with warehouse.open_reader(user_warehouse) as con:
        assert config_in_force(con, None, write=False).config.currency == "EUR"
        with pytest.raises(ConfigMismatch, match="config load"):
            config_in_force(con, other, write=False)


def test_a_stored_config_that_no_longer_validates_is_named_not_swallowed(user_warehouse):
    # ingest's job checks swallowed every exception here and went on with the defaults
    from gpuledger.ingest.jobs.checks import job_limits

    with warehouse.open_writer(user_warehouse) as con:
        con.execute("UPDATE config_versions SET content_text = 'currency: [', content_sha256 = 'x' WHERE version = 1")
    with warehouse.open_reader(user_warehouse) as con:
        assert stored_config(con).version == 1
        with pytest.raises(ConfigError, match="warehouse config version 1"):
            job_limits(con)


def test_a_reader_reads_the_stored_config_once_a_writer_every_time(user_warehouse):
    # issue 41: `report squatters` read it twice (the command's config, then the findings' rules),
    # each time behind a duckdb_tables() probe. A reader's file cannot change while it is open
    # (writers wait for it), so its first read stands; a writer's connection sees each new version.
    with warehouse.open_reader(user_warehouse) as con:
        first = stored_config(con)
        assert first.version == 1 and first.loaded_by == "alice"
        assert stored_config(con) is first  # the same object: read once
        assert stored_config(con, 1) == first and stored_config(con, 2) is None
    text = example_config_text()
    with warehouse.open_writer(user_warehouse) as con:
        assert stored_config(con).version == 1
        load_version(con, parse_config_text(text), text=text, source="/etc/gpuledger/new.yaml", by="bob")
        assert stored_config(con).loaded_by == "bob"  # not a memo of the first read
    with warehouse.open_reader(user_warehouse) as con:  # a new reader: the new version
        assert (stored_config(con).version, stored_config(con).loaded_by) == (2, "bob")
