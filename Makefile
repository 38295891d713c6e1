# gpuledger — `make demo` and `make test` work on a fresh machine: they build .venv when absent.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export GPULEDGER_WAREHOUSE ?= data/gpuledger.duckdb
export DAGSTER_HOME ?= $(CURDIR)
# where the dashboards' /what-if page looks for `gpuledger whatif schedule --format json --out` results
export GPULEDGER_WHATIF_DIR ?= reports/whatif
DASHBOARD_PORT ?= 8501

.PHONY: demo dev dashboard test test-fast install test-deps bench clean

# constraints.txt pins every dependency (the image installs the same: scripts/lock-constraints.sh)
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
# setuptools >= 80 ends every editable install of a package-dir mapping with a 10-line
# "BuildBackendWarning: Editable installation" (folders named like the package may shadow it: ours
# are mapped into gpuledger.*, so none can); the awk drops that block and pip's Location lines.
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]' 2>&1 | awk '/BuildBackendWarning: Editable installation/ {skip = 1} \
	  !skip && !/^WARNING: Location/ {print} /with strategy, WheelFile/ {skip = 0}' || true
	$(BIN)/python -c "import gpuledger.warehouse, polars, duckdb, dagster, streamlit, kubernetes"
	touch $(STAMP)

install: $(STAMP)

test-deps:
	bash scripts/install-test-deps.sh

# Two workers: much of the suite waits on real servers; a test file, and the files sharing a
# session rig, stay on one worker (tests/conftest.py). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
PYTEST_PAR := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))

test: install test-deps
	$(BIN)/python -m pytest -q $(PYTEST_PAR)

# The fast tier while editing (under 3 minutes here): everything not marked slow. Tests mirror the
# packages (tests/<area>/), so `$(BIN)/python -m pytest -q tests/<area>` runs one area.
test-fast: install
	$(BIN)/python -m pytest -q $(PYTEST_PAR) -m "not slow"

demo: install
	@echo "a week of a busy 256-GPU cluster scheduled under gpuledger's policy (fair share, a queue per GPU pool):"
	@echo "each research team keeps ~2.5x its share of GPUs asked for (Ai2's regime; seed 42, regime ai2-backlog);"
	@echo "production inference replicas follow traffic (0.7x the serving team's share through the day)"
	$(BIN)/gpuledger simulate warehouse --gpus 256 --days 7 --seed 42
	$(BIN)/gpuledger warehouse summary
	$(BIN)/gpuledger report fairshare
	$(BIN)/gpuledger report budget
	$(BIN)/gpuledger report squatters
	mkdir -p reports
	$(BIN)/gpuledger report chargeback --period 2026-11 --format csv --out reports/chargeback-2026-11.csv
	$(BIN)/gpuledger report chargeback --period 2026-11 --format parquet --out reports/chargeback-2026-11.parquet
	@echo "enforcement over the simulated week (a what-if: nothing is sent): each squatter is warned, and preempted as a"
	@echo "squatter once a warning is 15 min old; an unfunded one may go sooner, in its first warning's cycle, for waiting"
	@echo "funded work (a demand preemption); exempt inference never"
	$(BIN)/gpuledger enforce replay --every 1h --only-when-idle
	@echo "this cycle's plan, made without a scheduler's live view: it preempts nothing and says why (--observe BACKEND)"
	$(BIN)/gpuledger enforce plan --now data --format json --out reports/enforcement-plan.json
	$(BIN)/gpuledger report statement --period 2026-11 --out reports/statement-2026-11
	$(BIN)/gpuledger pipelines run-once
# the scheduling what-if of the whole simulated week (about 12,200 jobs on 256 GPUs, policies 1/2/3: a few
# seconds) for the dashboards' /what-if page
	mkdir -p $(GPULEDGER_WHATIF_DIR)
	$(BIN)/gpuledger whatif schedule --no-progress --format json --out $(GPULEDGER_WHATIF_DIR)/schedule.json
	@echo ""
	@echo "reports in reports/: the November finance statement (open reports/statement-2026-11/*.html;"
	@echo "XLSX, CSV, Parquet and manifest.json beside it), chargeback CSV / Parquet, the enforcement plan,"
	@echo "the what-if of the week under three scheduling policies ($(GPULEDGER_WHATIF_DIR)/schedule.json);"
	@echo "the warehouse is $(GPULEDGER_WAREHOUSE)"
	@echo ""
	@echo "dashboards on this demo data: make dashboard, then open http://127.0.0.1:$(DASHBOARD_PORT)"
	@echo "(local mode: no sign-in; pages /utilization /fair-share /budgets /chargeback /squatters /my-team /enforcement /what-if)"

# The Streamlit dashboards on $(GPULEDGER_WAREHOUSE) (read-only; local mode unless
# .streamlit/secrets.toml has an [auth] section). DASHBOARD_PORT= to move it.
dashboard: install
	$(BIN)/gpuledger dashboards serve --address 127.0.0.1 --port $(DASHBOARD_PORT)

# The live demo in its own folder data/dev/ (warehouse, config, Dagster home, alerts.txt; never
# the $(GPULEDGER_WAREHOUSE) or DAGSTER_HOME exported above): simulated dcgm-exporter endpoints
# fast-forwarded (SPEED=30) to now, the scrape service, Dagster (webserver and daemon, schedules and
# sensors on), the dashboards and a local alert receiver; Ctrl-C stops everything. GPUS=, SPEED=,
# UI_PORT=, EXPORTER_PORT=, DASHBOARD_PORT=, ALERT_PORT=.
dev: install
	DASHBOARD_PORT=$(DASHBOARD_PORT) bash scripts/dev.sh

# Issue 14's benchmarks (not part of `make test`; an hour or more): each script in its own process,
# then bench/results.json and the generated block of BENCHMARKS.md. BENCH_SIZES=256,1024 and
# BENCH_ONLY=analytics,prometheus (ingest analytics prometheus dashboard browser storage whatif) narrow it;
# BENCH_PART_ARGS='prometheus=--days-4096 2;analytics=--repeat 1' passes options to one part's script;
# a partial run merges into results.json.
bench: install
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf data reports .pytest_cache
