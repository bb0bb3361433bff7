"""Never break a compile: each injected fault leaves the graph exactly as it was (code and node
meta), the warning names the stage and cause, and strict mode raises instead."""

from __future__ import annotations

import logging

import pytest
import torch
from eqsat.extract import EXTRACTORS

import eqsat
from eqsat.core.spec import KernelSpec, Traffic, params
from eqsat.engine import saturate
from eqsat.fx import emitter as fx_out
from tests.conftest import rand, trace

vllm, vir = torch.ops.vllm, torch.ops.vllm_ir


def graph():
    def f(x, r, w):
        q, s = vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128)
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-6)
        return q, s, vllm.rocm_aiter_group_fp8_quant(n, 128), res
    return trace(f, rand(8, 256), rand(8, 256, seed=4), rand(256))


def snapshot(gm):
    return gm.code, [(n.name, n.op, str(n.target), n.args, sorted(n.meta), repr(n.meta.get("val")))
                     for n in gm.graph.nodes]


def _raises(*a, **k):
    raise RuntimeError("injected")


def bad_rule(monkeypatch):  # a rule egglog rejects: its semantics names no constructor
    bad = KernelSpec("K_bad", params("x:T"), lambda a: Traffic(0, 0), outputs=("(NoSuchOp x)",))
    return {"catalog": eqsat.DEFAULT_CATALOG.extend([bad])}


def raising_formula(monkeypatch):  # an exception while a rule's kernel is costed
    def boom(a):
        raise ZeroDivisionError("traffic formula")
    like = eqsat.DEFAULT_CATALOG["I_rms_group_quant"]  # a row emit can write (inlined), so it is costed
    row = KernelSpec("K_twin", params("x:T w:T eps:f64 G:i64 dt:dtype"), boom, outputs=like.outputs,
                     numerics="rounding", expand=like.expand)
    return {"catalog": eqsat.DEFAULT_CATALOG.extend([row])}


def egglog_failure(monkeypatch):
    monkeypatch.setattr(saturate, "saturate", _raises)
    return {}


def extraction_failure(monkeypatch):
    monkeypatch.setitem(EXTRACTORS, "greedy", _raises)
    return {}


def budget_overrun(monkeypatch):
    return {"budgets": eqsat.Budgets(seconds=0.0)}


def emit_failure(monkeypatch):  # a failure of emit itself, after nodes were created: no site to blame
    real, calls = fx_out.check_order, []

    def failing(*a, **k):
        calls.append(1)
        real(*a, **k)
        raise RuntimeError("injected")

    monkeypatch.setattr(fx_out, "check_order", failing)
    return {}


def misplaced_node(monkeypatch):  # emit places a node before its inputs: caught before any erasure
    real = fx_out._Emitter._call

    def first(self, *a, **k):
        node = real(self, *a, **k)
        next(iter(self.graph.nodes)).prepend(node)  # before the placeholders it reads
        return node

    monkeypatch.setattr(fx_out._Emitter, "_call", first)
    return {}


FAULTS = {"bad_rule": (bad_rule, "prepare"), "raising_formula": (raising_formula, "extract"),
          "egglog_failure": (egglog_failure, "saturate"), "extraction_failure": (extraction_failure, "extract"),
          "budget_overrun": (budget_overrun, "BudgetExceeded"), "emit_failure": (emit_failure, "emit"),
          "misplaced_node": (misplaced_node, "emit")}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_leaves_graph_identical(fault, monkeypatch, caplog):
    inject, cause = FAULTS[fault]
    gm = graph()
    before = snapshot(gm)
    opts = inject(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="eqsat"):
        report = eqsat.optimize(gm, **opts)
    assert snapshot(gm) == before
    assert report.error and cause in report.error and cause in caplog.text and not report.changed
    gm.graph.lint()
    with pytest.raises(eqsat.EqSatInternalError):
        eqsat.optimize(gm, strict=True, **opts)
    assert snapshot(gm) == before


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_pass_survives_fault_inside_torch_compile_style_call(fault, monkeypatch, caplog):
    """The pass object (as Inductor calls it: on a Graph) logs and leaves the graph as it was."""
    inject, _ = FAULTS[fault]
    gm = graph()
    before = snapshot(gm)
    p = eqsat.EqSatPass(**inject(monkeypatch))
    with caplog.at_level(logging.WARNING, logger="eqsat"):
        p(gm.graph)
    assert snapshot(gm) == before and "graph left unchanged" in caplog.text


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_as_it_was_after_a_pass_that_fails(monkeypatch, enabled):
    import gc
    seen = []

    def record(*a, **k):
        seen.append(gc.isenabled())
        raise RuntimeError("injected")

    monkeypatch.setattr(saturate, "saturate", record)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        assert eqsat.optimize(graph()).error and seen == [False] and gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


