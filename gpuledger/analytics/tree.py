"""The org tree (org -> program -> project, any depth) as small frames.

The tree has tens to hundreds of nodes, so it is collected and walked in Python; the data
that hangs off it (usage, charges) stays in polars and joins through ``closure``.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Tree:
    """Parent / children maps and depth-first order of an ``org_nodes`` frame."""

    parent: dict[str, str | None]
    children: dict[str, list[str]]
    shares: dict[str, float]
    kind: dict[str, str]
    roots: list[str]

    @classmethod
    def from_frame(cls, org_nodes: pl.LazyFrame | pl.DataFrame) -> Tree:
        df = org_nodes.lazy().select("node", "parent", "kind", "shares").collect()
        parent = dict(zip(df["node"].to_list(), df["parent"].to_list(), strict=True))
        for node, up in parent.items():
            if up is not None and up not in parent:
                raise ValueError(f"org_nodes: node {node!r} names parent {up!r}, which is not a node")
        children: dict[str, list[str]] = {n: [] for n in parent}
        for node, up in parent.items():
            if up is not None:
                children[up].append(node)
        roots = [n for n, up in parent.items() if up is None]
        if parent and not roots:
            raise ValueError("org_nodes: no root (a node with parent NULL); the tree has a cycle")
        tree = cls(parent, children, dict(zip(df["node"], df["shares"], strict=True)),
                   dict(zip(df["node"], df["kind"], strict=True)), roots)
        if len(list(tree.walk())) != len(parent):
            raise ValueError("org_nodes: some nodes are not reachable from a root (a cycle)")
        return tree

    def walk(self, order=None):
        """(node, depth) depth-first; ``order(children) -> children`` sorts siblings (default: name)."""
        order = order or sorted
        stack = [(r, 0) for r in reversed(order(self.roots))]
        while stack:
            node, depth = stack.pop()
            yield node, depth
            stack.extend((c, depth + 1) for c in reversed(order(self.children[node])))

    def ancestors(self, node: str) -> list[str]:
        """The node itself, then its parent, up to the root."""
        chain = []
        while node is not None:
            chain.append(node)
            node = self.parent.get(node)
        return chain

    def leaves(self) -> list[str]:
        return [n for n, _ in self.walk() if not self.children[n]]


def closure(org_nodes: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """Every (ancestor, node) pair including (node, node): ``ancestor``, ``node``, ``levels_up``.

    Join a per-project frame on ``node`` and group by ``ancestor`` to roll it up the tree.
    """
    tree = Tree.from_frame(org_nodes)
    rows = [(a, n, i) for n in tree.parent for i, a in enumerate(tree.ancestors(n))]
    return pl.LazyFrame(rows, schema={"ancestor": pl.String, "node": pl.String, "levels_up": pl.Int32},
                        orient="row")


def rollup_to_nodes(per_project: pl.LazyFrame, org_nodes, *, project_col: str = "project",
                    sum_cols: list[str], keys: list[str] = (),
                    sum_exprs: list[pl.Expr] | None = None) -> pl.LazyFrame:
    """Sum ``sum_cols`` of a per-project frame into every org node (``node`` column).

    Projects absent from the tree roll up only to themselves (reported, not dropped).
    Nodes without data get zeros. ``sum_exprs`` replaces the plain sums (e.g. NULL-aware ones);
    columns it leaves NULL stay NULL on nodes without data.
    """
    clo = closure(org_nodes)
    known = clo.select("node").unique()
    unknown_self = (
        per_project.select(pl.col(project_col).alias("node")).unique()
        .join(known, on="node", how="anti")
        .with_columns(ancestor=pl.col("node"), levels_up=pl.lit(0, pl.Int32))
        .select("ancestor", "node", "levels_up")
    )
    clo = pl.concat([clo, unknown_self])
    out = (
        per_project.rename({project_col: "node"})
        .join(clo, on="node", how="inner")
        .group_by(["ancestor", *keys])
        .agg(sum_exprs if sum_exprs is not None else [pl.col(c).sum() for c in sum_cols])
        .rename({"ancestor": "node"})
    )
    if keys:
        return out
    all_nodes = clo.select(pl.col("ancestor").alias("node")).unique()
    zero = sum_cols if sum_exprs is None else [c for c in sum_cols if c != "energy_kwh"]
    return all_nodes.join(out, on="node", how="left").with_columns(
        pl.col(c).fill_null(0) for c in zero
    )
