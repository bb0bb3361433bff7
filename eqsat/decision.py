"""Whether the pass writes an extraction, and which: the graph as Inductor alone would run it (the "before"
to beat, ``InductorAlone``), the margin a saving must clear, and, over a range of sizes, the points where an
extraction is predicted slower (by more than the profiles' error, ``PROFILE_ERROR``) and the search for one
slower at none (``no_slower``, which reweighs the cost for its search and restores it). Functions of the
e-graph, the costs and the selections; ``eqsat.api`` applies them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from eqsat.admissible import INF, Admissible
from eqsat.core.egraph import EGraph, ENode, Selection
from eqsat.core.ir import LEAF
from eqsat.cost.roofline import VIEW_US, RooflineCost
from eqsat.engine import serialize
from eqsat.extract.base import Extractor, check
from eqsat.fx import importer as fx_in
from eqsat.kernels.catalog import Catalog
from eqsat.kernels.inductor import stands_for_chain

IMPROVEMENT_EPS_US = 1e-3  # far above the token cost of views (eqsat.cost.roofline.VIEW_US)
PROFILE_ERROR = 0.01  # a share of a graph's predicted time the profiles cannot resolve (A/A runs differ ~1%)
NATIVE_MARGIN_US, NATIVE_MARGIN = 0.5, PROFILE_ERROR  # a native graph's least saving (``margin_us``)
REWEIGHT, MAX_REWEIGHTS = 2.0, 8  # a range's search for an extraction slower at no size (``no_slower``)
RANGE_FOUND = "one slower at none"  # how Report.range_search ends when that search found one


def before_selection(ser: serialize.Serialized) -> Selection:
    """The selection that is the input graph itself: each class picks an FX node's own e-node."""
    sel: Selection = {}
    for i, enode in ser.enode_of_node.items():
        sel.setdefault(ser.class_of_node[i], enode)
    return sel


class InductorAlone:
    """A cost over the e-graph that prices what Inductor alone makes of the graph: the graph's own
    e-nodes, and, for an output of a native ATen chain an Inductor twin stands for
    (``eqsat.kernels.inductor``), that twin, since Inductor compiles the chain into the twin's
    kernels (a twin's output is a native value or a view of one, never what a custom op of the graph
    makes), and the views rules make around it (an e-node that moves no byte and launches nothing:
    Inductor folds it into its reader's indexing), as well as the casts of native values they make
    (``lift-add-rms-norm-fp32-residual``'s: Inductor folds a cast into the kernel that reads it).
    Extracting with it gives the "before" the pass must beat."""

    def __init__(self, admissible: Admissible, eg: EGraph, originals: Iterable[int], native: set[int],
                 twins: frozenset[str], twin_classes: set[int]) -> None:
        self.admissible, self.twins, self.twin_classes = admissible, twins, twin_classes
        self.own = {eg.nodes[i] for i in originals}
        self.foreign = {n.eclass for n in self.own} - native  # values the graph's non-ATen ops make
        self.casts = {n for n in eg.nodes if n.op == "Convert" and n.children[0] in native and n not in self.own}
        self.native = native | {n.eclass for n in self.casts}

    def __call__(self, node: ENode) -> float:
        cost = self.admissible(node)
        view = node.op not in (LEAF, "Get") and cost <= VIEW_US * (1 + 1e-9)  # a weighted sum of VIEW_US rounds up
        if node in self.own or node.op in self.twins or view or (
                node.op == "Get" and node.eclass not in self.foreign and node.children[0] in self.twin_classes):
            return cost
        if node in self.casts:
            return VIEW_US  # a cast a rule put back on a native value: Inductor folds it into its reader
        return INF


def inductor_alone(eg: EGraph, ser: serialize.Serialized, imported: fx_in.Imported, admissible: Admissible,
                    before: Selection, catalog: Catalog, extract: Extractor) -> Selection:
    """The before selection as Inductor would run it (``InductorAlone``); ``before`` itself where no
    native chain has a twin."""
    twins = frozenset(s.name for s in catalog if stands_for_chain(s))
    twin_classes = {n.eclass for n in eg.nodes if n.op in twins}
    if not twin_classes:
        return before
    native = {ser.class_of_node[i] for i in ser.enode_of_node
              if isinstance(t := imported.nodes[i].target, torch._ops.OpOverload) and t.namespace in ("aten", "prims")}
    if not native:
        return before
    cost = InductorAlone(admissible, eg, ser.enode_of_node.values(), native, twins, twin_classes)
    return extract(eg, cost)


