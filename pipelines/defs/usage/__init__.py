"""Usage: hourly GPU-hours per job and project, and utilization of capacity by hour."""
