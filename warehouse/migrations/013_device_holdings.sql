-- 013: who held which device, as the scheduler side saw it (issue 20), independent of the labels
-- dcgm-exporter puts on samples: Slurm prolog/epilog records and `scontrol -d show job` (GRES
-- IDX), the kubelet's PodResources API. gpuledger.ingest.holdings turns these rows into
-- job_allocations (source = this row's source), which then take precedence over label-derived
-- allocations (gpuledger.ingest.device_links).
CREATE TABLE device_holdings (
    cluster          VARCHAR NOT NULL,
    source           VARCHAR NOT NULL,   -- slurm-prolog / slurm-scontrol / pod-resources
    scheduler_job    VARCHAR NOT NULL,   -- the Slurm JobID; namespace/pod on Kubernetes
    host             VARCHAR NOT NULL,   -- canonical host name (short, lower case)
    device_id        VARCHAR NOT NULL,   -- as reported: GPU-..., MIG-..., GPU-...::2, or index:N
    first_seen       TIMESTAMP NOT NULL, -- start of this holding (prolog time / first poll)
    last_seen        TIMESTAMP NOT NULL, -- newest observation (epilog time / latest poll)
    ended            BOOLEAN NOT NULL DEFAULT false, -- the end is known (epilog ran / gone from List)
    gpu_uuid         VARCHAR,            -- physical GPU UUID, when known
    mig_instance_id  INTEGER NOT NULL DEFAULT -1, -- GPU instance id; -1 = the whole GPU
    gpu_index        INTEGER,            -- the node's GPU index (nvidia-smi / Slurm IDX / DCGM `gpu`)
    share            DOUBLE,             -- requested fraction of a time-sliced device; NULL = whole
    pod_uid          VARCHAR,
    namespace        VARCHAR,
    pod              VARCHAR,
    container        VARCHAR,
    resource         VARCHAR,            -- nvidia.com/gpu, nvidia.com/mig-1g.10gb, gres/gpu
    PRIMARY KEY (cluster, source, scheduler_job, host, device_id, first_seen)
);
