"""Local improvement of a DAG selection: take, or leave, every output of a multi-output e-node at once.

Greedy DAG extraction values each e-class alone, so two whole-kernel choices escape it:
- **take**: a multi-output kernel dearer than each output's own producer but cheaper than all together
  (dual norm, norm + pad). Every live class with a projection ``Get(t, i)`` of a tuple-valued class
  switches to it at once; in the same try a live class may follow onto a new output where cheaper;
- **leave**: a fused kernel kept for one output while its unfused producer stays alive for another
  consumer pays off only if every live output moves at once: each live reader of a live tuple-valued
  class switches to its cheapest other e-node in turn, later ones seeing what earlier ones revived.
Each tuple-valued class gets one take try, then one leave try; a try is kept when the DAG cost drops.
No switch takes an e-node that reads its own class (an identity view: it would keep its class alive by
itself, and close a cycle). Costs are kept incrementally with reference counts (a class
dies when no live parent or root uses it), so a try costs the size of what it changes. The result
passes ``check``.
"""

from __future__ import annotations

from collections import defaultdict

from eqsat.extract.base import ExtractionError, reachable

from eqsat.core.egraph import EGraph, Selection

_EPS = 1e-9


class _Dag:
    def __init__(self, egraph: EGraph, selection: Selection, choices: Selection, own: list[float],
                 kids: list[tuple[int, ...]]) -> None:
        self.eg, self.choices, self.own, self.kids = egraph, choices, own, kids
        self.cur = dict(selection)
        self.refs: defaultdict[int, int] = defaultdict(int)  # a missing class has no uses
        for c in egraph.roots:
            self.refs[c] += 1
        for i in selection.values():
            for k in kids[i]:
                self.refs[k] += 1
        self.log: list[tuple[str, int, object]] = []

    def choice(self, c: int) -> int:
        """The e-node class ``c`` has, or takes when it comes alive."""
        got = self.cur.get(c)
        return self.choices[c] if got is None else got

    def _set(self, c: int, i: int | None) -> None:
        self.log.append(("cur", c, self.cur.get(c)))
        if i is None:
            self.cur.pop(c, None)
        else:
            self.cur[c] = i

    def _add(self, k: int, by: int) -> float:
        """Change the uses of class ``k`` by ``by`` (+1/-1); the cost of what comes alive or dies."""
        delta, todo = 0.0, [(k, by)]
        while todo:
            c, d = todo.pop()
            self.log.append(("refs", c, self.refs[c]))
            self.refs[c] += d
            if d > 0 and self.refs[c] == 1:  # comes alive
                if c not in self.cur:
                    self._set(c, self.choice(c))
                i = self.cur[c]
                delta += self.own[i]
                todo.extend((kk, 1) for kk in self.kids[i])
            elif d < 0 and self.refs[c] == 0:  # dies
                i = self.cur[c]
                delta -= self.own[i]
                todo.extend((kk, -1) for kk in self.kids[i])
        return delta

    def switch(self, c: int, i: int) -> float:
        old = self.cur[c]
        self._set(c, i)
        delta = self.own[i] - self.own[old]
        for k in self.kids[i]:
            delta += self._add(k, 1)
        for k in self.kids[old]:
            delta += self._add(k, -1)
        return delta

    def live(self) -> Selection:
        return {c: i for c, i in self.cur.items() if self.refs[c] > 0}

    def acyclic(self) -> bool:
        try:
            reachable(self.eg, self.live())
        except ExtractionError:
            return False
        return True

    def undo(self, mark: int) -> None:
        while len(self.log) > mark:
            kind, key, old = self.log.pop()
            if kind == "refs":
                self.refs[key] = old  # type: ignore[assignment]
            elif old is None:
                self.cur.pop(key, None)
            else:
                self.cur[key] = old  # type: ignore[assignment]


