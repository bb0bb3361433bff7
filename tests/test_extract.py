"""Property and crafted tests for the extractors (greedy_dag, tree_greedy, ilp_extract).

Random e-graphs have non-contiguous class ids, 1-3 nodes per class, back edges (so the e-graph may be
cyclic), zero and infinite costs, and always one finite node per class whose children are all
lower-index classes, so a valid extraction always exists.
"""

from __future__ import annotations

import itertools
import math
import time
from unittest import mock

import pytest
from eqsat.extract import EXTRACTORS, check, dag_cost, greedy
from eqsat.extract.base import ExtractionError, reachable
from eqsat.extract.greedy import greedy_dag, tree_greedy
from eqsat.extract.ilp import ilp_extract
from hypothesis import given, settings
from hypothesis import strategies as st

from eqsat.core.egraph import EGraph, ENode, Ref, TensorFacts
from eqsat.cost.roofline import CostMemo, RooflineCost, load_profile
from eqsat.options import Options

MIP_GAP = 1e-6  # HiGHS proves optimality up to its absolute MIP gap (1e-6 by default)


def cost_of(node: ENode) -> float:
    return float(node.args[0])  # type: ignore[arg-type]


def node(op: str, eclass: int, cost: float, *kids: int) -> ENode:
    return ENode(op, (cost, *(Ref(k) for k in kids)), eclass)


def cid(i: int) -> int:
    return 10 * i + 3


@st.composite
def egraphs(draw: st.DrawFn, max_classes: int = 9, max_nodes: int = 3) -> EGraph:
    n = draw(st.integers(1, max_classes))
    costs = st.one_of(st.integers(0, 9).map(float), st.just(0.0), st.floats(0.0, 10.0))
    nodes: list[ENode] = []
    for i in range(n):
        k = draw(st.integers(1, max_nodes))
        safe = draw(st.integers(0, k - 1))
        for j in range(k):
            if j == safe:
                kids = draw(st.lists(st.integers(0, i - 1), max_size=3)) if i else []
                c = draw(costs)
            else:
                kids = draw(st.lists(st.integers(0, n - 1), max_size=3))
                c = draw(st.one_of(costs, st.just(math.inf)))
            nodes.append(node(f"op{j}", cid(i), c, *(cid(x) for x in kids)))
    roots = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True))
    return EGraph.from_nodes(nodes, [cid(r) for r in roots])


def brute_force(eg: EGraph) -> float:
    best = math.inf
    classes = list(eg.classes)
    for picks in itertools.product(*(eg.classes[c] for c in classes)):
        sel = dict(zip(classes, picks, strict=True))
        try:
            check(eg, sel)
        except ExtractionError:
            continue
        best = min(best, dag_cost(eg, sel, cost_of))
    return best


@settings(max_examples=60, deadline=None)
@given(egraphs())
def test_extractors_valid_and_ilp_no_worse(eg: EGraph) -> None:
    results = {name: fn(eg, cost_of) for name, fn in EXTRACTORS.items()}
    for sel in results.values():
        check(eg, sel)
        assert set(sel) == set(reachable(eg, sel))
        assert math.isfinite(dag_cost(eg, sel, cost_of))
    ilp_cost = dag_cost(eg, results["ilp"], cost_of)
    assert ilp_cost <= dag_cost(eg, results["greedy"], cost_of) + MIP_GAP
    assert ilp_cost <= dag_cost(eg, results["tree"], cost_of) + MIP_GAP


@settings(max_examples=60, deadline=None)
@given(egraphs(max_classes=7, max_nodes=2))
def test_ilp_matches_brute_force(eg: EGraph) -> None:
    got = dag_cost(eg, ilp_extract(eg, cost_of), cost_of)
    assert got == pytest.approx(brute_force(eg), abs=MIP_GAP)


