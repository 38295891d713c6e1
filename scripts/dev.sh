#!/usr/bin/env bash
# `make dev`: a live demo. The simulator serves dcgm-exporter endpoints (one port per node), the
# Dagster webserver and daemon run the pipelines with schedules and sensors on: samples arrive every
# minute, analytics refresh every five, squatting findings appear. Ctrl-C stops every process this
# script started.
#
#   GPUS=16 EXPORTER_PORT=9400 UI_PORT=3000 scripts/dev.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${BIN:-$ROOT/.venv/bin}
GPUS=${GPUS:-16}
EXPORTER_PORT=${EXPORTER_PORT:-9400}
UI_PORT=${UI_PORT:-3000}
DASHBOARD_PORT=${DASHBOARD_PORT:-8501}
DEV_DIR=${DEV_DIR:-$ROOT/data/dev}
SIM_START=${SIM_START:-$(date -u +%Y-%m-%dT%H:%M:%S)}

export DAGSTER_HOME=${DAGSTER_HOME:-$ROOT}          # ./dagster.yaml; runs and logs under .dagster/
export GPULEDGER_WAREHOUSE=${GPULEDGER_WAREHOUSE:-$DEV_DIR/gpuledger.duckdb}
export GPULEDGER_CONFIG=$DEV_DIR/gpuledger.yaml
mkdir -p "$DEV_DIR"
"$BIN/python" scripts/dev_setup.py --out "$DEV_DIR" --gpus "$GPUS" --port "$EXPORTER_PORT" --sim-start "$SIM_START"

pids=()
descendants() {  # every process below the given ones (Dagster runs may sit in their own groups)
    local pid child
    for pid in "$@"; do
        for child in $(ps -o pid= --ppid "$pid" 2>/dev/null); do
            echo "$child"
            descendants "$child"
        done
    done
}
any_alive() {
    local pid
    for pid in "${pids[@]}"; do kill -0 -- "-$pid" 2>/dev/null && return 0; done
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && return 0; done
    return 1
}
stop() {
    trap - INT TERM EXIT
    local pid tree
    tree=$(descendants "${pids[@]}")
    # SIGINT first: what Ctrl-C sends, and what `dagster dev` shuts its webserver, daemon, code
    # server and runs down on; whatever is left after 30 s is killed.
    for pid in "${pids[@]}"; do kill -INT -- "-$pid" 2>/dev/null || true; done
    for _ in $(seq 60); do any_alive $tree || break; sleep 0.5; done
    for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
    for pid in $tree; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    echo "make dev: stopped the exporters, Dagster and the dashboards"
}
trap stop INT TERM EXIT

# each in its own process group (set -m), so stopping one stops everything it started
set -m
"$BIN/gpuledger" simulate serve --gpus "$GPUS" --port "$EXPORTER_PORT" --sim-start "$SIM_START" \
    --config "$GPULEDGER_CONFIG" &
pids+=($!)
"$BIN/dagster" dev -m gpuledger.pipelines.definitions --host 127.0.0.1 --port "$UI_PORT" &
pids+=($!)
"$BIN/streamlit" run dashboards/app.py --server.headless true --server.address 127.0.0.1 \
    --server.port "$DASHBOARD_PORT" --browser.gatherUsageStats false &
pids+=($!)
set +m

cat <<MSG

  Dagster UI:   http://127.0.0.1:$UI_PORT   (Automation: ingest_schedule every minute,
                analytics_schedule / squatting_schedule every 5 minutes, job_csv_sensor)
  dashboards:   http://127.0.0.1:$DASHBOARD_PORT   (Streamlit, local mode; figures refresh every minute)
  exporters:    http://127.0.0.1:$EXPORTER_PORT/metrics ... ($GPUS simulated GPUs)
  warehouse:    $GPULEDGER_WAREHOUSE      config: $GPULEDGER_CONFIG
  Ctrl-C stops everything.

MSG
wait -n "${pids[@]}" || true