def switch_multi_output(egraph: EGraph, selection: Selection, choices: Selection, own: list[float],
                        kids: list[tuple[int, ...]], users: dict[int, list[int]]) -> Selection:
    """``selection`` improved by whole-kernel switches (see the module docstring); ``choices`` gives a
    choice for every class that may come alive (the extractor's best per class); ``own``, ``kids`` and
    ``users``: each e-node's own cost and distinct child classes, and each class's reading e-nodes, as
    the extractor computed them. Should the tries together close a cycle (a leave can: two outputs each
    made from the other), they run again, each checked on its own (a walk of the selection per kept try)
    so that only the tries that close one are undone."""
    projections: dict[int, list[tuple[int, int]]] = {}
    for i, n in enumerate(egraph.nodes):
        if n.op == "Get" and n.children and n.children[0] in choices:
            projections.setdefault(n.children[0], []).append((i, n.eclass))
    for checked in (False, True):
        got = _switch(egraph, selection, choices, own, kids, users, projections, checked)
        if got is not None:
            return got
    return selection


def _switch(egraph: EGraph, selection: Selection, choices: Selection, own: list[float], kids: list[tuple[int, ...]],
            users: dict[int, list[int]], projections: dict[int, list[tuple[int, int]]],
            checked: bool) -> Selection | None:
    dag = _Dag(egraph, selection, choices, own, kids)
    kept = [_keep(dag, _take(dag, egraph, gets, users), checked) for gets in projections.values()]
    kept += [_keep(dag, _leave(dag, egraph, t, gets), checked) for t, gets in projections.items()]
    if not any(kept):
        return selection
    out = dag.live()
    try:
        return {c: out[c] for c in reachable(egraph, out)}
    except ExtractionError:
        return None


def _keep(dag: _Dag, tried: tuple[int, float] | None, checked: bool) -> bool:
    """Keep a try (its log mark and cost change) that lowered the cost (and, ``checked``, closed no cycle);
    undo any other."""
    if tried is None:
        return False
    mark, delta = tried
    if delta < -_EPS and (not checked or dag.acyclic()):
        dag.log.clear()
        return True
    dag.undo(mark)
    return False


def _take(dag: _Dag, egraph: EGraph, gets: list[tuple[int, int]],
          users: dict[int, list[int]]) -> tuple[int, float] | None:
    live = [(i, g) for i, g in gets if dag.refs[g] > 0]
    todo = [(i, g) for i, g in live if dag.cur.get(g) != i]
    if len({g for _, g in live}) != len(live) or not live:
        return None
    mark = len(dag.log)
    delta = sum(dag.switch(g, i) for i, g in todo)
    # a live value the new kernel also yields, read through another e-node of its class (the
    # unpadded norm as a slice of the padded output): follow the switch where that is cheaper
    for _, g in live:
        for j in users.get(g, []):
            c = egraph.nodes[j].eclass
            if dag.refs[c] > 0 and dag.cur.get(c) != j and c not in dag.kids[j]:
                inner = len(dag.log)
                step = dag.switch(c, j)
                if step < -_EPS:
                    delta += step
                else:
                    dag.undo(inner)
    return mark, delta


def _leave(dag: _Dag, egraph: EGraph, t: int, gets: list[tuple[int, int]]) -> tuple[int, float] | None:
    if dag.refs[t] == 0 or dag.own[dag.cur[t]] <= _EPS:  # a free tuple (a split): leaving it saves nothing
        return None
    readers = [(i, g) for i, g in gets if dag.refs[g] > 0 and dag.cur.get(g) == i]
    if not readers:
        return None
    mark, delta = len(dag.log), 0.0
    for i, g in readers:
        # what an e-node adds when it comes alive: itself and the choices of its dead children, whose
        # own children are live (``_near``); the reader's old e-node leaves the same either way
        scored = [(dag.own[j] + sum(dag.own[dag.choice(k)] for k in dag.kids[j] if dag.refs[k] == 0), j)
                  for j in egraph.classes[g]
                  if j != i and g not in dag.kids[j] and all(_near(dag, k) for k in dag.kids[j])]
        if not scored:  # no other way to make this output: the kernel stays
            dag.undo(mark)
            return None
        delta += dag.switch(g, min(scored)[1])
    return mark, delta


def _near(dag: _Dag, k: int) -> bool:
    """Class ``k`` is alive, or would come alive on its own: its choice reads only live classes (a
    plain quant of a live norm). ``_leave`` tries only such e-nodes, so a try brings at most one
    kernel alive and costs a few steps, not a cascade down a native chain."""
    if dag.refs[k] > 0:
        return True
    if k not in dag.cur and k not in dag.choices:
        return False
    return all(dag.refs[kk] > 0 for kk in dag.kids[dag.choice(k)])
