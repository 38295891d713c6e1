"""Host names: the one rule for how a GPU's host is spelled in the warehouse (``gpus.host``).

Sources spell a host their own way — dcgm-exporter's ``Hostname`` / ``hostname`` label, a
Kubernetes node name (``ip-10-0-1-7.ec2.internal``), NVML's ``socket.gethostname()``, a Slurm node
— and the same GPU must land on one host. The rule: trimmed, lower case, a trailing dot dropped;
an IP address (v4, or v6 with an optional ``%zone``) is kept whole; any other name is cut at its
first dot (``Node-003.cluster.local`` -> ``node-003``). Empty means no host (None).
"""

from __future__ import annotations

import ipaddress

import polars as pl

_IP_CHARS = frozenset("0123456789.")


def canonical_host(name: str | None) -> str | None:
    """The warehouse spelling of host ``name`` (see the module docstring); None for none."""
    if name is None:
        return None
    text = name.strip().lower().rstrip(".")
    if not text:
        return None
    head = text.split("%", 1)[0]
    # parsing an address costs ~7 us: only a name that could be one (digits and dots, or a colon)
    if ":" in head or _IP_CHARS.issuperset(head):
        try:
            ipaddress.ip_address(head)
            return text
        except ValueError:
            pass
    return text.split(".", 1)[0]


def canonical_host_series(hosts: pl.Series) -> pl.Series:
    """:func:`canonical_host` of every value (each distinct spelling computed once: a fleet has
    thousands of samples per host)."""
    distinct = hosts.drop_nulls().unique()
    canonical = pl.Series([canonical_host(h) for h in distinct.to_list()], dtype=pl.String)
    return hosts.replace_strict(distinct, canonical, default=None, return_dtype=pl.String)


def canonical_host_expr(column: str = "host") -> pl.Expr:
    """:func:`canonical_host` as a polars expression on ``column`` (the same function, not a
    second spelling of the rule)."""
    return pl.col(column).cast(pl.String).map_batches(canonical_host_series, return_dtype=pl.String).alias(column)
