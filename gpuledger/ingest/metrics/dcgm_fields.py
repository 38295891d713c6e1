"""The DCGM field catalog and the shared cleaner for DCGM samples.

Everything that reads DCGM numbers (the simulator's warehouse writer, the `/metrics` scrape parser,
the Prometheus backfill) goes through this module, so that a metric name, its unit and its warehouse
column are decided in one table (design.md, "Input facts to design for"):

* ``FIELDS``: one row per exporter metric name, old spelling (dcgm-exporter <= 4.8: percent, MiB,
  mJ, MHz) and the DCGM 4.7 / exporter 4.9+ spelling (ratio, bytes, J, Hz). Each row says which
  warehouse column it feeds and the factor that turns the exported unit into the column's unit.
* Sentinel detection: DCGM reports "no value" as *blank* constants near the top of the type's range
  (int64 ``0x7ffffffffffffff0``.., int32 ``0x7ffffff0``.., fp64 ``2^47``..). They become NULL.
* Host canonicalization: ``Hostname="node-003"`` and ``hostname="node-003.cluster.local"`` are the
  same machine; the warehouse keeps the short lower-case name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import polars as pl

from gpuledger.rules.hosts import canonical_host, canonical_host_expr

# --- blank (sentinel) values, from dcgm_structs.h -------------------------------------------------
DCGM_INT32_BLANK = 0x7FFFFFF0  # .. 0x7FFFFFFF: blank / not found / not supported / no permission
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0  # .. 0x7FFFFFFFFFFFFFFF
DCGM_FP64_BLANK = 140737488355328.0  # 2^47, and the next few values above it
# Anything at or above 2^62 is treated as a blank whatever the field's type: no real DCGM reading
# (energy in mJ included) comes near it, and float64 rounds the int64 blanks up to 2^63.
SENTINEL_FLOOR = float(2**62)

Kind = Literal["gauge", "counter"]
DcgmType = Literal["int64", "int32", "fp64"]


@dataclass(frozen=True)
class Field:
    """One exported metric: how to read it into the warehouse.

    ``column`` is the gpu_samples column it feeds (``None``: exported but not stored, or only an
    input to a derived column such as ``fb_total_bytes``). ``to_column`` multiplies the exported
    value into the column's unit. ``device_level`` marks values that MIG instances repeat from
    their physical GPU (power, energy) instead of reporting their own.
    """

    metric: str
    column: str | None
    unit: str  # unit as exported: ratio, percent, MiB, bytes, W, mJ, J, MHz, Hz, C
    to_column: float
    kind: Kind
    dcgm_type: DcgmType
    help: str
    generation: Literal["legacy", "dcgm4.7"]
    device_level: bool = False
    meaning: str = ""  # unit-free key shared by the old and the new spelling


_MIB = float(2**20)

# The renamed spellings (generation "dcgm4.7") follow the exporter 4.9+ convention of naming the
# unit in the metric; verify them against the exporter's default-counters.csv when a real 4.9+
# scrape is available. Parsers should also accept a unit read from the HELP text (unit_from_help).
FIELDS: tuple[Field, ...] = (
    # activity (profiling fields are ratios in both generations)
    Field("DCGM_FI_PROF_SM_ACTIVE", "sm_active_ratio", "ratio", 1.0, "gauge", "fp64",
          "The ratio of cycles an SM has at least 1 warp assigned.", "legacy", meaning="sm_active"),
    Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gr_engine_active_ratio", "ratio", 1.0, "gauge", "fp64",
          "Ratio of time the graphics engine is active.", "legacy", meaning="gr_engine_active"),
    Field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor_active_ratio", "ratio", 1.0, "gauge", "fp64",
          "Ratio of cycles the tensor (HMMA) pipe is active.", "legacy", meaning="tensor_active"),
    Field("DCGM_FI_PROF_DRAM_ACTIVE", "dram_active_ratio", "ratio", 1.0, "gauge", "fp64",
          "Ratio of cycles the device memory interface is active sending or receiving data.",
          "legacy", meaning="dram_active"),
    Field("DCGM_FI_DEV_GPU_UTIL", "gpu_util_ratio", "percent", 0.01, "gauge", "int32",
          "GPU utilization (in %).", "legacy", meaning="gpu_util"),
    Field("DCGM_FI_DEV_GPU_UTIL_RATIO", "gpu_util_ratio", "ratio", 1.0, "gauge", "fp64",
          "GPU utilization (ratio 0-1).", "dcgm4.7", meaning="gpu_util"),
    # memory
    Field("DCGM_FI_DEV_FB_USED", "fb_used_bytes", "MiB", _MIB, "gauge", "int64",
          "Framebuffer memory used (in MiB).", "legacy", meaning="fb_used"),
    Field("DCGM_FI_DEV_FB_FREE", None, "MiB", _MIB, "gauge", "int64",
          "Framebuffer memory free (in MiB).", "legacy", meaning="fb_free"),
    Field("DCGM_FI_DEV_FB_RESERVED", None, "MiB", _MIB, "gauge", "int64",
          "Framebuffer memory reserved (in MiB).", "legacy", meaning="fb_reserved"),
    Field("DCGM_FI_DEV_FB_USED_BYTES", "fb_used_bytes", "bytes", 1.0, "gauge", "int64",
          "Framebuffer memory used (in bytes).", "dcgm4.7", meaning="fb_used"),
    Field("DCGM_FI_DEV_FB_FREE_BYTES", None, "bytes", 1.0, "gauge", "int64",
          "Framebuffer memory free (in bytes).", "dcgm4.7", meaning="fb_free"),
    Field("DCGM_FI_DEV_FB_RESERVED_BYTES", None, "bytes", 1.0, "gauge", "int64",
          "Framebuffer memory reserved (in bytes).", "dcgm4.7", meaning="fb_reserved"),
    # power and energy (device level: every MIG instance repeats its GPU's value)
    Field("DCGM_FI_DEV_POWER_USAGE", "power_w", "W", 1.0, "gauge", "fp64",
          "Power draw (in W).", "legacy", device_level=True, meaning="power"),
    Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_total_j", "mJ", 0.001, "counter", "int64",
          "Total energy consumption since boot (in mJ).", "legacy", device_level=True, meaning="energy"),
    Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_JOULES", "energy_total_j", "J", 1.0, "counter", "fp64",
          "Total energy consumption since boot (in J).", "dcgm4.7", device_level=True, meaning="energy"),
    # exported, not stored in gpu_samples (kept for the parser and for realistic /metrics pages)
    Field("DCGM_FI_DEV_SM_CLOCK", None, "MHz", 1e6, "gauge", "int32",
          "SM clock frequency (in MHz).", "legacy", device_level=True, meaning="sm_clock_hz"),
    Field("DCGM_FI_DEV_SM_CLOCK_HZ", None, "Hz", 1.0, "gauge", "int64",
          "SM clock frequency (in Hz).", "dcgm4.7", device_level=True, meaning="sm_clock_hz"),
    Field("DCGM_FI_DEV_GPU_TEMP", None, "C", 1.0, "gauge", "int32",
          "GPU temperature (in C).", "legacy", device_level=True, meaning="gpu_temp_c"),
)

FIELDS_BY_METRIC: dict[str, Field] = {f.metric: f for f in FIELDS}

# The warehouse column fb_total_bytes is derived: used + free + reserved (design.md; DCGM's own
# FB_TOTAL excludes nothing but is not exported by default).
FB_PARTS = ("fb_used", "fb_free", "fb_reserved")

# Exporter labels naming the host (the others: exposition.lines, normalize_labels and K8S_SPELLINGS).
HOST_LABELS = ("Hostname", "hostname")

_HELP_UNIT = re.compile(r"\(in ([A-Za-z%]+)\)")
_UNIT_WORDS = {"%": "percent", "MiB": "MiB", "MB": "MiB", "mJ": "mJ", "J": "J", "W": "W",
               "MHz": "MHz", "Hz": "Hz", "C": "C", "bytes": "bytes", "B": "bytes"}
# Factor from a unit to the base unit of its meaning (ratio, bytes, J, W, Hz, C).
UNIT_TO_BASE = {"ratio": 1.0, "percent": 0.01, "MiB": _MIB, "bytes": 1.0, "mJ": 0.001, "J": 1.0,
                "W": 1.0, "MHz": 1e6, "Hz": 1.0, "C": 1.0}


def unit_from_help(help_text: str) -> str | None:
    """The unit a HELP line names, e.g. ``"Power draw (in W)."`` -> ``"W"``; None when it names none."""
    match = _HELP_UNIT.search(help_text or "")
    return _UNIT_WORDS.get(match.group(1)) if match else None




# --- sentinels ---------------------------------------------------------------------------------


def blank_expr(column: str, dcgm_type: DcgmType = "int64") -> pl.Expr:
    """True where a raw exported value of ``column`` is a DCGM blank (sentinel), in the field's
    exported unit: any value >= 2^62; fp64 fields also from 2^47 (DCGM_FP64_BLANK); int32 fields
    also in 0x7ffffff0..0x7fffffff. NaN and infinities count as blank too."""
    c = pl.col(column).cast(pl.Float64)
    blank = c.is_nan() | c.is_infinite() | (c >= SENTINEL_FLOOR)
    if dcgm_type == "fp64":
        blank = blank | (c >= DCGM_FP64_BLANK)
    elif dcgm_type == "int32":
        blank = blank | ((c >= DCGM_INT32_BLANK) & (c <= 0x7FFFFFFF))
    return blank.fill_null(False)


# --- hosts (the rule: gpuledger.rules.hosts) ----------------------------------------------------
def host_from_labels(labels: dict[str, str]) -> str | None:
    """Canonical host from whichever host label spelling a series carries."""
    for key in HOST_LABELS:
        if labels.get(key):
            return canonical_host(labels[key])
    return None


# --- the cleaner -------------------------------------------------------------------------------
def clean_wide(raw: pl.DataFrame | pl.LazyFrame, *, host_column: str | None = "host") -> pl.LazyFrame:
    """Raw exported values -> warehouse sample columns.

    ``raw`` has one column per exported metric (named as exported, any generation, values in the
    exported unit, blanks included) plus key/label columns that pass through unchanged. Blanks
    become NULL, units become the column's (ratio, bytes, W, J), ``fb_total_bytes`` is used + free +
    reserved, and ``host_column`` (if given) is canonicalized. When both generations of a meaning
    are present, the first non-null wins (new spelling first).
    """
    lf = raw.lazy()
    names = lf.collect_schema().names()
    present = [FIELDS_BY_METRIC[n] for n in names if n in FIELDS_BY_METRIC]
    by_meaning: dict[str, list[pl.Expr]] = {}
    for f in sorted(present, key=lambda f: f.generation != "dcgm4.7"):
        value = pl.when(blank_expr(f.metric, f.dcgm_type)).then(None).otherwise(
            pl.col(f.metric).cast(pl.Float64) * UNIT_TO_BASE[f.unit]
        )
        by_meaning.setdefault(f.meaning, []).append(value)
    exprs: list[pl.Expr] = []
    for meaning, values in by_meaning.items():
        column = next(f.column for f in present if f.meaning == meaning)
        merged = pl.coalesce(values) if len(values) > 1 else values[0]
        name = column or f"_{meaning}"
        exprs.append(merged.alias(name))
    lf = lf.with_columns(exprs).drop([f.metric for f in present])
    have = set(lf.collect_schema().names())
    if all(f"_{p}" in have or p == "fb_used" for p in FB_PARTS) and "fb_used_bytes" in have:
        parts = [pl.col("fb_used_bytes")] + [pl.col(f"_{p}") for p in FB_PARTS[1:]]
        lf = lf.with_columns(pl.sum_horizontal(parts).alias("fb_total_bytes")
                             .fill_null(strategy="zero"))
        # a blank in any part makes the total unknown
        lf = lf.with_columns(
            pl.when(pl.any_horizontal([p.is_null() for p in parts])).then(None)
            .otherwise(pl.col("fb_total_bytes")).alias("fb_total_bytes")
        )
    int_cols = [c for c in ("fb_used_bytes", "fb_total_bytes") if c in lf.collect_schema().names()]
    lf = lf.with_columns([pl.col(c).round(0).cast(pl.Int64) for c in int_cols])
    lf = lf.drop([c for c in lf.collect_schema().names() if c.startswith("_")])
    if host_column and host_column in lf.collect_schema().names():
        lf = lf.with_columns(canonical_host_expr(host_column))
    return lf
