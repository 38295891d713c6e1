"""Shared fixtures: a fresh warehouse file per test, the packaged example config."""

from __future__ import annotations

import pytest

from gpuledger.config import load_config
from tests.helpers.dashboard_rig import dashboard_warehouse  # noqa: F401 - one session fixture for both dashboard test files


@pytest.fixture
def warehouse_file(tmp_path):
    """Path of a warehouse that does not exist yet (writers create and migrate it)."""
    return tmp_path / "warehouse" / "gpuledger.duckdb"


@pytest.fixture(scope="session")
def example_config():
    return load_config(None)