def margin_us(native: bool, before_us: float) -> float:
    """The least saving (µs) an extraction must be predicted to show over a graph predicted at ``before_us``:
    in a ``native`` graph (ATen only) the profiles' error, since Inductor's own code is what it replaces;
    elsewhere a token above the cost of views."""
    return max(NATIVE_MARGIN_US, NATIVE_MARGIN * before_us) if native else IMPROVEMENT_EPS_US


def lost_at(was: Sequence[float], after: Sequence[float], error: float | None = None) -> list[int]:
    """The size points (indices) where the graph is predicted slower after (``after`` µs at each point) than
    before (``was``) by more than ``error`` (default ``PROFILE_ERROR``) of its time there: a loss the profiles
    cannot resolve does not count (``within_error`` reports it)."""
    share = PROFILE_ERROR if error is None else error
    return [k for k, (a, b) in enumerate(zip(after, was, strict=True)) if a > b + max(IMPROVEMENT_EPS_US, share * b)]


def within_error(points: Sequence[object], was: Sequence[float], after: Sequence[float]) -> str:
    """The size points where the graph is predicted slower, but within the profiles' error, written out."""
    beyond = set(lost_at(was, after))
    close = [k for k in lost_at(was, after, error=0.0) if k not in beyond]
    return "; ".join(f"size {point_key(points[k])} ({after[k]:.2f} against {was[k]:.2f} us, "
                     f"{(after[k] - was[k]) / was[k]:.1%})" for k in close)


def slower_at(points: Sequence[object], was: Sequence[float], after: Sequence[float]) -> tuple[object, float, float] | None:
    """The first size point where the graph is predicted slower after than before: (size, after µs, before
    µs); None where it is nowhere slower."""
    lost = lost_at(was, after)
    return (points[lost[0]], after[lost[0]], was[lost[0]]) if lost else None


def weighted(weights: Sequence[float], totals: Sequence[float]) -> float:
    """The µs at each size point weighed into one figure (``RooflineCost.weights``)."""
    return sum(w * t for w, t in zip(weights, totals, strict=True))


def no_slower(cost: RooflineCost, eg: EGraph, was: Sequence[float], after: Sequence[float], margin: float,
               admissible_now: Callable[[], Admissible], extract: Extractor,
               ) -> tuple[tuple[Selection, set[int], list[float], Admissible] | None, int]:
    """For a range whose extraction (``after`` µs at each size point, ``was`` before) is predicted slower
    at some point: extract again with each point where the last extraction lost weighed ``REWEIGHT``
    times more, at most ``MAX_REWEIGHTS`` times, until one is slower at none. Return it (selection,
    classes reached, µs at each point, its admissible cost) if it also saves more than ``margin`` on the
    range's own weights, else None; and the extractions made. The cost's weights are as they were after."""
    base = cost.weights
    weights = list(base)
    try:
        for tries in range(1, MAX_REWEIGHTS + 1):
            for k in lost_at(was, after):
                weights[k] *= REWEIGHT
            cost.use_weights(weights)
            admissible = admissible_now()
            selection = extract(eg, admissible)
            reached = check(eg, selection)
            after = cost.point_totals(eg.nodes[selection[c]] for c in reached)
            if not lost_at(was, after):
                saves = weighted(base, was) - weighted(base, after) > margin
                return ((selection, reached, after, admissible) if saves else None), tries
        return None, MAX_REWEIGHTS
    finally:
        cost.use_weights(base)


def point_key(point: object) -> int | str:
    """A size point as ``Report.predicted_at`` names it: its int, or its mapping written out."""
    return point if isinstance(point, int) else ", ".join(f"{k}={v}" for k, v in sorted(point.items()))


def only_twins(eg: EGraph, selection: Selection, ser: serialize.Serialized, catalog: Catalog) -> bool:
    """Whether every kernel ``selection`` adds to the graph is an Inductor twin standing for the graph's own
    chain (views aside; a twin over heads writes the chain as the graph does not)."""
    new = set(selection.values()) - set(ser.enode_of_node.values())
    ops = {eg.nodes[i].op for i in new} & {s.name for s in catalog}
    return all(stands_for_chain(catalog[op]) for op in ops)
