"""Each pod's own activity on a shared GPU, from dcgm-exporter's virtual-GPU mode.

With ``--kubernetes-virtual-gpus`` the exporter writes one copy of every series per pod holding a
time-shared GPU (or MIG instance), labelled with the pod (and ``vgpu``, the replica). From 4.6 on,
two of them are the pod's own: ``DCGM_FI_DEV_GPU_UTIL`` (the SM utilization of the pod's processes,
NVML per process: the share of the device's time its kernels ran) and ``DCGM_FI_DEV_FB_USED`` (its
processes' framebuffer); every other field repeats the device's value. Older releases repeat the
device's utilization on every pod too (NVIDIA/dcgm-exporter#587), which would count a device's
activity once per holder.

So: a (device, moment) held by two or more pods gives one row per pod. Its utilizations are the
pods' own only when they can be: they add up to at most the whole device, and they are not one
non-zero value repeated on every pod; otherwise the utilization is NULL (unknown) for that moment,
and :func:`per_pod_rows` counts it. On a MIG instance (per-process memory only, and GPU_UTIL reads
0 on MIG) the utilization is always NULL. The samples table keeps one row per device as before
(exposition.long_to_wide); these rows go to ``pod_gpu_samples``.
"""

from __future__ import annotations

import polars as pl

from gpuledger.ingest.device_links import link_devices_for_samples

# exported name -> (column, scale to the stored unit)
PER_POD_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_ratio", 0.01),  # percent
    "DCGM_FI_DEV_GPU_UTIL_RATIO": ("gpu_util_ratio", 1.0),  # DCGM 4.7 names (exporter 4.9+)
    "DCGM_FI_DEV_FB_USED": ("fb_used_bytes", 1024.0 * 1024.0),  # MiB
    "DCGM_FI_DEV_FB_USED_BYTES": ("fb_used_bytes", 1.0),
}
BLANK_FROM = 1e15  # DCGM's blank sentinels sit near 2^31 / 2^63 in the exported unit: never a reading
POD_SCHEMA = {"gpu_uuid": pl.String, "mig_instance_id": pl.Int32, "ts": pl.Datetime("us"), "namespace": pl.String,
              "pod": pl.String, "container": pl.String, "gpu_util_ratio": pl.Float64, "fb_used_bytes": pl.Int64}
SUM_SLACK = 0.02  # two pods' per-process readings may overshoot the whole by a rounding step each


def per_pod_rows(long: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Long samples (metric, value, ts, gpu_uuid, mig_instance_id, namespace, pod, container) →
    (one row per pod on a (device, ts) two or more pods hold (POD_SCHEMA), the number of those
    (device, ts) whose utilizations were repeats of the device's and are left NULL)."""
    if long.is_empty() or "pod" not in long.columns or long["pod"].null_count() == long.height:
        return pl.DataFrame(schema=POD_SCHEMA), 0  # no Kubernetes labels: the common page, cheaply
    named = long.select("gpu_uuid", "mig_instance_id", "pod").filter(pl.col("pod").is_not_null())
    if named.select(pl.struct(pl.all()).n_unique()).item() == \
            named.select(pl.struct("gpu_uuid", "mig_instance_id").n_unique()).item():
        return pl.DataFrame(schema=POD_SCHEMA), 0  # one pod per device: nothing shared
    scale = {name: s for name, (_, s) in PER_POD_FIELDS.items()}
    column = {name: c for name, (c, _) in PER_POD_FIELDS.items()}
    rows = (long.lazy()
            .filter(pl.col("metric").is_in(list(PER_POD_FIELDS)) & pl.col("pod").is_not_null()
                    & pl.col("namespace").is_not_null())
            .with_columns(pl.col("ts").cast(pl.Datetime("us")),
                          column=pl.col("metric").replace_strict(column, return_dtype=pl.String),
                          value=pl.when(pl.col("value").abs() < BLANK_FROM)
                          .then(pl.col("value") * pl.col("metric").replace_strict(scale, return_dtype=pl.Float64)))
            .group_by("gpu_uuid", "mig_instance_id", "ts", "namespace", "pod", "column")
            .agg(pl.col("container").first(), pl.col("value").first())
            .collect())
    if rows.is_empty():
        return pl.DataFrame(schema=POD_SCHEMA), 0
    wide = rows.pivot(on="column", index=["gpu_uuid", "mig_instance_id", "ts", "namespace", "pod", "container"],
                      values="value", aggregate_function="first")
    for col in ("gpu_util_ratio", "fb_used_bytes"):
        if col not in wide.columns:
            wide = wide.with_columns(pl.lit(None, pl.Float64).alias(col))
    device = ["gpu_uuid", "mig_instance_id", "ts"]
    util = pl.col("gpu_util_ratio")
    wide = wide.with_columns(_pods=pl.len().over(device)).filter(pl.col("_pods") >= 2).with_columns(
        _repeated=(util.sum().over(device) > 1.0 + SUM_SLACK)
        | ((util.n_unique().over(device) == 1) & (util.max().over(device) > 0) & util.is_not_null().all().over(device)))
    repeated = wide.filter(pl.col("_repeated")).select(device).unique().height
    # on a MIG instance the exporter has no per-process utilization, and DCGM's GPU_UTIL reads 0
    # there anyway: the pods' memory only
    mig = pl.col("mig_instance_id").fill_null(-1) >= 0
    out = wide.with_columns(gpu_util_ratio=pl.when(~pl.col("_repeated") & ~mig).then(util.clip(0.0, 1.0)),
                            fb_used_bytes=pl.col("fb_used_bytes").round(0))
    return out.select(list(POD_SCHEMA)).cast(POD_SCHEMA).sort([*device, "namespace", "pod"]), repeated


def shared_device_points(points: pl.DataFrame, series: pl.DataFrame) -> pl.DataFrame:
    """The bulk parser's points (``series`` numbered) of the per-pod fields of devices whose series
    name two or more pods, in long form: found on the series (a few per device), so a round of
    pages without shared GPUs joins nothing."""
    if "pod" not in series.columns or series["pod"].null_count() == series.height:
        return pl.DataFrame()
    shared = series.filter(pl.col("pod").is_not_null()
                           & (pl.col("pod").n_unique().over("gpu_uuid", "mig_instance_id") >= 2))
    if shared.is_empty():
        return pl.DataFrame()
    wanted = points.filter(pl.col("metric").is_in(list(PER_POD_FIELDS)) & pl.col("series").is_in(shared["series"]))
    return wanted.drop("page", strict=False).join(shared, on="series", how="inner")


def store_pod_rows(con, rows: pl.DataFrame, *, cluster: str) -> int:
    """Insert per-pod rows of devices the warehouse knows (the same batch registered them); a
    (device, ts, pod) already stored is kept. Returns rows offered."""
    if rows.is_empty():
        return 0
    con.register("_pod_rows", rows.to_arrow())
    try:
        con.execute(
            "INSERT INTO pod_gpu_samples SELECT g.gpu_id, r.ts, r.namespace, r.pod, r.container, r.gpu_util_ratio, "
            "r.fb_used_bytes FROM _pod_rows r JOIN gpus g ON g.cluster = ? AND g.gpu_uuid = r.gpu_uuid "
            "AND g.mig_instance_id = coalesce(r.mig_instance_id, -1) ON CONFLICT DO NOTHING", [cluster]).fetchall()
    finally:
        con.unregister("_pod_rows")

    link_devices_for_samples(con, rows)  # each pod of a shared device gets the device
    return rows.height