@st.composite
def kernel_egraphs(draw: st.DrawFn) -> EGraph:
    """E-graphs shaped like fused-kernel choices, built class by class: inputs; multi-output
    "kernels" (tuple classes) reading earlier values; values each made by projections ``Get(k, i)``
    of one or two earlier kernels (each kernel's outputs numbered in turn) and maybe a plain op over
    earlier values. A kernel may read a value another kernel makes (a plain quant of a norm that a
    fused norm + quant also yields), so the take and leave moves of ``eqsat.extract.improve`` have work;
    a value may have an identity view of itself. A random subset of the values are roots."""
    costs = st.integers(0, 9).map(float)
    n_in = draw(st.integers(1, 2))
    nodes = [ENode("in", (0.0,), k) for k in range(n_in)]
    values, kernels, slots = list(range(n_in)), [], {}
    for c in range(n_in, n_in + draw(st.integers(2, 9))):
        if not kernels or draw(st.booleans()):
            kids = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2, unique=True))
            nodes.append(ENode("kernel", (draw(costs), *(Ref(k) for k in kids)), c))
            kernels.append(c)
            slots[c] = 0
            continue
        for t in draw(st.lists(st.sampled_from(kernels), min_size=1, max_size=2, unique=True)):
            nodes.append(ENode("Get", (Ref(t), slots[t]), c))
            slots[t] += 1
        if draw(st.booleans()):
            kids = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2, unique=True))
            nodes.append(ENode("op", (draw(costs), *(Ref(k) for k in kids)), c))
        if draw(st.booleans()):  # an identity view: a reshape to the value's own shape, in its own class
            nodes.append(ENode("view", (0.0, Ref(c)), c))
        values.append(c)
    made = values[n_in:] or values
    roots = draw(st.lists(st.sampled_from(made), min_size=1, max_size=len(made), unique=True))
    return EGraph.from_nodes(nodes, roots)


def kernel_cost(n: ENode) -> float:
    return 0.0 if n.op == "Get" else float(n.args[0])  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None)
@given(kernel_egraphs())
def test_greedy_on_kernel_choices_is_valid_and_ilp_no_worse(eg: EGraph) -> None:
    got = greedy_dag(eg, kernel_cost)
    check(eg, got)
    assert dag_cost(eg, ilp_extract(eg, kernel_cost), kernel_cost) <= dag_cost(eg, got, kernel_cost) + MIP_GAP


def test_shared_subexpression_counted_once() -> None:
    # R = pair(p(X), q(X)) costs 1+1+1+10 = 13 as a DAG but 23 as a tree; leaf "big" costs 20.
    x, p, q, r = 0, 1, 2, 3
    nodes = [node("x", x, 10), node("p", p, 1, x), node("q", q, 1, x),
             node("pair", r, 1, p, q), node("big", r, 20)]
    eg = EGraph.from_nodes(nodes, [r])
    dag = greedy_dag(eg, cost_of)
    assert eg.nodes[dag[r]].op == "pair" and dag_cost(eg, dag, cost_of) == 13
    assert dag_cost(eg, ilp_extract(eg, cost_of), cost_of) == 13
    tree = tree_greedy(eg, cost_of)
    assert tree == {r: 4} and dag_cost(eg, tree, cost_of) == 20


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
@pytest.mark.parametrize("loop_cost", [0.0, 1.0])
def test_cycle_picks_leaf(name: str, loop_cost: float) -> None:
    eg = EGraph.from_nodes([node("f", 7, loop_cost, 7), node("leaf", 7, 5)], [7])
    assert EXTRACTORS[name](eg, cost_of) == {7: 1}


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_no_finite_choice_raises(name: str) -> None:
    inf_root = EGraph.from_nodes([node("a", 0, math.inf), node("b", 1, 1), node("c", 0, math.inf, 1)], [0])
    with pytest.raises(ExtractionError):
        EXTRACTORS[name](inf_root, cost_of)
    only_cycle = EGraph.from_nodes([node("f", 0, 1, 1), node("g", 1, 1, 0), node("h", 2, 0)], [0, 2])
    with pytest.raises(ExtractionError):
        EXTRACTORS[name](only_cycle, cost_of)


@settings(max_examples=60, deadline=None)
@given(egraphs())
def test_greedy_costs_sets_alike_summed_bit_by_bit_or_as_a_dot_product(eg: EGraph) -> None:
    # small e-graphs sum a set's costs bit by bit; large ones take numpy's dot product: forced here
    try:
        by_bits = greedy_dag(eg, cost_of)
    except ExtractionError:
        return
    with mock.patch.object(greedy, "_DENSE_FROM", -1), mock.patch.object(greedy, "_LOOP_UPTO", 0):
        dense = greedy_dag(eg, cost_of)
    assert dag_cost(eg, dense, cost_of) == pytest.approx(dag_cost(eg, by_bits, cost_of), rel=1e-9, abs=1e-12)


