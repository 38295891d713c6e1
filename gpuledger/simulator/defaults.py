"""The simulator's defaults, light on purpose: the CLI shows them in --help before anything loads."""

from datetime import datetime

DEFAULT_START = datetime(2026, 11, 1)
DEFAULT_CLUSTER = "sim"
# The demand regimes demand.py draws (demand.REGIMES), the first the default: `ai2-backlog` (a standing
# backlog, mild seasons drawn week by week) and `ai2-seasonal` (deadline and quiet weeks in a cycle).
REGIME_NAMES = ("ai2-backlog", "ai2-seasonal")
