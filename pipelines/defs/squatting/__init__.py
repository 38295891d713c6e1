"""Squatting: idle-GPU findings with their lifecycle (opened, each severity change, resolved)."""