def test_greedy_dag_is_fast_on_a_large_dag() -> None:
    # A 10k-class residual chain: class i has a(i-1, i-2) and a costlier b(i-1), so sets overlap heavily.
    nodes = [node("x", 0, 1), node("y", 1, 1, 0)]
    for i in range(2, 10_000):
        nodes += [node("a", i, 1, i - 1, i - 2), node("b", i, 2, i - 1)]
    eg = EGraph.from_nodes(nodes, [9_999])
    start = time.perf_counter()
    sel = greedy_dag(eg, cost_of)
    assert time.perf_counter() - start < 2.0
    check(eg, sel)
    assert len(sel) == 10_000 and dag_cost(eg, sel, cost_of) == 10_000


def test_greedy_repairs_a_cyclic_choice() -> None:
    # Safety net: per-class bests A -> f(B), B -> g(A) form a cycle; A falls back to its first choice.
    from eqsat.extract.greedy import _finish

    eg = EGraph.from_nodes([node("a", 0, 5), node("f", 0, 0, 1), node("g", 1, 0, 0)], [0])
    kids = [n.children for n in eg.nodes]
    best = {0: (0.0, None, 1), 1: (0.0, None, 2)}
    assert _finish(eg, kids, best, first={0: 0, 1: 2}, order={0: 0, 1: 1}) == {0: 0}


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_negative_cost_rejected(name: str) -> None:
    with pytest.raises(ExtractionError, match="negative"):
        EXTRACTORS[name](EGraph.from_nodes([node("a", 0, -1)], [0]), cost_of)


def test_greedy_leaves_a_fused_kernel_whose_unfused_producer_stays_alive() -> None:
    # x -> AddRms (outputs: norm, residual); the norm also feeds a root of its own (a router GEMM), so a
    # fused AddRms + quant kernel K (outputs: q, scale, residual) recomputes it. Each of K's outputs alone
    # is cheaper from K (5.5) than otherwise (q, scale: a plain Quant of the norm, 2 + 6; the residual:
    # AddRms, 6), so greedy takes K for all three, and no single switch pays: K stays alive while any
    # one of them reads it. AddRms + Quant (8) beats AddRms + K (11.5) only when all three leave K at once
    own = {"Leaf": 0.0, "AddRms": 6.0, "K": 5.5, "Quant": 2.0, "Get": 0.0}
    x, add, norm, res, k, quant, q, s = range(8)
    nodes = [ENode("Leaf", (0,), x), ENode("AddRms", (Ref(x),), add), ENode("Get", (Ref(add), 0), norm),
             ENode("Get", (Ref(add), 1), res), ENode("Get", (Ref(k), 2), res), ENode("K", (Ref(x),), k),
             ENode("Quant", (Ref(norm),), quant), ENode("Get", (Ref(k), 0), q), ENode("Get", (Ref(quant), 0), q),
             ENode("Get", (Ref(k), 1), s), ENode("Get", (Ref(quant), 1), s)]
    eg = EGraph.from_nodes(nodes, [norm, q, s, res])

    def cost(n: ENode) -> float:
        return own[n.op]

    assert dag_cost(eg, ilp_extract(eg, cost), cost) == 8.0
    got = greedy_dag(eg, cost)
    assert dag_cost(eg, got, cost) == 8.0 and k not in got


def test_a_kept_cost_tells_e_nodes_apart_by_the_facts_of_what_they_read_and_make():
    catalog, profile = Options().catalog, load_profile("mi300x")
    memo = CostMemo(catalog, profile, 256)
    small, wide = TensorFacts("bfloat16", ("s0", 64)), TensorFacts("float32", ("s0", 4096))
    graphs = [EGraph.from_nodes([ENode("Leaf", (0,), 0), ENode("A1", ("aten.exp.default", 0, Ref(0)), 1)], [1],
                                {0: a, 1: b}) for a, b in [(small, small), (small, wide), (wide, small), (small, small)]]
    for eg in graphs:
        kept = RooflineCost(eg, catalog, profile, 256, memo)
        assert [kept(n) for n in eg.nodes] == [RooflineCost(eg, catalog, profile, 256)(n) for n in eg.nodes]
    assert len(memo.table) == 5  # three generic nodes, two leaves: the fourth graph's costs were kept ones
    other = CostMemo(catalog, load_profile("h200"), 256)
    RooflineCost(graphs[0], catalog, profile, 256, other)(graphs[0].nodes[1])
    assert not other.table  # a memo of another profile is not used


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_a_finite_node_over_a_class_with_no_finite_node(name: str) -> None:
    """A finite node one of whose child classes holds only infinite nodes (how a cost that bans most
    new e-nodes looks) is never chosen, nor its class reached, and the rest is still extracted."""
    eg = EGraph.from_nodes([node("x", 0, 1), node("banned", 1, math.inf, 0), node("both", 2, 1, 0, 1),
                            node("root", 3, 2, 0), node("via", 3, 1, 2)], [3])
    choice = EXTRACTORS[name](eg, cost_of)
    assert eg.nodes[choice[3]].op == "root" and dag_cost(eg, choice, cost_of) == 3


