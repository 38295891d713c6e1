"""PromQL names and label matchers as a user writes them in options and the config: checked once,
here, below both (``--cluster-label``, ``sources.prometheus.clusters.<name>.selector``)."""

from __future__ import annotations

import re

from gpuledger.errors import UsageError

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_MATCHERS = re.compile(rf"^{_MATCHER}(?:,{_MATCHER})*,?\s*$")


def check_label(label: str, where: str = "") -> str:
    """``label`` when it is a Prometheus label name, else a UsageError saying what one is."""
    if not LABEL_NAME.match(label or ""):
        raise UsageError(f"{where + ' ' if where else ''}{label!r} is not a Prometheus label name (letters, "
                         "digits and _, not starting with a digit), e.g. cluster")
    return label


def check_selector(selector: str, where: str) -> str:
    """PromQL label matchers without braces, e.g. ``cluster="east"`` or ``k8s_cluster=~"eu-.*",env="prod"``
    (braces around them are dropped); else a UsageError showing how to write them."""
    text = selector.strip().removeprefix("{").removesuffix("}")
    if not _MATCHERS.match(text):
        raise UsageError(f"{where} {selector!r} is not a list of PromQL label matchers; write it as "
                         'cluster="east" (several: cluster="east",region=~"eu-.*")')
    return text.strip()


def label_selector(label: str, value: str) -> str:
    """``label="value"`` with the value escaped as PromQL strings are."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'{label}="{escaped}"'
