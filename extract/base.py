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
    nodes = egraph.nodes
    order: list[int] = []
    state: dict[int, int] = {}  # 1 = on the stack, 2 = done
    for root in egraph.roots:
        if root in state:
            continue
        if root not in selection:
            raise ExtractionError(f"e-class {root} is needed but not selected")
        state[root] = 1
        stack = [(root, iter(nodes[selection[root]].children))]
        while stack:
            cls, kids = stack[-1]
            for kid in kids:
                seen = state.get(kid)
                if seen is None:
                    if kid not in selection:
                        raise ExtractionError(f"e-class {kid} is needed but not selected")
                    state[kid] = 1
                    stack.append((kid, iter(nodes[selection[kid]].children)))
                    break
                if seen == 1:
                    raise ExtractionError(f"selection has a cycle through e-class {kid}")
            else:
                state[cls] = 2
                order.append(cls)
                stack.pop()
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
