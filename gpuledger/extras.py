"""Optional parts of gpuledger and the extra that installs each (pyproject.toml
[project.optional-dependencies]). A command whose extra is missing says which one to install."""

from __future__ import annotations

import importlib
from types import ModuleType

# module -> (extra, what needs it)
EXTRAS = {
    "pynvml": ("agent", "reading GPUs through NVML"),
    "kubernetes": ("kubernetes", "talking to a Kubernetes API server"),
    "grpc": ("podresources", "reading the kubelet's PodResources API"),
    "google": ("podresources", "reading the kubelet's PodResources API"),
    "dagster": ("pipelines", "the Dagster pipelines"),
    "streamlit": ("dashboards", "the dashboards"),
    "openpyxl": ("reports", "XLSX statements"),
    "jinja2": ("reports", "HTML statements"),
    "apprise": ("alerts", "delivering alerts and e-mail"),
    "prometheus_client": ("alerts", "`gpuledger metrics serve`"),
}


class MissingExtra(RuntimeError):
    """An optional dependency is not installed; the message names the extra to install."""


def require(module: str) -> ModuleType:
    """Import ``module`` or raise MissingExtra naming `pip install 'gpuledger[EXTRA]'`."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        if exc.name is None or exc.name.split(".")[0] != top:
            raise  # the module is there but something it needs is broken: not an extras problem
        extra, purpose = EXTRAS.get(top, ("all", module))
        raise MissingExtra(f"{purpose} needs the `{top}` package, which is not installed: "
                           f"pip install 'gpuledger[{extra}]'") from None
