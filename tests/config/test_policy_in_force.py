"""One "policy in force" (issue 40): on a warehouse never given a config, config_store.policy_in_force
(ingest, the ledger, the exporter ask it) gives the policy of the same file the CLI's readers take
(ledger.config_versions.config_in_force), not bare defaults that differ from it."""

from __future__ import annotations

from gpuledger import warehouse
from gpuledger.config import Policy
from gpuledger.config_files import example_config_text
from gpuledger.config_store import policy_in_force
from gpuledger.ledger.config_versions import config_in_force


def test_a_warehouse_without_a_config_has_one_policy_in_force(warehouse_file, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no ./gpuledger.yaml here: the packaged example
    monkeypatch.delenv("GPULEDGER_CONFIG", raising=False)
    with warehouse.open_writer(warehouse_file):
        pass  # a migrated warehouse, no config loaded
    with warehouse.open_reader(warehouse_file) as con:
        reader = config_in_force(con, None, write=False).config.policy
        assert policy_in_force(con) == reader
    # the example's policy is not the bare defaults (the case the two answers used to split on)
    assert reader != Policy()
    # a ./gpuledger.yaml is what both take next
    local = tmp_path / "gpuledger.yaml"
    local.write_text(example_config_text().replace("window_days: 7", "window_days: 3"))
    with warehouse.open_reader(warehouse_file) as con:
        assert policy_in_force(con).usage.window_days == 3
        assert config_in_force(con, None, write=False).config.policy == policy_in_force(con)
