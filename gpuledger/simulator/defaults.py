"""The simulator's defaults, light on purpose: the CLI shows them in --help before anything loads."""

from datetime import datetime

DEFAULT_START = datetime(2026, 11, 1)
DEFAULT_CLUSTER = "sim"
