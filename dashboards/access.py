"""Who sees what on the dashboards, decided from the sign-in e-mail and the config's
``dashboards:`` section (no Streamlit here: plain data, tested on its own).

* admins and finance see everything;
* a team lead sees the jobs, users and spend of the projects under the org nodes they lead, and
  the org-level aggregates (utilization, the fair-share tree, the org's totals), not other teams'
  jobs or users;
* anyone else signed in sees only the org-level aggregates;
* local mode (no ``[auth]`` in the Streamlit secrets, the demo) sees everything, under a banner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ALL = None  # projects=None: no restriction


@dataclass(frozen=True)
class Viewer:
    """The signed-in person as the pages need them. ``projects`` is None for "every project",
    else the leaf nodes whose jobs, users and spend they may see (possibly empty)."""

    role: str  # local / admin / finance / lead / viewer
    email: str | None
    projects: frozenset[str] | None
    led_nodes: tuple[str, ...] = field(default=())

    @property
    def sees_everything(self) -> bool:
        return self.projects is None

    def may_see(self, project: str | None) -> bool:
        return self.projects is None or (project is not None and project in self.projects)

    def visible(self, projects: Iterable[str]) -> list[str]:
        """``projects`` cut to what this viewer may see, order kept."""
        return [p for p in projects if self.may_see(p)]


def subtree(parent_of: Mapping[str, str | None], node: str) -> set[str]:
    """``node`` and every node below it in the org tree (``parent_of``: node -> parent)."""
    children: dict[str | None, list[str]] = {}
    for child, parent in parent_of.items():
        children.setdefault(parent, []).append(child)
    out, todo = set(), [node]
    while todo:
        current = todo.pop()
        if current in out:
            continue
        out.add(current)
        todo.extend(children.get(current, []))
    return out


def leaves(parent_of: Mapping[str, str | None], nodes: Iterable[str]) -> set[str]:
    """The projects (leaf nodes) under ``nodes``."""
    has_children = {p for p in parent_of.values() if p is not None}
    below: set[str] = set()
    for node in nodes:
        if node in parent_of:
            below |= subtree(parent_of, node)
    return {n for n in below if n not in has_children}


def _norm(email: str | None) -> str:
    return (email or "").strip().lower()


def viewer_for(
    email: str | None, access, parent_of: Mapping[str, str | None], *, local: bool = False,
) -> Viewer:
    """The Viewer for a signed-in ``email`` under ``access`` (config.DashboardAccess), or for
    local mode. A lead's nodes may be projects or programs; nodes not in the tree are ignored."""
    if local:
        return Viewer("local", None, ALL)
    who = _norm(email)
    if who in {_norm(a) for a in access.admins}:
        return Viewer("admin", email, ALL)
    if who in {_norm(f) for f in access.finance}:
        return Viewer("finance", email, ALL)
    led = [nodes for lead, nodes in access.leads.items() if _norm(lead) == who]
    if led:
        nodes = tuple(sorted({n for group in led for n in group}))
        return Viewer("lead", email, frozenset(leaves(parent_of, nodes)), nodes)
    return Viewer("viewer", email, frozenset())


def team_of(viewer: Viewer, parent_of: Mapping[str, str | None], node: str | None = None
            ) -> tuple[str, frozenset[str]]:
    """(org node, its projects) a lead acts for when changing their team's queue (issue 38): one of
    the nodes they lead (``node``, or their only one), never another team's. A ValueError says why
    not: not a lead, a node they do not lead, or several to choose from."""
    if viewer.role != "lead":
        who = viewer.email or "this user"
        raise ValueError(f"{who} is not a team lead in the config (`dashboards.leads`): only a lead changes their "
                         "team's queue")
    nodes = [n for n in viewer.led_nodes if n in parent_of]
    if node is None:
        if len(nodes) != 1:
            raise ValueError(f"{viewer.email} leads {', '.join(nodes) or 'no node in the org tree'}: name the team "
                             "with --team NODE")
        node = nodes[0]
    if node not in nodes:
        raise ValueError(f"{viewer.email} does not lead {node!r} (leads {', '.join(nodes) or 'none'}): a lead "
                         "changes only their own team's queue")
    return node, frozenset(leaves(parent_of, [node]))