def four_sites():
    """Four rms_norm + group quant sites, the last with eps 1e-3."""
    def f(x, w0, w1, w2, w3):
        outs = []
        for w, eps in ((w0, 1e-6), (w1, 1e-5), (w2, 1e-6), (w3, 1e-3)):
            outs.extend(vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x * w.sum(), w, eps), 128))
        return tuple(outs)
    return trace(f, rand(8, 256), *(rand(256, seed=k) for k in range(4)))


def test_one_unwritable_site_of_four_is_dropped_and_the_other_three_land(monkeypatch, caplog):
    """The fused op's fake refuses the eps-1e-3 site (as vLLM's fake refuses a 3-D input): emit leaves
    the graph as it was, extraction runs again without that site, the other three fusions land and
    the report names the dropped one (that site takes its next best choice: Inductor's chain)."""
    from eqsat.fx.output_layouts import OutputLayouts

    real = OutputLayouts.check

    def refusing(self, op, args, kwargs, mode):
        if "rmsnorm_fp8_group_quant" in str(op) and any(isinstance(a, float) and a == 1e-3 for a in args):
            raise ValueError("refused by the fake")
        return real(self, op, args, kwargs, mode)

    monkeypatch.setattr(OutputLayouts, "check", refusing)
    gm, want = four_sites(), four_sites()
    with caplog.at_level(logging.WARNING, logger="eqsat"):
        report = eqsat.optimize(gm, profile="mi300x", sizes=256)
    assert report.error is None and report.kernels_chosen["K_rmsnorm_fp8_group_quant"] == 3
    assert len(report.dropped) == 1 and "refused by the fake" in report.dropped[0]
    assert "K_rmsnorm_fp8_group_quant" in report.dropped[0] and "dropped the site" in caplog.text
    gm.graph.lint()
    fused = [n for n in gm.graph.nodes if "rmsnorm_fp8_group_quant" in str(n.target)]
    assert sorted(n.args[2] for n in fused) == [1e-6, 1e-6, 1e-5]
    args = [rand(8, 256, seed=9), *(rand(256, seed=k) for k in range(4))]
    from eqsat.library import reference as ref
    got, exp = gm(*args), want(*args)
    for k in range(0, 8, 2):
        assert ref.fp8_step_error(exp[k], exp[k + 1], got[k], got[k + 1], 128) <= 1.25
    with pytest.raises(eqsat.EqSatInternalError):  # strict mode: a contract the catalog missed is a bug
        eqsat.optimize(four_sites(), profile="mi300x", sizes=256, strict=True)


def test_a_failed_graph_leaves_the_pass_its_warm_engine(monkeypatch):
    p = eqsat.EqSatPass(profile="mi300x")
    p(graph().graph)
    engine = p.engine
    assert engine is not None
    monkeypatch.setitem(EXTRACTORS, "greedy", _raises)  # the next graph fails inside the pipeline
    p(graph().graph)
    assert p.last_report.error and p.engine is engine
    monkeypatch.undo()
    gm = graph()
    p(gm.graph)
    assert p.engine is engine and p.last_report.changed
