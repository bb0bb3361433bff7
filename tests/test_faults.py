"""Never break a compile: each injected fault leaves the graph exactly as it was (code and node
meta), the warning names the stage and cause, and strict mode raises instead."""

from __future__ import annotations

import logging

import pytest
import torch

import eqsat
from eqsat import fx_out, saturate
from eqsat.kernels.spec import KernelSpec, Traffic, params
from extract import EXTRACTORS
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
    row = KernelSpec("K_twin", params("x:T w:T eps:f64 G:i64 dt:dtype"), boom,
                     outputs=eqsat.DEFAULT_CATALOG["K_rmsnorm_fp8_group_quant"].outputs, numerics="rounding")
    return {"catalog": eqsat.DEFAULT_CATALOG.extend([row])}


def egglog_failure(monkeypatch):
    monkeypatch.setattr(saturate, "saturate", _raises)
    return {}


def extraction_failure(monkeypatch):
    monkeypatch.setitem(EXTRACTORS, "greedy", _raises)
    return {}


def budget_overrun(monkeypatch):
    return {"budgets": eqsat.Budgets(seconds=0.0)}


def emit_failure(monkeypatch):
    real, calls = fx_out._Emitter._call, []

    def flaky(self, *a, **k):
        calls.append(1)
        if len(calls) >= 2:  # after one node was created: the rollback has something to undo
            raise RuntimeError("injected")
        return real(self, *a, **k)

    monkeypatch.setattr(fx_out._Emitter, "_call", flaky)
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
