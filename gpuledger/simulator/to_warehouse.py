"""Write a simulated cluster into the warehouse: reference data, inventory, jobs, allocations and
samples in time chunks, through the same cleaner a real scrape uses (gpuledger.ingest.metrics.dcgm_fields.clean_wide).

Idempotent: every table is written on its natural key, so a rerun changes no row counts. Dirt is
cleaned, not skipped: blanks become NULL, host spellings are canonicalized before samples are matched
to their device, late samples arrive one write later and a copy of them once more (first value wins).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import numpy as np
import polars as pl

from gpuledger import warehouse
from gpuledger.ingest.metrics import dcgm_fields as dcgm
from gpuledger.ingest.tiers import apply_tier_rules, store_node_labels
from gpuledger.ledger.config_versions import ensure_config
from gpuledger.simulator import dirt
from gpuledger.simulator.labels import job_labels, node_labels
from gpuledger.simulator.scenario import SimCluster
from gpuledger.simulator.signals import raw_values

SOURCE = "simulator"
CELLS_PER_CHUNK = 100_000  # device x timestamp cells per chunk (~35 MB): a chunk fits a reader's turn (BENCHMARKS, Storage)
_EPOCH_US = 1_000_000


def chunk_bounds(sim: SimCluster, cells: int = CELLS_PER_CHUNK) -> list[tuple[int, int]]:
    """[t0, t1) epoch-second chunks covering the window, aligned to the sample interval."""
    steps = max(1, cells // max(1, sim.hardware.n_devices))
    width = steps * sim.interval_s
    return [(t, min(t + width, sim.end_s)) for t in range(sim.start_s, sim.end_s, width)]


def raw_samples(sim: SimCluster, t0: int, t1: int, nodes=None) -> pl.DataFrame:
    """The raw stream for [t0, t1): one row per delivered (device, t), exporter units and spellings.

    Columns: device_idx, t (epoch s), host (as the exporter labels it), gpu_uuid, mig_instance_id,
    job (index, -1 idle), late (arrives one write later) and one column per legacy DCGM metric.
    Scrape gaps are already missing; blanks and the energy reset are in the values.
    """
    hw = sim.hardware
    first = t0 + (-(t0 - sim.start_s)) % sim.interval_s
    ts = np.arange(first, t1, sim.interval_s, dtype=np.int64)
    rv = raw_values(sim, ts, nodes)
    node = hw.dev_node[rv.devices][:, None]
    keep = ~dirt.gap_mask(sim, node, ts[None, :])
    new_host = dirt.uses_new_host_label(sim, node, ts[None, :])
    late = dirt.late_mask(sim, node, ts[None, :])
    dev_grid = np.broadcast_to(rv.devices[:, None], keep.shape)[keep]
    t_grid = np.broadcast_to(ts[None, :], keep.shape)[keep]
    columns = {"device_idx": dev_grid.astype(np.int32), "t": t_grid, "job": rv.job[keep],
               "new_host": new_host[keep], "late": late[keep]}
    columns.update({name: values[keep] for name, values in rv.metrics.items()})
    frame = pl.DataFrame(columns)
    info = hw.devices.select("device_idx", "host", "gpu_uuid", "mig_instance_id")
    return frame.join(info, on="device_idx", how="left").with_columns(
        pl.when(pl.col("new_host")).then(pl.col("host") + dirt.FQDN_SUFFIX).otherwise(pl.col("host"))
        .alias("host")
    ).drop("new_host")


def clean_samples(raw: pl.DataFrame, devices: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """Raw stream -> gpu_samples rows: the shared DCGM cleaner, then match on (host, UUID, GPU_I_ID).

    ``devices`` maps (host, gpu_uuid, mig_instance_id) -> gpu_id (canonical hosts); ``labels`` maps
    job index -> namespace / pod / container / hpc_job. Rows matching no device raise, naming them.
    """
    metrics = [f.metric for f in dcgm.FIELDS if f.metric in raw.columns]
    cleaned = dcgm.clean_wide(raw.select("host", "gpu_uuid", "mig_instance_id", "t", "job", *metrics))
    out = (
        cleaned.join(devices.lazy(), on=["host", "gpu_uuid", "mig_instance_id"], how="left")
        .join(labels.lazy(), on="job", how="left")
        .with_columns((pl.col("t") * _EPOCH_US).cast(pl.Datetime("us")).alias("ts"))
        .collect()
    )
    unmatched = out.filter(pl.col("gpu_id").is_null())
    if unmatched.height:
        raise ValueError(f"{unmatched.height} samples match no registered device, e.g. "
                         f"{unmatched.select('host', 'gpu_uuid', 'mig_instance_id').row(0)}")
    return out.select("gpu_id", "ts", *warehouse.writes.SAMPLE_METRIC_COLUMNS,
                      *warehouse.writes.SAMPLE_LABEL_COLUMNS)


def delivered_batches(sim: SimCluster, cells: int = CELLS_PER_CHUNK) -> Iterator[tuple[int, pl.DataFrame]]:
    """(chunk end epoch s, raw rows delivered in that write): late rows move one write later and
    are sent again the write after that (a duplicate copy)."""
    held = pl.DataFrame()
    resend = pl.DataFrame()
    for t0, t1 in chunk_bounds(sim, cells):
        raw = raw_samples(sim, t0, t1)
        on_time = raw.filter(~pl.col("late"))
        late = raw.filter(pl.col("late"))
        batch = pl.concat([b for b in (on_time, held, resend) if b.height], how="vertical")
        resend, held = held, late
        yield t1, batch
    tail = pl.concat([b for b in (held, resend) if b.height], how="vertical") if (held.height or resend.height) else None
    if tail is not None:
        yield sim.end_s, tail


def jobs_frame(sim: SimCluster) -> pl.DataFrame:
    """jobs table rows (updated_at = the window end, so reruns write identical rows)."""
    def ts(col):
        return (pl.col(col) * _EPOCH_US).cast(pl.Datetime("us"))

    return sim.workload.jobs.select(
        pl.lit(sim.cluster).alias("cluster"), "job_id", "project", "user_name", "name", "kind",
        "gpu_model", "gpus", "min_runtime_s", ts("submit_s").alias("submit_time"),
        ts("start_s").alias("start_time"), ts("end_s").alias("end_time"), "state", "priority",
        "namespace", "partition", "time_limit_s", pl.lit(SOURCE).alias("source"),
        pl.lit(sim.end).cast(pl.Datetime("us")).alias("updated_at"),
    )


def allocations_frame(sim: SimCluster, gpu_ids: np.ndarray) -> pl.DataFrame:
    """job_allocations rows: one per (job, device) interval; end NULL while still held."""
    hw, wl = sim.hardware, sim.workload
    dev = hw.lane_device[wl.alloc_lane]
    end = np.where(wl.alloc_end >= sim.end_s, -1, wl.alloc_end)
    frame = pl.DataFrame({
        "job": wl.alloc_job, "gpu_id": gpu_ids[dev].astype(np.int32),
        "start_s": wl.alloc_start, "end_s": end, "gpu_fraction": hw.lane_share[wl.alloc_lane],
    })
    return frame.join(sim.workload.jobs.with_row_index("job").select(pl.col("job").cast(pl.Int64), "job_id"),
                      on="job").select(
        pl.lit(sim.cluster).alias("cluster"), "job_id", "gpu_id",
        (pl.col("start_s") * _EPOCH_US).cast(pl.Datetime("us")).alias("start_time"),
        pl.when(pl.col("end_s") >= 0).then(pl.col("end_s") * _EPOCH_US).cast(pl.Datetime("us")).alias("end_time"),
        "gpu_fraction",
    )


def provenance(sim: SimCluster) -> tuple[str, str]:
    """(scope, position) naming what was simulated: cluster and window, and the seed and demand
    regime every figure drawn from it depends on (`warehouse summary` shows it)."""
    scope = f"{sim.cluster} {sim.start:%Y-%m-%dT%H:%M}..{sim.end:%Y-%m-%dT%H:%M}"
    return scope, f"seed {sim.seed}, regime {sim.workload.regime}"


def provenance_frame(sim: SimCluster) -> pl.DataFrame:
    """The ingest_checkpoints row recording :func:`provenance` (source ``simulator``)."""
    scope, position = provenance(sim)
    return pl.DataFrame({"source": [SOURCE], "scope": [scope], "position": [position],
                         "updated_at": [sim.end]}, schema={"source": pl.String, "scope": pl.String,
                                                           "position": pl.String, "updated_at": pl.Datetime("us")})


def node_label_frame(sim: SimCluster) -> pl.DataFrame:
    """node_labels rows for the simulated nodes (as the Kubernetes ingest would store them)."""
    labels = node_labels(sim)
    return pl.DataFrame({"cluster": [sim.cluster] * len(labels), "host": list(labels),
                         "labels_json": [json.dumps(v, sort_keys=True) for v in labels.values()],
                         "updated_at": [sim.end] * len(labels)},
                        schema={"cluster": pl.String, "host": pl.String, "labels_json": pl.String,
                                "updated_at": pl.Datetime("us")})


def close_earlier_windows(con, sim: SimCluster) -> int:
    """End the jobs an earlier simulated window of this cluster left open where that window ended.

    The simulator does not carry jobs from one window into the next: a job still running (or
    pending) when its window ended would otherwise hold its GPUs for ever, on top of the new
    window's jobs on the same GPUs. Such jobs become CANCELLED at their window's end (their
    ``updated_at``), their open allocations end there too. Jobs of this window or a later one
    (updated_at after this window's start) are left alone, so a rerun of a window is idempotent.
    Returns the number of jobs closed.
    """
    args = [sim.cluster, SOURCE, sim.start]
    stale = con.sql(  # duckdb 2.0: relations (not execute results) hand over to polars
        "SELECT * FROM jobs WHERE cluster = ? AND source = ? AND end_time IS NULL AND updated_at <= ?", params=args,
    ).pl()
    if stale.is_empty():
        return 0
    ended = stale.with_columns(pl.col("updated_at").alias("end_time"), pl.lit("CANCELLED").alias("state"))
    held = con.sql(
        "SELECT a.*, j.updated_at AS _window_end FROM job_allocations a JOIN jobs j USING (cluster, job_id) "
        "WHERE j.cluster = ? AND j.source = ? AND j.end_time IS NULL AND j.updated_at <= ? AND a.end_time IS NULL",
        params=args,
    ).pl()
    warehouse.upsert(con, "jobs", ended)
    if held.height:
        warehouse.upsert(con, "job_allocations",
                         held.with_columns(pl.col("_window_end").alias("end_time")).drop("_window_end"))
    return stale.height


def write_simulation(
    con,
    sim: SimCluster,
    *,
    on_chunk: Callable[[int, int], None] | None = None,
    cells: int = CELLS_PER_CHUNK,
) -> dict[str, int]:
    """Write the whole simulation; ``on_chunk(done_s, total_s)`` reports progress.

    Returns the warehouse's row counts afterwards.
    """
    # The warehouse's config must be the simulation's (stored when the warehouse has none): a
    # simulation never replaces a config behind the user's back.
    ensure_config(con, sim.config, source="(simulator)")
    inventory = sim.hardware.inventory().with_columns(
        pl.lit(sim.start).cast(pl.Datetime("us")).alias("first_seen"),
        pl.lit(sim.end).cast(pl.Datetime("us")).alias("last_seen"),
    )
    registered = warehouse.register_gpus(con, inventory)
    store_node_labels(con, node_label_frame(sim))  # capacity-type labels -> pricing tiers
    apply_tier_rules(con, cluster=sim.cluster)
    ids = sim.hardware.devices.select("gpu_uuid", "mig_instance_id", "device_idx").join(
        registered.select("gpu_uuid", "mig_instance_id", "gpu_id"), on=["gpu_uuid", "mig_instance_id"])
    gpu_ids = np.zeros(sim.hardware.n_devices, dtype=np.int64)
    gpu_ids[ids["device_idx"].to_numpy()] = ids["gpu_id"].to_numpy()
    close_earlier_windows(con, sim)
    warehouse.upsert(con, "ingest_checkpoints", provenance_frame(sim))
    warehouse.upsert(con, "jobs", jobs_frame(sim))
    warehouse.upsert(con, "job_allocations", allocations_frame(sim, gpu_ids))
    devices = registered.select("host", "gpu_uuid", "mig_instance_id", "gpu_id")
    labels = job_labels(sim)
    total = sim.end_s - sim.start_s
    for t_end, raw in delivered_batches(sim, cells):
        warehouse.write_samples(con, clean_samples(raw, devices, labels), SOURCE)
        warehouse.yield_to_readers(con, after_s=0.5)  # a chunk takes ~1 s: readers wait < 2 s
        if on_chunk:
            on_chunk(t_end - sim.start_s, total)
    return warehouse.table_counts(con)
