"""What every extractor and cost function agrees on.

An extractor is one function ``(egraph, cost) -> Selection``; ``cost(node)`` is the node's own cost
(children excluded), so a DAG cost counts each chosen e-node once however many parents share it.
``check`` is the validity property every extraction must satisfy (extraction-gym's ``check``):
every root is chosen, every chosen node's children are chosen, each chosen node lies in its class,
and the chosen graph is acyclic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from eqsat.core.egraph import EGraph, ENode, Selection

CostFn = Callable[[ENode], float]


class Extractor(Protocol):
    def __call__(self, egraph: EGraph, cost: CostFn) -> Selection: ...


class ExtractionError(RuntimeError):
    """The extractor could not produce a valid selection (no finite choice, or a cycle)."""


def reachable(egraph: EGraph, selection: Selection) -> list[int]:
    """E-classes reached from the roots through the selection, children before parents."""
    order: list[int] = []
    state: dict[int, int] = {}  # 1 = on stack, 2 = done
    for root in egraph.roots:
        stack: list[tuple[int, int]] = [(root, 0)]
        while stack:
            cls, i = stack.pop()
            if i == 0:
                if state.get(cls) == 2:
                    continue
                if state.get(cls) == 1:
                    raise ExtractionError(f"selection has a cycle through e-class {cls}")
                if cls not in selection:
                    raise ExtractionError(f"e-class {cls} is needed but not selected")
                state[cls] = 1
            kids = egraph.nodes[selection[cls]].children
            if i < len(kids):
                stack.append((cls, i + 1))
                kid = kids[i]
                if state.get(kid) == 1:
                    raise ExtractionError(f"selection has a cycle through e-class {kid}")
                if state.get(kid) != 2:
                    stack.append((kid, 0))
            else:
                state[cls] = 2
                order.append(cls)
    return order


def check(egraph: EGraph, selection: Selection) -> list[int]:
    """Raise :class:`ExtractionError` unless ``selection`` is a valid, acyclic extraction; return the
    classes it reaches, children first (``reachable``)."""
    for cls, idx in selection.items():
        if egraph.nodes[idx].eclass != cls:
            raise ExtractionError(f"node {idx} chosen for e-class {cls} belongs to {egraph.nodes[idx].eclass}")
    return reachable(egraph, selection)


def dag_cost(egraph: EGraph, selection: Selection, cost: CostFn, reached: list[int] | None = None) -> float:
    """Sum of the own costs of the e-nodes reached from the roots, each counted once (``reached``:
    those classes, when the caller has them already)."""
    classes = reachable(egraph, selection) if reached is None else reached
    return sum(cost(egraph.nodes[selection[c]]) for c in classes)
