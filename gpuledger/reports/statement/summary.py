"""What a reader is shown of a month's statement, without its files: the lines (with usage and
efficiency beside them), what is owed, the state, the reconciliation sentences and the notes, and
which files the statement has. Made from a built statement (``StatementSummary.of``) or read back
from the warehouse (gpuledger.facts.statement_views, materialized by the chargeback
pipeline), and cut to an org node's subtree (``for_node``) exactly as ``build_statement(node=)``
cuts it: the node's projects' lines, the node as their business unit, no reconciliation (idle
capacity is the org's), the same notes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import polars as pl

from gpuledger.ledger.periods import PeriodState
from gpuledger.reports.statement.build import Statement, owed, sort_lines
from gpuledger.reports.statement.files import file_names


@dataclass(frozen=True)
class StatementSummary:
    period: str
    scope: str
    state: PeriodState
    billed_through: datetime
    lines: pl.DataFrame  # reports.statement.build.LINE_COLUMNS, in the statement's order
    reconciliation: tuple[tuple[str, bool], ...]  # (sentence, reconciles) per currency; org scope only
    notes: tuple[str, ...]  # the statement's notes, then its warnings
    by_partition: bool  # the statement has GPU-hours by Slurm partition (a by-partition file)
    by_host: bool  # ... by host (a by-host file)
    usage_projects: frozenset[str] = frozenset()  # projects with usage rows (to cut by node)
    partition_projects: frozenset[str] = frozenset()  # projects with usage naming a partition

    @classmethod
    def of(cls, st: Statement) -> StatementSummary:
        usage = st.usage
        named = usage.filter(pl.col("partition").is_not_null()) if usage.height else usage
        return cls(
            period=st.period, scope=st.scope, state=st.state, billed_through=st.billed_through, lines=st.lines,
            reconciliation=tuple((r.sentence(), r.reconciles) for r in st.reconciliation),
            notes=(*st.notes, *st.warnings), by_partition=bool(st.by_partition.height), by_host=bool(st.by_host.height),
            usage_projects=frozenset(usage["project"].drop_nulls().to_list()) if usage.height else frozenset(),
            partition_projects=frozenset(named["project"].drop_nulls().to_list()) if named.height else frozenset())

    @property
    def totals(self) -> dict[str, Decimal]:
        return owed(self.lines)

    @property
    def reconciles(self) -> bool | None:
        """Every currency reconciles to the cent; None where not checked (a node's subtree)."""
        return all(ok for _, ok in self.reconciliation) if self.reconciliation else None

    def for_node(self, node: str, members: set[str]) -> StatementSummary:
        """This (whole-org) statement cut to ``node``'s subtree, ``members`` its nodes."""
        lines = sort_lines(self.lines.filter(pl.col("project").is_in(list(members)))
                           .with_columns(business_unit=pl.lit(node)))
        return StatementSummary(
            period=self.period, scope=node, state=self.state, billed_through=self.billed_through, lines=lines,
            reconciliation=(), notes=self.notes, by_partition=bool(self.partition_projects & members),
            by_host=bool(self.usage_projects & members), usage_projects=self.usage_projects & members,
            partition_projects=self.partition_projects & members)

    def file_names(self, stem: str) -> list[str]:
        """The names `gpuledger report statement` gives this statement's files."""
        return file_names(stem, by_partition=self.by_partition, by_host=self.by_host)
