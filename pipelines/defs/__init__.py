"""Dagster definitions by domain; see ../definitions.py."""
