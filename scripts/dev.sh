#!/usr/bin/env bash
# `make dev`: a live demo in its own folder (data/dev/: warehouse, config, Dagster home, alerts).
# The simulator serves dcgm-exporter endpoints (one port per node) whose clock starts
# CATCH_UP_HOURS in the past and runs SPEED times faster until it reaches now (then real time);
# the scrape service stores a round every second (30 simulated seconds while catching up); Dagster's
# webserver and daemon run the pipelines with schedules and sensors on, so squatting findings and
# their alerts appear within minutes; a local receiver writes each alert to data/dev/alerts.txt.
# Ctrl-C stops every process this script started.
#
#   GPUS=16 SPEED=30 EXPORTER_PORT=9400 UI_PORT=3000 DASHBOARD_PORT=8501 ALERT_PORT=8025 scripts/dev.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${BIN:-$ROOT/.venv/bin}
GPUS=${GPUS:-16}
SPEED=${SPEED:-30}
CATCH_UP_HOURS=${CATCH_UP_HOURS:-3}
EXPORTER_PORT=${EXPORTER_PORT:-9400}
UI_PORT=${UI_PORT:-3000}
DASHBOARD_PORT=${DASHBOARD_PORT:-8501}
ALERT_PORT=${ALERT_PORT:-8025}
DEV_DIR=${DEV_DIR:-$ROOT/data/dev}
SIM_START=${SIM_START:-$(date -u -d "$CATCH_UP_HOURS hours ago" +%Y-%m-%dT%H:%M:%S)}

# Its own warehouse and Dagster home: the Makefile exports GPULEDGER_WAREHOUSE (make demo's) and
# DAGSTER_HOME (the repository) for the other targets; make dev never writes into those.
export GPULEDGER_WAREHOUSE=${DEV_WAREHOUSE:-$DEV_DIR/gpuledger.duckdb}
export DAGSTER_HOME=$DEV_DIR/dagster
export GPULEDGER_CONFIG=$DEV_DIR/gpuledger.yaml
export GPULEDGER_ALERT_DEV_ALERTS_URL="json://127.0.0.1:$ALERT_PORT/alerts"
export GPULEDGER_SCRAPE_SERVICE=1  # the scrape service below scrapes; Dagster's ingest_job does not
export GPULEDGER_STATEMENTS_DIR=$DEV_DIR/statements
mkdir -p "$DAGSTER_HOME"
# ./dagster.yaml (SQLite, run monitoring, the one-writer queue) with its storage in this home
sed "s#\.dagster/#$DAGSTER_HOME/#g" dagster.yaml >"$DAGSTER_HOME/dagster.yaml"
"$BIN/python" scripts/dev_setup.py --out "$DEV_DIR" --gpus "$GPUS" --port "$EXPORTER_PORT" \
    --sim-start "$SIM_START" --dashboard-url "http://127.0.0.1:$DASHBOARD_PORT"

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
    echo "make dev: stopped the exporters, the scrape service, Dagster, the dashboards and the alert receiver"
}
trap stop INT TERM EXIT

# each in its own process group (set -m), so stopping one stops everything it started
set -m
"$BIN/python" scripts/dev_alert_receiver.py --port "$ALERT_PORT" --out "$DEV_DIR/alerts.txt" &
pids+=($!)
"$BIN/gpuledger" simulate serve --gpus "$GPUS" --port "$EXPORTER_PORT" --sim-start "$SIM_START" \
    --speed "$SPEED" --catch-up --timestamps --config "$GPULEDGER_CONFIG" &
pids+=($!)
# the high-frequency loop outside Dagster (README "Pipelines"): the one scraper of the targets;
# Dagster's ingest_job skips its scrape (GPULEDGER_SCRAPE_SERVICE, exported above)
"$BIN/gpuledger" ingest scrape --every 1s >"$DEV_DIR/scrape.log" 2>&1 &
pids+=($!)
"$BIN/dagster" dev -m gpuledger.pipelines.definitions --host 127.0.0.1 --port "$UI_PORT" &
pids+=($!)
"$BIN/streamlit" run dashboards/app.py --server.headless true --server.address 127.0.0.1 \
    --server.port "$DASHBOARD_PORT" --browser.gatherUsageStats false &
pids+=($!)
set +m

cat <<MSG

  Dagster UI:   http://127.0.0.1:$UI_PORT   (Automation: ingest_schedule every minute,
                analytics_schedule / squatting_schedule every 5 minutes, job_csv_sensor,
                alerts_after_analytics_sensor)
  dashboards:   http://127.0.0.1:$DASHBOARD_PORT   (Streamlit, local mode; /squatters shows findings)
  alerts:       $DEV_DIR/alerts.txt   (tail -f it: the first squatting warning within ~10 minutes)
  exporters:    http://127.0.0.1:$EXPORTER_PORT/metrics ... ($GPUS simulated GPUs; simulated time from
                $SIM_START UTC at x$SPEED until it reaches now, then real time)
  warehouse:    $GPULEDGER_WAREHOUSE
  config:       $GPULEDGER_CONFIG      Dagster home: $DAGSTER_HOME
  Ctrl-C stops everything.

MSG
wait -n "${pids[@]}" || true
