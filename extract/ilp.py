"""Exact DAG extraction as a 0/1 integer program solved by HiGHS (``scipy.optimize.milp``).

Variables: ``x_n`` per e-node of finite own cost (infinite-cost nodes get no variable: fixed to 0)
and ``y_c`` per e-class reachable from the roots in the e-graph. Constraints: ``y_root = 1``;
``x_n <= y_class(n)``; ``sum(x_n for n in c) >= y_c``; ``x_n <= y_k`` for each child class ``k``.
Objective: ``sum(cost(n) * x_n)``, i.e. the DAG cost (each chosen node counted once); costs must be
non-negative.

Acyclicity is enforced lazily: after each solve, classes are resolved bottom-up over the chosen
nodes (a class resolves through a chosen node whose children are all resolved). If every root
resolves, that acyclic selection costs no more than the objective and is returned, pruned to the
classes reachable from the roots. Otherwise the unresolved chosen nodes contain cycles; each cycle
found gets the cut ``sum(x_n for n in cycle) <= len(cycle) - 1`` and the program is solved again.
"""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np
from eqsat.extract.base import CostFn, ExtractionError, reachable

from eqsat.core.egraph import EGraph, Selection


def _resolve(egraph: EGraph, chosen: list[int]) -> dict[int, int]:
    """Class -> a chosen node whose whole chosen sub-DAG is acyclic (Kahn's algorithm over hyperedges)."""
    nodes = egraph.nodes
    missing: dict[int, int] = {}
    waiters: dict[int, list[int]] = {}
    queue: deque[int] = deque()
    for i in chosen:
        kids = set(nodes[i].children)
        missing[i] = len(kids)
        for k in kids:
            waiters.setdefault(k, []).append(i)
        if not kids:
            queue.append(i)
    resolved: dict[int, int] = {}
    while queue:
        i = queue.popleft()
        c = nodes[i].eclass
        if c in resolved:
            continue
        resolved[c] = i
        for p in waiters.get(c, ()):
            missing[p] -= 1
            if missing[p] == 0:
                queue.append(p)
    return resolved


def _cycles(egraph: EGraph, chosen: list[int], resolved: dict[int, int]) -> set[frozenset[int]]:
    """Node cycles among the chosen nodes of unresolved classes (one walk per unresolved class)."""
    by_class: dict[int, int] = {}
    for i in chosen:
        by_class.setdefault(egraph.nodes[i].eclass, i)
    found: set[frozenset[int]] = set()
    for start in by_class:
        if start in resolved:
            continue
        path: list[int] = []
        seen: dict[int, int] = {}
        c = start
        while c not in seen:
            seen[c] = len(path)
            i = by_class[c]
            path.append(i)
            # every chosen node of an unresolved class has an unresolved child, and it is chosen
            c = next(k for k in egraph.nodes[i].children if k not in resolved)
        found.add(frozenset(path[seen[c]:]))
    return found


def ilp_extract(egraph: EGraph, cost: CostFn, *, time_limit: float | None = 10.0,
                max_rounds: int = 500) -> Selection:
    """Optimal DAG extraction; raise :class:`ExtractionError` if none exists or the solver gives up."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    if not egraph.roots:
        return {}
    own = [float(cost(n)) for n in egraph.nodes]
    finite = [math.isfinite(c) for c in own]
    if any(c < 0 for c in own):  # the pruned selection would no longer be optimal
        raise ExtractionError("ILP extraction needs non-negative e-node costs")
    classes: dict[int, int] = {}  # class id -> index among the class variables
    todo = list(dict.fromkeys(egraph.roots))
    node_ids: list[int] = []
    while todo:
        c = todo.pop()
        if c in classes:
            continue
        classes[c] = len(classes)
        for i in egraph.classes.get(c, ()):
            if finite[i]:
                node_ids.append(i)
                todo.extend(k for k in egraph.nodes[i].children if k not in classes)
    for r in egraph.roots:
        if not any(finite[i] for i in egraph.classes.get(r, ())):
            raise ExtractionError(f"root e-class {r} has no e-node of finite cost")

    n_x = len(node_ids)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lb: list[float] = []
    ub: list[float] = []

    def row(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(lb)
        for col, v in entries:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        lb.append(lo)
        ub.append(hi)

    members: dict[int, list[tuple[int, float]]] = {}
    for j, i in enumerate(node_ids):
        node = egraph.nodes[i]
        row([(j, 1.0), (n_x + classes[node.eclass], -1.0)], -math.inf, 0.0)
        for k in set(node.children):
            row([(j, 1.0), (n_x + classes[k], -1.0)], -math.inf, 0.0)
        members.setdefault(node.eclass, []).append((j, 1.0))
    for c, ci in classes.items():
        row([*members.get(c, []), (n_x + ci, -1.0)], 0.0, math.inf)

    n_var = n_x + len(classes)
    objective = np.zeros(n_var)
    objective[:n_x] = [own[i] for i in node_ids]
    var_lb = np.zeros(n_var)
    for r in egraph.roots:
        var_lb[n_x + classes[r]] = 1.0
    bounds = Bounds(var_lb, np.ones(n_var))
    integrality = np.ones(n_var)
    column = {i: j for j, i in enumerate(node_ids)}
    deadline = None if time_limit is None else time.monotonic() + time_limit

    for _ in range(max_rounds):
        options: dict[str, float] = {"mip_rel_gap": 0.0}
        if deadline is not None:
            options["time_limit"] = max(deadline - time.monotonic(), 1e-3)
        matrix = csr_array((vals, (rows, cols)), shape=(len(lb), n_var))
        res = milp(objective, constraints=LinearConstraint(matrix, lb, ub), integrality=integrality,
                   bounds=bounds, options=options)
        if res.x is None:
            why = "no acyclic extraction of finite cost exists" if res.status == 2 else res.message
            raise ExtractionError(f"ILP extraction failed: {why}")
        chosen = [i for j, i in enumerate(node_ids) if res.x[j] > 0.5]
        resolved = _resolve(egraph, chosen)
        if all(r in resolved for r in egraph.roots):
            return {c: resolved[c] for c in reachable(egraph, resolved)}
        if deadline is not None and time.monotonic() >= deadline:
            raise ExtractionError("ILP extraction ran out of time before finding an acyclic extraction")
        for cycle in _cycles(egraph, chosen, resolved):
            row([(column[i], 1.0) for i in cycle], -math.inf, len(cycle) - 1.0)
    raise ExtractionError(f"ILP extraction found no acyclic extraction in {max_rounds} rounds")
