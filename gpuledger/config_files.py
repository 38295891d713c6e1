"""Where the config file is: ``--config``, else ``$GPULEDGER_CONFIG``, else ``./gpuledger.yaml``,
else the example shipped in the package. Light on purpose (no pydantic, no polars): the CLI names
these in its help text before any command runs."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_ENV = "GPULEDGER_CONFIG"
LOCAL_CONFIG = Path("gpuledger.yaml")


def packaged_example_path() -> Path:
    from importlib import resources  # lazy: ~3 ms of every command's start, for the few that use the example

    return Path(str(resources.files("gpuledger.data") / "example-config.yaml"))


def resolve_config_path(path: str | os.PathLike | None = None) -> Path:
    """--config, else $GPULEDGER_CONFIG, else ./gpuledger.yaml, else the packaged example."""
    chosen = path or os.environ.get(CONFIG_ENV)
    if chosen:
        return Path(chosen)
    if LOCAL_CONFIG.exists():
        return LOCAL_CONFIG
    return packaged_example_path()


def example_config_text() -> str:
    from importlib import resources  # lazy: as above

    return (resources.files("gpuledger.data") / "example-config.yaml").read_text()
