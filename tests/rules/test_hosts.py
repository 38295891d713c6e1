"""The host rule (gpuledger.rules.hosts): one spelling of a host for every source, its polars
form the same function, and the places that had their own copy now agreeing with it."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from gpuledger.rules.hosts import canonical_host, canonical_host_expr, canonical_host_series

# (as a source spells it, as the warehouse keeps it), each derived from the rule by hand:
# trim, lower case, drop one trailing dot; an IP address (v4, v6 with %zone) stays whole;
# anything else is cut at its first dot; empty is no host.
CASES = [
    ("node-003", "node-003"),
    ("Node-003.cluster.local", "node-003"),
    ("ip-10-0-1-7.ec2.internal", "ip-10-0-1-7"),
    ("10.0.1.7", "10.0.1.7"),
    ("10.0.0.7.", "10.0.0.7"),
    ("fe80::1%eth0", "fe80::1%eth0"),
    ("::", "::"),
    (" NODE.", "node"),
    ("1.2.3", "1"),  # three parts: not an address
    ("1.2.3.999", "1"),  # 999 is no octet: a name, cut at its first dot
    ("1.2.3.4.5", "1"),
    ("node-1.:x", "node-1"),  # a colon alone does not make an address
    ("\u0663.\u0663.\u0663.\u0663", "\u0663"),  # Arabic-Indic digits: not an IPv4 address
    ("a%b.c", "a%b"),
    (".", None),
    ("", None),
    ("  ", None),
    (None, None),
]


@pytest.mark.parametrize(("name", "host"), CASES)
def test_canonical_host(name, host):
    assert canonical_host(name) == host


def test_polars_forms_are_the_same_rule_over_the_same_cases():
    names = [n for n, _ in CASES]
    expected = [h for _, h in CASES]
    frame = pl.DataFrame({"host": names}, schema={"host": pl.String})
    assert frame.lazy().select(canonical_host_expr("host")).collect()["host"].to_list() == expected
    assert canonical_host_series(frame["host"]).to_list() == expected


def test_scrape_cleaner_keeps_what_the_rule_keeps():
    # clean_wide (the text-path scrape) had its own regex: "node-1.:x" stayed whole there
    from gpuledger.ingest.metrics.dcgm_fields import clean_wide

    raw = pl.DataFrame({"host": ["node-1.:x", "1.2.3.999", "Node-3.lab"]})
    assert clean_wide(raw).collect()["host"].to_list() == ["node-1", "1", "node-3"]


def test_kubernetes_node_named_by_its_ip_keeps_the_whole_address():
    # ingest/tiers.py cut every name at its first dot: node 10.0.1.7 became host "10"
    from gpuledger.ingest.tiers import node_label_rows

    nodes = [{"metadata": {"name": "10.0.1.7", "labels": {"karpenter.sh/capacity-type": "spot"}}},
             {"metadata": {"name": "ip-10-0-1-8.ec2.internal"}}]
    rows = node_label_rows(nodes, cluster="c", now=datetime(2026, 11, 1))
    assert rows["host"].to_list() == ["10.0.1.7", "ip-10-0-1-8"]
