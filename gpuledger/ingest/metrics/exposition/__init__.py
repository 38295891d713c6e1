"""The exposition parser package: a line-tolerant parser for dcgm-exporter's Prometheus text format, and the long -> wide step that
both DCGM sources (the ``/metrics`` scrape and the Prometheus backfill) share.

Why our own parser: ``prometheus_client.parser`` raises on the first bad line, so one truncated or
mis-quoted line would sink a whole scrape. This parser judges each line on its own, sends each bad
line to quarantine with a reason, and is also much faster (benchmarks/ingest_bench.py, BENCHMARKS.md
"Ingestion"): the rules are ``line_verdict``'s, applied line by line by ``parse_exposition_lines`` and,
for a large text, to whole columns by ``bulk`` (each distinct label set parsed once).

What is refused (one ``Reject`` per line, the rest of the page still lands):

* truncated lines, unbalanced quotes, malformed label sets, a value that is not a number;
* NaN / +-Inf values; negative or absurd values (a ratio above 1 after unit conversion, power above
  5 kW, ...). DCGM *blank* sentinels are not refused: they become NULL (``gpuledger.ingest.metrics.dcgm_fields``);
* label values longer than ``MAX_LABEL_LEN`` characters;
* a series repeated in one page (the first copy is kept);
* an explicit timestamp more than ``max_future_s`` after the scrape time;
* a DCGM series without a device identity (no ``UUID`` or no host label).

Unknown metrics are not refused: non-DCGM families (``go_*``, ``process_*``) are skipped silently,
DCGM fields the warehouse does not store (``DCGM_FI_DEV_XID_ERRORS``, PCIe counters, ...) are counted
in ``ParsedPage.unknown_dcgm`` so the caller can report them, since a default exporter sends ~25
families and quarantining the unstored ones on every scrape would drown the real problems.

Label spellings: ``Hostname`` / ``hostname``; Kubernetes ``namespace`` / ``pod_namespace``,
``pod`` / ``pod_name``, ``container`` / ``container_name``; Prometheus' ``exported_*`` renames win
over the plain label (the plain one then names the scrape target, not the GPU's workload).
"""

from __future__ import annotations

from gpuledger.ingest.metrics.exposition.bulk import parse_exposition_bulk
from gpuledger.ingest.metrics.exposition.lines import (
    DEFAULT_MAX_FUTURE_S,
    DEVICE_ATTRS,
    JOB_COLUMNS,
    JOB_ORDER,
    MAX_LABEL_LEN,
    SERIES_COLUMNS,
    SERIES_SCHEMA,
    ParsedPage,
    Reject,
    line_verdict,
    normalize_labels,
    parse_exposition_lines,
    parse_labels,
    series_frame,
)
from gpuledger.ingest.metrics.exposition.wide import (
    device_level_once,
    inventory_from_wide,
    long_to_wide,
    mig_fraction,
    series_long_to_wide,
    wide_rows,
)

# below this many characters (~200 sample lines) parse_exposition reads line by line: faster there
BULK_FROM_CHARS = 50_000

__all__ = ["BULK_FROM_CHARS", "DEFAULT_MAX_FUTURE_S", "DEVICE_ATTRS", "JOB_COLUMNS", "JOB_ORDER", "MAX_LABEL_LEN",
           "SERIES_COLUMNS", "SERIES_SCHEMA", "ParsedPage", "Reject", "device_level_once", "inventory_from_wide",
           "line_verdict", "long_to_wide", "mig_fraction", "normalize_labels", "parse_exposition",
           "parse_exposition_lines", "parse_labels", "series_frame", "series_long_to_wide", "wide_rows"]


def parse_exposition(
    text: str,
    *,
    scrape_ms: int,
    max_future_s: float = DEFAULT_MAX_FUTURE_S,
) -> ParsedPage:
    """Parse a dcgm-exporter page. Samples without an explicit timestamp get ``scrape_ms``
    (epoch milliseconds). Every line is either kept, skipped (comment, non-DCGM family, unstored DCGM
    field) or refused with a reason; nothing raises on bad input.

    The bulk parser (``bulk``) handles the well-formed lines with whole-column polars
    operations and sends every other line through ``line_verdict``, the per-line rules of
    ``parse_exposition_lines``; both give the same page (tests/ingest/test_exposition_bulk.py). A
    small text (one 8-GPU node's page is ~25 kB) goes line by line, where that is quicker."""
    if len(text) < BULK_FROM_CHARS:  # one small page: the bulk path's fixed cost (~90 polars calls) is more
        return parse_exposition_lines(text, scrape_ms=scrape_ms, max_future_s=max_future_s)

    return parse_exposition_bulk(text, scrape_ms=scrape_ms, max_future_s=max_future_s)
