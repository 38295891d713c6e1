#!/bin/sh
# gpuledger-holdings.sh start|end — record which GPUs a Slurm job holds on this node (issue 20).
#
# Run by slurmd as the Prolog (start) and Epilog (end), through prolog.sh / epilog.sh beside it.
# Writes one small file per event into the spool directory; `gpuledger ingest slurm-gpus --spool`
# reads them (idempotently: re-reading changes nothing). Records the job id, the node, the GPU
# indices Slurm gave the job (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES) and the UUID behind each
# index from `nvidia-smi --query-gpu=index,uuid`, or, on a node without a driver, from the GPU /
# UUID labels of the node's dcgm-exporter page.
#
# A recorder must never take a node down: Slurm drains a node whose prolog fails, so every error
# here is logged to stderr (slurmd's log) and the script still exits 0.
#
# Settings (environment, or the file $GPULEDGER_SLURM_GPUS_ENV, default /etc/gpuledger/slurm-gpus.env,
# whose values win):
#   GPULEDGER_GPU_SPOOL   spool directory (default /var/spool/gpuledger/slurm-gpus)
#   GPULEDGER_NVIDIA_SMI  nvidia-smi binary (default: nvidia-smi on PATH, /usr/bin/nvidia-smi)
#   GPULEDGER_DCGM_URL    the node's dcgm-exporter page (default http://localhost:9400/metrics)
# The file is read as KEY=value lines (blank lines and # comments allowed, a value may be quoted),
# never sourced: a typo cannot run a command or stop the script. A line that is not one of those
# three keys with a value is logged and skipped; the good lines beside it still apply.

event=${1:-}
conf=${GPULEDGER_SLURM_GPUS_ENV:-/etc/gpuledger/slurm-gpus.env}

warn() { echo "gpuledger-holdings: $*" >&2; }

read_settings() {  # $1: the file; sets the three known keys, warns about anything else
  n=0
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=$(printf '%s' "$line" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
    case $line in ''|'#'*) continue ;; esac
    key=${line%%=*}
    value=${line#*=}
    if [ "$key" = "$line" ]; then
      warn "$1 line $n: not KEY=value, skipped (write e.g. GPULEDGER_GPU_SPOOL=/var/spool/gpuledger/slurm-gpus)"
      continue
    fi
    case $value in \"*\") value=${value#\"}; value=${value%\"} ;; \'*\') value=${value#\'}; value=${value%\'} ;; esac
    case $key in
      GPULEDGER_GPU_SPOOL) GPULEDGER_GPU_SPOOL=$value ;;
      GPULEDGER_NVIDIA_SMI) GPULEDGER_NVIDIA_SMI=$value ;;
      GPULEDGER_DCGM_URL) GPULEDGER_DCGM_URL=$value ;;
      *) warn "$1 line $n: unknown setting '$key', skipped (known: GPULEDGER_GPU_SPOOL, GPULEDGER_NVIDIA_SMI, GPULEDGER_DCGM_URL)" ;;
    esac
  done < "$1"
}

[ -r "$conf" ] && read_settings "$conf"
spool=${GPULEDGER_GPU_SPOOL:-/var/spool/gpuledger/slurm-gpus}
smi=${GPULEDGER_NVIDIA_SMI:-$(command -v nvidia-smi 2>/dev/null || echo /usr/bin/nvidia-smi)}
dcgm_url=${GPULEDGER_DCGM_URL:-http://localhost:9400/metrics}

case $event in
  start|end) ;;
  *) warn "usage: $0 start|end (got '$event'); nothing recorded"; exit 0 ;;
esac
job=${SLURM_JOB_ID:-${SLURM_JOBID:-}}
if [ -z "$job" ]; then
  warn "no SLURM_JOB_ID in the environment: not run by slurmd? nothing recorded"
  exit 0
fi
node=${SLURMD_NODENAME:-$(hostname -s 2>/dev/null || hostname)}
devices=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
[ -n "$devices" ] || exit 0  # a job without GPUs holds none: nothing to record

# index -> UUID of this node's GPUs, one "index,uuid" a line: from nvidia-smi; when it is absent,
# fails (a driver/library mismatch, a hung GPU) or prints no such line, from the node's dcgm-exporter
table=""
how=none
if [ -x "$smi" ]; then
  if out=$(timeout 10 "$smi" --query-gpu=index,uuid --format=csv,noheader,nounits 2>/dev/null); then
    table=$(printf '%s\n' "$out" | tr -d ' ' | grep -E '^[0-9]+,(GPU|MIG)-' || true)
  fi
  if [ -n "$table" ]; then
    how=nvidia-smi
  else
    warn "$smi failed or printed no index,uuid lines; trying the dcgm-exporter page $dcgm_url"
  fi
fi
if [ -z "$table" ] && command -v curl >/dev/null 2>&1; then
  table=$(curl -fsS -m 3 "$dcgm_url" 2>/dev/null | awk '
    /^DCGM_FI_/ && /gpu="/ && /UUID="/ {
      g = $0; sub(/.*[{,]gpu="/, "", g); sub(/".*/, "", g)
      u = $0; sub(/.*UUID="/, "", u); sub(/".*/, "", u)
      if (!seen[g]++) print g "," u
    }')
  [ -n "$table" ] && how=dcgm
fi

if ! mkdir -p "$spool" 2>/dev/null; then
  warn "cannot create spool directory $spool; job $job not recorded"
  exit 0
fi
now=$(date -u +%s)
tmp=$(mktemp "$spool/.incoming.XXXXXX" 2>/dev/null) || { warn "cannot write in $spool; job $job not recorded"; exit 0; }
{
  printf 'format\tgpuledger-slurm-gpus/1\n'
  printf 'event\t%s\n' "$event"
  printf 'job_id\t%s\n' "$job"
  printf 'cluster\t%s\n' "${SLURM_CLUSTER_NAME:-}"
  printf 'node\t%s\n' "$node"
  printf 'time\t%s\n' "$now"
  printf 'job_gpus\t%s\n' "${SLURM_JOB_GPUS:-}"
  printf 'cuda_visible_devices\t%s\n' "${CUDA_VISIBLE_DEVICES:-}"
  printf 'uuid_source\t%s\n' "$how"
  echo "$devices" | tr ',' '\n' | while read -r dev; do
    [ -n "$dev" ] || continue
    case $dev in
      GPU-*|MIG-*) printf 'gpu\t\t%s\n' "$dev" ;;  # CUDA_VISIBLE_DEVICES may name UUIDs itself
      *) uuid=$(printf '%s\n' "$table" | awk -F, -v i="$dev" '$1 == i { print $2; exit }')
         printf 'gpu\t%s\t%s\n' "$dev" "$uuid" ;;
    esac
  done
} >"$tmp" 2>/dev/null && chmod 644 "$tmp" && mv -f "$tmp" "$spool/$job.$node.$now.$event" \
  || { warn "writing $spool/$job.$node.$now.$event failed; job $job not recorded"; rm -f "$tmp"; }
exit 0
