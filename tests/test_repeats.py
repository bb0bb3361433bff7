"""Repeats (``eqsat.engine.repeats``): a component that copies another is saturated once, and the pass
writes exactly what it writes when every copy is saturated."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat import graphfile
from eqsat.core.rule import rule
from eqsat.core.sexp import is_var, parse, show
from eqsat.core.spelling import VocabIndex
from eqsat.engine import repeats
from eqsat.engine.plan import plan
from eqsat.engine.staging import FlatQuery, tables
from eqsat.fx import importer
from tests.conftest import rand, scaled_gemm, structure, trace

STACKED = Path(__file__).parents[1] / "benchmarks" / "fixtures" / "model_graphs_h100" / "deepseekx8.json"


def _norm_quant_gemm(x, w, eps):
    q, s = torch.ops.vllm.rocm_aiter_group_fp8_quant(torch.ops.vllm_ir.rms_norm(x, w, eps), 128)
    return scaled_gemm(q, s)


def _four(x1, w1, x2, w2, x3, w3, x4, w4, x5, w5):
    """Three copies of one norm + quant + GEMM, a fourth with another eps and a fifth over wider rows
    (no copies of them)."""
    return (*(_norm_quant_gemm(x, w, 1e-6) for x, w in ((x1, w1), (x2, w2), (x3, w3), (x5, w5))),
            _norm_quant_gemm(x4, w4, 1e-5))


def _inputs() -> list[torch.Tensor]:
    return [t for k, n in enumerate((256, 256, 256, 256, 512)) for t in (rand(8, n, seed=k), rand(n, seed=10 + k))]


def test_copies_are_found_by_ops_constants_and_facts():
    gm = trace(_four, *_inputs())
    options = eqsat.Options()
    imported = importer.import_graph(gm.graph, options.catalog, VocabIndex(options.vocabularies), None)
    found = repeats.find(imported)
    assert len(found.groups) == 1
    group = found.groups[0]
    assert len(group.copies) == 2 and all(len(c) == len(group.model) for c in group.copies)
    ops = [[imported.terms[i][0] for i in part] for part in (group.model, *group.copies)]
    assert ops[0] == ops[1] == ops[2]
    reduced = found.reduced(imported)
    assert len(reduced.terms) == len(imported.terms) - 2 * len(group.model)
    assert not set(reduced.terms) & {i for c in group.copies for i in c}


def test_a_term_reading_no_loaded_node_turns_repeats_off_for_its_graph():
    gm = trace(_four, *_inputs())
    options = eqsat.Options()
    imported = importer.import_graph(gm.graph, options.catalog, VocabIndex(options.vocabularies), None)
    assert repeats.find(imported).groups
    imported.terms[len(imported.nodes)] = ("Neg", (importer.Arg(len(imported.nodes) + 1),))
    assert repeats.find(imported) is repeats.NONE


def test_a_graph_of_copies_is_rewritten_as_without_them():
    outs = {}
    for on in (True, False):
        gm = trace(_four, *_inputs())
        report = eqsat.optimize(gm, strict=True, profile="h200", repeats=on)
        assert report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 5}
        outs[on] = (structure(gm), report.predicted_before_us, report.predicted_after_us, report.egraph_nodes,
                    report.egraph_classes, gm(*_inputs()))
        assert (report.copied_nodes > 0) == on
    assert outs[True][:5] == outs[False][:5]
    assert all(torch.equal(a, b) for a, b in zip(outs[True][5], outs[False][5], strict=True))


def test_a_stacked_model_is_rewritten_as_without_repeats():
    """Eight DeepSeek-V3 layers in one graph (the residual adds chain them into one component; the
    rest repeats per layer, a relation no term reads among it: ``MlaLatents``)."""
    got = {}
    for on in (True, False):
        gm = graphfile.load(STACKED)
        report = eqsat.optimize(gm, strict=True, profile="h100", sizes=(1, 64, 8192), repeats=on)
        got[on] = (re.sub(r"eqsat_opaque\d+", "op", str(gm.graph)), dict(report.kernels_chosen),
                   report.predicted_before_us, report.predicted_after_us, report.egraph_nodes, report.egraph_classes)
        assert (report.copied_nodes > 400) == on
    assert got[True] == got[False]
    assert sum(got[True][1].values()) == 32


def test_every_rule_query_is_one_piece():
    """Repeats rely on it; a rule whose query is not would turn them off for its engine."""
    for numerics in ("rounding", "exact"):
        options = eqsat.Options(numerics=numerics)
        assert plan(options.catalog, options.active_rules()).disconnected == ()


def _ground(e) -> bool:
    return all(map(_ground, e[1:])) if isinstance(e, list) else not is_var(e)


def _constant_terms(e, constructors) -> list:
    """The terms with no variable among them in an action ``e`` (parsed)."""
    if not isinstance(e, list):
        return []
    inner = [m for a in e[1:] for m in _constant_terms(a, constructors)]
    return [e, *inner] if e[0] in constructors and _ground(e) else inner


def test_no_rule_makes_a_term_of_constants():
    """The one thing repeats copy apart that one e-graph would share (``eqsat.engine.repeats``): a term with
    no class argument that an action makes in several components."""
    for numerics in ("rounding", "exact"):
        options = eqsat.Options(numerics=numerics)
        known = plan(options.catalog, options.active_rules())
        assert not [(r.name, show(m)) for r in known.rules for a in r.actions
                    for m in _constant_terms(parse(a), known.constructors)]
    assert _constant_terms(parse('(union a (Reshape (Full 0.0) "1"))'), {"Reshape": (), "Full": ()})


def test_a_query_of_two_pieces_turns_repeats_off():
    options = eqsat.Options()
    known = tables(plan(options.catalog, options.active_rules()).constructors)
    pair = rule("pair-norms", ("(= a (RmsNorm x w e))", "(= b (RmsNorm y v f))"), ("(union a a)",))
    assert not repeats.connected(FlatQuery(pair.query, known))
    assert repeats.connected(FlatQuery(("(= a (RmsNorm x w e))", "(= b (RmsNorm a v f))"), known))
    assert not repeats.connected(FlatQuery(("(= a (RmsNorm x w e))", '(= (dtype y) "bfloat16")'), known))
    rules = (*options.active_rules(), pair)
    assert plan(options.catalog, rules).disconnected == ("pair-norms",)
    gm = trace(_four, *_inputs())
    report = eqsat.optimize(gm, replace(options, rules=rules), strict=True, profile="h200")
    assert report.copied_nodes == 0 and report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 5}


LAYER = st.tuples(st.sampled_from([1e-6, 1e-5]), st.sampled_from([256, 512]),
                  st.sampled_from(["own", "leaf", "term"]), st.booleans())
"""A layer: its eps, its width, what it reads (its own input, the previous layer's input, or the previous
layer's norm: one component with it) and whether its norm is an output too (a root flag)."""


def _stack(spec: list[tuple[float, int, str, bool]]):
    def f(*inputs):
        outs, ys = [], []
        for k, (eps, _, source, expose) in enumerate(spec):
            x = inputs[2 * k] if source == "own" or k == 0 else inputs[2 * k - 2] if source == "leaf" else ys[-1]
            y = torch.ops.vllm_ir.rms_norm(x, inputs[2 * k + 1], eps)
            ys.append(y)
            outs.append(scaled_gemm(*torch.ops.vllm.rocm_aiter_group_fp8_quant(y, 128)))
            if expose:
                outs.append(y)
        return tuple(outs)

    return f


@given(st.lists(LAYER, min_size=2, max_size=6))
@example([(1e-6, 256, "own", False), (1e-6, 512, "own", False), (1e-6, 256, "own", False)])
@example([(1e-6, 256, "own", False), (1e-6, 256, "own", True), (1e-6, 256, "leaf", False), (1e-5, 256, "term", False)])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_stack_is_rewritten_as_without_repeats(spec):
    widths = []
    for k, (_, width, source, _) in enumerate(spec):  # a layer reading the previous one's value has its width
        widths.append(widths[-1] if k and source != "own" else width)
    spec = [(eps, n, source, expose) for (eps, _, source, expose), n in zip(spec, widths, strict=True)]
    inputs = [t for k, n in enumerate(widths) for t in (rand(8, n, seed=k), rand(n, seed=100 + k))]
    got = {}
    for on, p in PASSES.items():
        gm = trace(_stack(spec), *inputs)
        p(gm.graph)
        gm.recompile()
        r = p.last_report
        got[on] = (structure(gm), dict(r.kernels_chosen), r.predicted_before_us, r.predicted_after_us,
                   r.egraph_nodes, r.egraph_classes)
    assert got[True] == got[False]


PASSES = {on: eqsat.EqSatPass(profile="h200", strict=True, repeats=on) for on in (True, False)}
