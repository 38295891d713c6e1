"""The dcgm-exporter text format: live ``/metrics`` pages and OpenMetrics backfill files.

Series carry the labels the real exporter sets: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, on MIG ``GPU_I_PROFILE`` / ``GPU_I_ID``, the host label (``Hostname`` or, after a
node's exporter upgrade, ``hostname`` with the FQDN), ``DCGM_FI_DRIVER_VERSION``, and with a job on the
device the Kubernetes ``container`` / ``namespace`` / ``pod`` or the Slurm ``hpc_job`` label.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TextIO

import numpy as np
import polars as pl

from gpuledger.ingest.metrics import dcgm_fields as dcgm
from gpuledger.simulator import dirt
from gpuledger.simulator.cluster import DRIVER_VERSION
from gpuledger.simulator.labels import job_labels
from gpuledger.simulator.signals import raw_values

# Families in the order dcgm-exporter's default counters list them.
EXPORTED = (
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
)


def _label_expr() -> pl.Expr:
    """The label text of a series, from device, host-label and job columns."""
    def q(col):
        return pl.col(col).cast(pl.String)

    mig = pl.col("mig_instance_id") >= 0
    return pl.concat_str(
        [
            pl.lit('gpu="'), q("gpu_index"), pl.lit('",UUID="'), q("gpu_uuid"),
            pl.lit('",pci_bus_id="'), q("pci_bus_id"), pl.lit('",device="nvidia'), q("gpu_index"),
            pl.lit('",modelName="'), q("model_name"), pl.lit('"'),
            pl.when(mig).then(pl.concat_str([pl.lit(',GPU_I_PROFILE="'), q("mig_profile"),
                                              pl.lit('",GPU_I_ID="'), q("mig_instance_id"), pl.lit('"')])),
            pl.when(pl.col("new_host"))
            .then(pl.concat_str([pl.lit(',hostname="'), q("host"), pl.lit(dirt.FQDN_SUFFIX + '"')]))
            .otherwise(pl.concat_str([pl.lit(',Hostname="'), q("host"), pl.lit('"')])),
            pl.lit(f',DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'),
            pl.when(pl.col("pod").is_not_null()).then(pl.concat_str(
                [pl.lit(',container="'), q("container"), pl.lit('",namespace="'), q("namespace"),
                 pl.lit('",pod="'), q("pod"), pl.lit('"')])),
            pl.when(pl.col("hpc_job").is_not_null()).then(
                pl.concat_str([pl.lit(',hpc_job="'), q("hpc_job"), pl.lit('"')])),
        ],
        ignore_nulls=True,
    ).alias("labels")


def _value_expr(metric: str) -> pl.Expr:
    """The value as the exporter prints it: integers for integer fields, blanks kept verbatim."""
    field = dcgm.FIELDS_BY_METRIC[metric]
    v = pl.col(metric)
    blank = str(dcgm.DCGM_INT64_BLANK) if field.dcgm_type != "fp64" else "9.223372036854776e+18"
    shown = (v.round(0).cast(pl.Int64).cast(pl.String) if field.dcgm_type != "fp64"
             else v.round(6).cast(pl.String))
    return pl.when(v >= dcgm.SENTINEL_FLOOR).then(pl.lit(blank)).otherwise(shown).alias("value")


def series_frame(sim, ts: np.ndarray, nodes: Iterable[int] | None = None, *, gaps: bool) -> pl.DataFrame:
    """Long frame: t, node, labels and one column per exported metric, for devices of ``nodes``."""
    hw = sim.hardware
    ts = np.asarray(ts, dtype=np.int64)
    rv = raw_values(sim, ts, None if nodes is None else np.asarray(list(nodes)))
    node = hw.dev_node[rv.devices][:, None]
    keep = np.ones((len(rv.devices), len(ts)), dtype=bool)
    if gaps:
        keep &= ~dirt.gap_mask(sim, node, ts[None, :])
    new_host = dirt.uses_new_host_label(sim, node, ts[None, :])
    cols = {
        "device_idx": np.broadcast_to(rv.devices[:, None], keep.shape)[keep].astype(np.int32),
        "t": np.broadcast_to(ts[None, :], keep.shape)[keep],
        "job": rv.job[keep],
        "new_host": new_host[keep],
    }
    cols.update({m: rv.metrics[m][keep] for m in EXPORTED})
    frame = pl.DataFrame(cols)
    info = hw.devices.select("device_idx", "node", "host", "gpu_index", "gpu_uuid", "pci_bus_id",
                             "model_name", "mig_profile", "mig_instance_id")
    return (frame.join(info, on="device_idx", how="left")
            .join(job_labels(sim), on="job", how="left")
            .with_columns(_label_expr())
            .select("t", "node", "device_idx", "labels", *EXPORTED))


def metrics_page(sim, node: int, t: int, *, timestamps: bool = False) -> str:
    """The ``/metrics`` page of one node's exporter at epoch second ``t`` (floored to the interval).

    ``timestamps``: end every sample line with the sample's time in epoch milliseconds (the real
    exporter does not; it makes Prometheus store the simulated time instead of its scrape time)."""
    t = int(t) - int(t) % sim.interval_s
    stamp = f" {t * 1000}" if timestamps else ""
    frame = series_frame(sim, np.array([t]), [node], gaps=False)
    out: list[str] = []
    for metric in EXPORTED:
        field = dcgm.FIELDS_BY_METRIC[metric]
        out.append(f"# HELP {metric} {field.help}")
        out.append(f"# TYPE {metric} {field.kind}")
        lines = frame.select(pl.concat_str([pl.lit(metric + "{"), pl.col("labels"), pl.lit("} "),
                                            _value_expr(metric), pl.lit(stamp)]).alias("line"))["line"]
        out.extend(lines.to_list())
    return "\n".join(out) + "\n"


def write_openmetrics(sim, out: TextIO, t0: int, t1: int, *, chunk_steps: int = 240,
                      metrics: Sequence[str] | None = None, stream: bool = False, blanks: bool = True) -> int:
    """Write an OpenMetrics file for [t0, t1) epoch s: every family once, each series' samples in
    time order with timestamps (seconds), scrape gaps missing, ``# EOF`` last. Returns samples written.

    ``metrics``: only these families (default all of ``EXPORTED``). ``stream``: write each chunk of
    ``chunk_steps`` timestamps as soon as it is computed (memory of one chunk, not of the span);
    families and series then interleave chunk by chunk, which ``promtool tsdb create-blocks-from
    openmetrics`` accepts (each series stays in time order). ``blanks=False`` leaves DCGM's blank
    readings out (no sample) instead of writing the sentinel value, which PromQL's sums and maxima
    would otherwise take as a reading of 9.2e18.

    The energy counter is exported as a gauge (its exporter name lacks OpenMetrics' ``_total``
    suffix; Prometheus stores it the same way either way).
    """
    families = tuple(EXPORTED if metrics is None else metrics)
    unknown = [m for m in families if m not in EXPORTED]
    if unknown:
        raise ValueError(f"not an exported family: {', '.join(unknown)} (known: {', '.join(EXPORTED)})")
    ts = np.arange(t0 - (t0 - sim.start_s) % sim.interval_s, t1, sim.interval_s, dtype=np.int64)
    ts = ts[ts >= t0]
    chunks = (series_frame(sim, ts[i:i + chunk_steps], None, gaps=True) for i in range(0, len(ts), chunk_steps))
    if not stream:
        parts = list(chunks)
        chunks = iter([pl.concat(parts)] if parts else [])
    written = 0
    headed: set[str] = set()
    for frame in chunks:
        for metric in families:
            lines = _sample_lines(frame, metric, blanks)
            if metric not in headed:
                headed.add(metric)
                out.write(f"# HELP {metric} {dcgm.FIELDS_BY_METRIC[metric].help}\n")
                out.write(f"# TYPE {metric} gauge\n")
            if lines:
                out.write("\n".join(lines))
                out.write("\n")
            written += len(lines)
    for metric in families:  # a span without samples still names its families
        if metric not in headed:
            out.write(f"# HELP {metric} {dcgm.FIELDS_BY_METRIC[metric].help}\n")
            out.write(f"# TYPE {metric} gauge\n")
    out.write("# EOF\n")
    return written


def _sample_lines(frame: pl.DataFrame, metric: str, blanks: bool) -> list[str]:
    """One family's sample lines of ``frame``, by series then time."""
    if frame.is_empty():
        return []
    if not blanks:
        frame = frame.filter(pl.col(metric) < dcgm.SENTINEL_FLOOR)
    return (frame.select("labels", "t", _value_expr(metric))
            .sort(["labels", "t"], maintain_order=True)
            .select(pl.concat_str([pl.lit(metric + "{"), pl.col("labels"), pl.lit("} "),
                                   pl.col("value"), pl.lit(" "), pl.col("t").cast(pl.String)])
                    .alias("line"))["line"].to_list())
