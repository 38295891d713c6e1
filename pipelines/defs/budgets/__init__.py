"""Budgets: burn-down snapshots per org node, and their consistency down the tree."""