def test_greedy_takes_a_dual_kernel_whole_beside_identity_views() -> None:
    # MLA's paired norms: Q (norm + quant of q_c: outputs q, s) costs 3, M (both norms: q, s and kv's
    # norm) 4, kv's own norm 5. Alone, q and s are cheaper from Q and kv from M (7 in all); M whole costs 4.
    # Every value also has an identity view of itself (a reshape to its own shape, in its own class): no
    # switch may take one (it keeps its class alive by itself), and one that would must not cost the
    # take of M its place.
    qc, kvc, t_q, t_m, q, s, kv = range(7)
    own = {"Leaf": 0.0, "Q": 3.0, "M": 4.0, "Norm": 5.0, "Get": 0.0, "View": 1e-6}
    nodes = [ENode("Leaf", (0,), qc), ENode("Leaf", (1,), kvc), ENode("Q", (Ref(qc),), t_q),
             ENode("M", (Ref(qc), Ref(kvc)), t_m),
             ENode("Get", (Ref(t_q), 0), q), ENode("Get", (Ref(t_m), 0), q), ENode("View", (Ref(q),), q),
             ENode("Get", (Ref(t_q), 1), s), ENode("Get", (Ref(t_m), 1), s), ENode("View", (Ref(s),), s),
             ENode("Get", (Ref(t_m), 2), kv), ENode("Norm", (Ref(kvc),), kv), ENode("View", (Ref(kv),), kv)]
    eg = EGraph.from_nodes(nodes, [q, s, kv])

    def cost(n: ENode) -> float:
        return own[n.op]

    assert dag_cost(eg, ilp_extract(eg, cost), cost) == pytest.approx(4.0)
    got = greedy_dag(eg, cost)
    check(eg, got)
    assert dag_cost(eg, got, cost) == pytest.approx(4.0) and t_q not in got


def test_a_switch_that_closes_a_cycle_is_undone_alone() -> None:
    # The dual kernel of the test above (take M whole: 9 -> 6), beside a tuple P (cost 2) whose outputs a
    # and b can each also be made from the other (f(b), g(a), 0.1 each): leaving P for them saves 1.8 but
    # makes a and b read each other. That try is undone; the take of M stays.
    qc, kvc, t_q, t_m, q, s, kv, x, t_p, a, b = range(11)
    own = {"Leaf": 0.0, "Q": 3.0, "M": 4.0, "Norm": 5.0, "P": 2.0, "F": 0.1, "Get": 0.0}
    nodes = [ENode("Leaf", (0,), qc), ENode("Leaf", (1,), kvc), ENode("Q", (Ref(qc),), t_q),
             ENode("M", (Ref(qc), Ref(kvc)), t_m), ENode("Get", (Ref(t_q), 0), q), ENode("Get", (Ref(t_m), 0), q),
             ENode("Get", (Ref(t_q), 1), s), ENode("Get", (Ref(t_m), 1), s), ENode("Get", (Ref(t_m), 2), kv),
             ENode("Norm", (Ref(kvc),), kv), ENode("Leaf", (2,), x), ENode("P", (Ref(x),), t_p),
             ENode("Get", (Ref(t_p), 0), a), ENode("F", (Ref(b),), a), ENode("Get", (Ref(t_p), 1), b),
             ENode("F", (Ref(a),), b)]
    eg = EGraph.from_nodes(nodes, [q, s, kv, a, b])

    def cost(n: ENode) -> float:
        return own[n.op]

    assert dag_cost(eg, ilp_extract(eg, cost), cost) == pytest.approx(6.0)
    got = greedy_dag(eg, cost)
    check(eg, got)
    assert dag_cost(eg, got, cost) == pytest.approx(6.0)
