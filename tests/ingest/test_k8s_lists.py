"""The Kubernetes list pages' JSON: orjson's objects equal the standard parser's (issue 41's fast
path), and what orjson refuses still decodes as JSON does."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuledger.ingest.jobs.k8s_lists import decode

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)  # the API's widest integer (format int64)
LEAVES = st.none() | st.booleans() | INT64 | st.floats(allow_nan=False, allow_infinity=False) | st.text()
OBJECTS = st.recursive(LEAVES, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
                       max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(OBJECTS)
def test_a_page_decodes_as_the_standard_parser_reads_it(obj):
    body = json.dumps({"kind": "WorkloadList", "metadata": {"continue": "500:7"}, "items": [obj]})
    got = decode(body.encode())
    assert got == json.loads(body)
    assert repr(got) == repr(json.loads(body))  # same types too: 1 stays an int, 1.0 a float


def test_what_orjson_refuses_decodes_as_json_does():
    # a lone surrogate escape and a float beyond double range: orjson raises, json reads them
    for body in ('{"name": "\\ud800"}', '{"x": 1e400}'):
        assert decode(body.encode()) == json.loads(body)
