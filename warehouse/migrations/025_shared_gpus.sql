-- 025: shared GPUs (issue 39).
-- The GPU memory a job on a shared GPU asked for: HAMi's nvidia.com/gpumem (MiB per vGPU) × its
-- vGPUs. Kept beside the GPU share it is charged by (nvidia.com/gpucores / 100 × vGPUs, in
-- jobs.gpus), never charged itself. NULL: the job named no GPU memory.
ALTER TABLE jobs ADD COLUMN gpu_memory_mib DOUBLE;
-- Each pod's own activity on a time-shared GPU or MIG instance, from dcgm-exporter's virtual-GPU
-- mode (--kubernetes-virtual-gpus): one copy of each series per pod holding the device, and from
-- 4.6 on the pod's own DCGM_FI_DEV_GPU_UTIL (its processes' SM utilization, NVML per process) and
-- DCGM_FI_DEV_FB_USED. Kept only where two or more pods share the device at that moment (one pod
-- is gpu_samples' own). gpu_util_ratio NULL where the page repeated the device's value on every pod.
CREATE TABLE pod_gpu_samples (
    gpu_id          INTEGER NOT NULL,
    ts              TIMESTAMP NOT NULL,  -- UTC
    namespace       VARCHAR NOT NULL,
    pod             VARCHAR NOT NULL,
    container       VARCHAR,
    gpu_util_ratio  DOUBLE,              -- share of the whole device's time the pod's kernels ran, 0..1
    fb_used_bytes   BIGINT,              -- the pod's own framebuffer
    PRIMARY KEY (gpu_id, ts, namespace, pod)
);
