"""Greedy extractors: the DAG-aware ``greedy_dag`` (extraction-gym style) and the ``tree_greedy`` baseline.

Both run a worklist fixpoint over e-nodes: a node is evaluated once all its child classes have a
best entry, and a class's best is replaced only on strict improvement, after which its parents are
re-queued. ``greedy_dag`` values a node by the cost of the *set* of e-nodes it uses (own node plus
the union of its children's sets, so shared sub-DAGs count once); sets are Python-int bitsets over
node indices, and then takes multi-output kernels whole where that is cheaper (``eqsat.extract.improve``).
``tree_greedy`` values a node by its own cost plus its children's costs (a tree cost).

Costs must be non-negative (a negative one raises :class:`ExtractionError`). Invariants of the
returned selection:
- only e-nodes of finite own cost are ever chosen;
- it covers exactly the classes reachable from ``egraph.roots`` through the chosen nodes;
- it is acyclic: should the per-class best choices close a cycle, every class whose best choice uses
  a class settled after it falls back to its first choice, whose children were all settled earlier.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable

import numpy as np
from eqsat.extract.base import CostFn, ExtractionError
from eqsat.extract.improve import switch_multi_output

from eqsat.core.egraph import EGraph, Selection

_REL_TOL = 1e-12
_Best = dict[int, tuple[float, object, int]]


def _ranks(egraph: EGraph, own: list[float], kids: list[tuple[int, ...]],
           parents: dict[int, list[int]]) -> dict[int, int]:
    """Class -> when some finite node of it first has all children ranked (Kahn's order, bottom-up)."""
    inf, eclass = math.inf, egraph.eclass_of
    missing = [len(k) for k in kids]
    queue = deque(i for i, k in enumerate(kids) if not k and own[i] < inf)
    rank: dict[int, int] = {}
    while queue:
        cls = eclass[queue.popleft()]
        if cls in rank:
            continue
        rank[cls] = len(rank)
        for p in parents.get(cls, ()):
            missing[p] -= 1
            if not missing[p] and own[p] < inf:
                queue.append(p)
    return rank


def _fixpoint(egraph: EGraph, own: list[float], kids: list[tuple[int, ...]], parents: dict[int, list[int]],
              best: _Best, value: Callable[[int], tuple[float, object] | None]) -> tuple[dict[int, int], dict[int, int]]:
    """Fill ``best`` (class -> (total, payload, node)); return each class's first choice and settle order.

    The worklist is a heap keyed by the class's bottom-up rank, so on DAG-shaped e-graphs children
    are (mostly) final before their parents are evaluated and few nodes are evaluated twice.
    """
    inf, eclass, n = math.inf, egraph.eclass_of, len(egraph.nodes)  # own costs are finite or inf (_setup)
    rank = _ranks(egraph, own, kids, parents)
    first: dict[int, int] = {}
    order: dict[int, int] = {}
    queued = bytearray(n)
    queue = [(rank[eclass[i]], i) for i in range(n) if not kids[i] and own[i] < inf]
    for _, i in queue:
        queued[i] = 1
    push, pop = heapq.heappush, heapq.heappop
    while queue:
        i = pop(queue)[1]
        queued[i] = 0
        got = value(i)
        if got is None:
            continue
        total, payload = got
        cls = eclass[i]
        old = best.get(cls)
        if old is not None and not total < old[0] - _REL_TOL * (abs(old[0]) if old[0] < inf else 0):
            continue
        best[cls] = (total, payload, i)
        if old is None:
            first[cls] = i
            order[cls] = len(order)
        for p in parents.get(cls, ()):
            if not queued[p] and own[p] < inf:
                queued[p] = 1
                push(queue, (rank.get(eclass[p], n), p))  # unranked: no finite bottom-up path
    return first, order


def _prune(roots: list[int], choice: Selection, kids: list[tuple[int, ...]]) -> list[int] | None:
    """Classes reached from the roots through ``choice`` (all present), or None on a cycle."""
    state: dict[int, int] = {}  # 1 = on the DFS stack, 2 = done
    for root in roots:
        stack = [(root, iter(kids[choice[root]]))] if root not in state else []
        state.setdefault(root, 1)
        while stack:
            cls, it = stack[-1]
            kid = next(it, None)
            if kid is None:
                state[cls] = 2
                stack.pop()
            elif kid not in state:
                state[kid] = 1
                stack.append((kid, iter(kids[choice[kid]])))
            elif state[kid] == 1:
                return None
    return list(state)


def _finish(egraph: EGraph, kids: list[tuple[int, ...]], best: _Best, first: dict[int, int],
            order: dict[int, int]) -> Selection:
    """Per-class best choices pruned to the roots; repaired with first choices if they close a cycle."""
    missing = [r for r in egraph.roots if r not in best]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ExtractionError(f"root e-class(es) {missing[:5]}{more} have no finite, acyclic choice")
    choice = {c: b[2] for c, b in best.items()}
    keep = _prune(egraph.roots, choice, kids)
    if keep is None:
        for c, i in choice.items():
            if any(order[k] >= order[c] for k in kids[i]):
                choice[c] = first[c]
        keep = _prune(egraph.roots, choice, kids)
        assert keep is not None, "first choices always form an acyclic selection"
    return {c: choice[c] for c in keep}


def _setup(egraph: EGraph, cost: CostFn) -> tuple[list[float], list[tuple[int, ...]]]:
    own = [float(cost(n)) for n in egraph.nodes]
    if not all(map(math.isfinite, own)):
        own = [c if math.isfinite(c) else math.inf for c in own]  # NaN counts as never choosable
    if min(own, default=0.0) < 0:
        bad = next(i for i, c in enumerate(own) if c < 0)
        raise ExtractionError(f"e-node {bad} ({egraph.nodes[bad].op}) has negative cost {own[bad]}")
    return own, egraph.kids


_DENSE_FROM = 64  # e-nodes: below, a set's cost is summed bit by bit (numpy's set-up would cost more)
_LOOP_UPTO = 8  # set bits: above, and from _DENSE_FROM e-nodes, a set's cost is a dot product


class _DenseCost:
    """The summed own costs of a bitset's e-nodes, as a dot product over the unpacked bits."""

    def __init__(self, own: list[float]) -> None:
        self.nbytes = (len(own) + 7) // 8
        self.weights = np.zeros(8 * self.nbytes)
        self.weights[:len(own)] = own
        self.buf = np.empty(8 * self.nbytes)  # preallocated: a fresh large array per call would cost page faults

    def __call__(self, x: int) -> float:
        bits = np.unpackbits(np.frombuffer(x.to_bytes(self.nbytes, "little"), np.uint8), bitorder="little")
        np.copyto(self.buf, bits)
        return float(np.einsum("i,i->", self.buf, self.weights))  # not BLAS: its threads stall on short dots


def greedy_dag(egraph: EGraph, cost: CostFn) -> Selection:
    """DAG-aware greedy extraction: each class keeps its cheapest known set of e-nodes."""
    own, kids = _setup(egraph, cost)
    n = len(egraph.nodes)
    small = [c if math.isfinite(c) else 0.0 for c in own]  # non-finite nodes never enter a set
    dense = _DenseCost(small) if n > _DENSE_FROM else None
    members = egraph.members  # each class's nodes, a bitset
    best: _Best = {}

    def bits_cost(x: int) -> float:
        if dense is None or x.bit_count() <= _LOOP_UPTO:
            s = 0.0
            while x:
                low = x & -x
                s += small[low.bit_length() - 1]
                x ^= low
            return s
        return dense(x)

    eclass = egraph.eclass_of

    def value(i: int) -> tuple[float, object] | None:
        ready = [best.get(k) for k in kids[i]]
        if None in ready:
            return None
        acc, total = 0, 0.0
        for b in ready:
            kt, ks = b[0], b[1]  # type: ignore[index]
            if not acc:
                acc, total = ks, kt
                continue
            inter = acc & ks
            if not inter:
                acc, total = acc | ks, total + kt
            elif inter == acc:  # acc within ks
                acc, total = ks, kt
            elif inter != ks:  # partial overlap (ks within acc adds nothing): cost the smaller side
                new = ks & ~acc
                extra = bits_cost(new) if new.bit_count() <= inter.bit_count() else kt - bits_cost(inter)
                acc, total = acc | ks, total + extra
        if acc & members[eclass[i]]:
            return None  # the node's own class is already below it: a cycle
        return total + own[i], acc | (1 << i)

    parents = egraph.users
    first, order = _fixpoint(egraph, own, kids, parents, best, value)
    selection = _finish(egraph, kids, best, first, order)
    return switch_multi_output(egraph, selection, {c: b[2] for c, b in best.items()}, own, kids, parents)


def tree_greedy(egraph: EGraph, cost: CostFn) -> Selection:
    """Baseline: bottom-up tree cost (own cost plus children's costs, shared nodes counted again)."""
    own, kids = _setup(egraph, cost)
    args = [n.children for n in egraph.nodes]  # repeats kept: a tree counts f(x, x)'s x twice
    best: _Best = {}

    def value(i: int) -> tuple[float, object] | None:
        total = own[i]
        for k in args[i]:
            b = best.get(k)
            if b is None:
                return None
            total += b[0]
        return total, None

    first, order = _fixpoint(egraph, own, kids, egraph.users, best, value)
    return _finish(egraph, kids, best, first, order)
