"""End to end through optimize(): vocabularies, opaque and mutating nodes, bad input, failures."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.fx as fx

import eqsat
from eqsat.engine import saturate
from eqsat.fx import emitter as fx_out
from tests.conftest import rand, targets, trace

vllm, vir, own = torch.ops.vllm, torch.ops.vllm_ir, torch.ops.eqsat


@torch.library.custom_op("eqsat_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


def rms_quant(x, w):
    return vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128)


def snapshot(gm: fx.GraphModule) -> tuple[str, list]:
    return gm.code, [(n.name, str(n.target), n.meta.get("val").shape if hasattr(n.meta.get("val"), "shape")
                      else None) for n in gm.graph.nodes]


def test_own_vocabulary_in_own_vocabulary_out():
    gm = trace(lambda x, w: own.group_fp8_quant(own.rms_norm(x, w, 1e-5), 64, torch.float8_e4m3fn),
               rand(8, 256), rand(256))
    report = eqsat.optimize(gm, strict=True)
    assert targets(gm) == ["eqsat.rmsnorm_fp8_group_quant.default"]
    assert report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1}
    assert report.predicted_after_us < report.predicted_before_us


def test_unknown_op_between_norm_and_quant_is_untouched():
    gm = trace(lambda x, w: vllm.rocm_aiter_group_fp8_quant(mystery(vir.rms_norm(x, w, 1e-6)), 128),
               rand(8, 256), rand(256))
    before = snapshot(gm)
    report = eqsat.optimize(gm, strict=True)
    assert snapshot(gm) == before and not report.changed


@pytest.mark.parametrize("which", ["input", "norm_output"])
def test_mutation_between_norm_and_quant_is_untouched(which):
    def f(x, w):
        y = vir.rms_norm(x, w, 1e-6)
        (x if which == "input" else y).add_(1)
        return vllm.rocm_aiter_group_fp8_quant(y, 128)

    gm = trace(f, rand(8, 256), rand(256))
    before = snapshot(gm)
    eqsat.optimize(gm, strict=True)
    assert snapshot(gm) == before


def test_exact_numerics_never_fuses_rounding_kernels():
    gm = trace(rms_quant, rand(8, 256), rand(256))
    before = snapshot(gm)
    report = eqsat.optimize(gm, numerics="exact", strict=True)
    assert snapshot(gm) == before and not report.rules_fired


@pytest.mark.parametrize("group", [96, 512 + 128])
def test_group_size_checked_against_kernel_and_shape(group):
    """G = 96 divides N = 768 but is not a power of two (AITER needs one); 640 does not divide N = 512.
    (Inductor's twin of the chain has no such need, and may be chosen.)"""
    n = 768 if group == 96 else 512
    gm = trace(lambda x, w: own.group_fp8_quant(own.rms_norm(x, w, 1e-6), group, torch.float8_e4m3fn),
               rand(8, n), rand(n))
    report = eqsat.optimize(gm, strict=True)
    assert "fuse-K_rmsnorm_fp8_group_quant" not in report.rules_fired
    assert "K_rmsnorm_fp8_group_quant" not in report.kernels_chosen


def test_not_a_graph_is_a_clear_error():
    with pytest.raises(eqsat.EqSatInputError, match="expected a torch.fx.GraphModule"):
        eqsat.optimize("graph")


def test_graph_without_meta_val_is_a_clear_error():
    gm = fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    with pytest.raises(eqsat.EqSatInputError, match=r"meta\['val'\]"):
        eqsat.optimize(gm)


def test_bad_options_are_clear_errors():
    gm = trace(rms_quant, rand(8, 256), rand(256))
    with pytest.raises(eqsat.EqSatInputError, match="unknown device profile"):
        eqsat.optimize(gm, profile="tpu")
    with pytest.raises(eqsat.EqSatInputError, match="numerics"):
        eqsat.optimize(gm, numerics="approximately")


def test_saturation_failure_leaves_graph_untouched(monkeypatch, caplog):
    gm = trace(rms_quant, rand(8, 256), rand(256))
    before = snapshot(gm)

    def boom(*a, **k):
        raise RuntimeError("injected egglog failure")

    monkeypatch.setattr(saturate, "saturate", boom)
    with caplog.at_level(logging.WARNING, logger="eqsat"):
        report = eqsat.optimize(gm)
    assert snapshot(gm) == before
    assert "saturate" in report.error and "injected" in caplog.text
    with pytest.raises(eqsat.EqSatInternalError, match="saturate"):
        eqsat.optimize(gm, strict=True)


def test_emit_failure_midway_is_rolled_back(monkeypatch):
    """The fused kernel is created and the quant's first getitem adopted (moved after it, reading it)
    before adopting the second fails: every node is back where it was, reading what it read."""
    gm = trace(lambda x, r, w: (rms_quant(x, w), vir.fused_add_rms_norm(x, r, w, 1e-6)),
               rand(8, 256), rand(8, 256, seed=2), rand(256))
    before, text = snapshot(gm), str(gm.graph)
    real_adopt, adopted = fx_out._Emitter._adopt, []

    def flaky(self, *a, **k):
        if adopted:
            raise RuntimeError("injected emit failure")
        adopted.append(real_adopt(self, *a, **k))
        return adopted[-1]

    monkeypatch.setattr(fx_out._Emitter, "_adopt", flaky)
    with pytest.raises(eqsat.EqSatInternalError, match="injected emit failure"):  # strict: no second try
        eqsat.optimize(gm, strict=True)
    assert [n.name for n in adopted] == ["getitem"]
    assert snapshot(gm) == before and str(gm.graph) == text
    gm.graph.lint()
    calls = []

    def once(self, *a, **k):  # the second adoption of the run fails, no other
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected emit failure")
        return real_adopt(self, *a, **k)

    monkeypatch.setattr(fx_out._Emitter, "_adopt", once)
    two = trace(lambda x, y, w: (rms_quant(x, w), rms_quant(y, w)), rand(8, 256), rand(8, 256, seed=3), rand(256))
    report = eqsat.optimize(two)  # the failing site is dropped, the graph is written without it
    assert report.error is None and len(report.dropped) == 1 and "injected emit failure" in report.dropped[0]
    assert report.changed and report.kernels_chosen["K_rmsnorm_fp8_group_quant"] == 1
    two.graph.lint()


def test_a_new_kernels_getitems_are_the_old_ones_moved():
    """The fused kernel's outputs are read through the quant's own getitems (moved after the kernel,
    names and values kept), not through new ones: nothing else in the graph changes."""
    gm = trace(lambda x, r, w: (rms_quant(x, w), vir.fused_add_rms_norm(x, r, w, 1e-6)),
               rand(8, 256), rand(8, 256, seed=2), rand(256))
    vals = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    eqsat.optimize(gm, strict=True)
    gm.graph.lint()
    kernel = next(n for n in gm.graph.nodes if "rmsnorm_fp8_group_quant" in str(n.target))
    assert [(n.name, n.args) for n in kernel.users] == [("getitem", (kernel, 0)), ("getitem_1", (kernel, 1))]
    assert all(n.meta["val"] is vals[n.name] for n in kernel.users)
    assert [n.name for n in gm.graph.nodes] == ["x_1", "r_1", "w_1", "fused_add_rms_norm", "getitem_2", "getitem_3",
                                                kernel.name, "getitem", "getitem_1", "output"]


def test_report_names_stages_and_stop_reason():
    gm = trace(rms_quant, rand(8, 256), rand(256))
    report = eqsat.optimize(gm)
    assert report.stop_reason == "saturated"
    assert set(report.stage_ms) == {"import", "prepare", "load", "saturate", "serialize", "extract",
                                    "emit"}
    assert "K_rmsnorm_fp8_group_quant" in report.table()


def test_iteration_budget_is_reported():
    gm = trace(rms_quant, rand(8, 256), rand(256))
    report = eqsat.optimize(gm, budgets=eqsat.Budgets(iterations=0))
    assert report.stop_reason == "iteration_limit" and not report.changed


def test_an_opaque_value_no_term_reads_is_left_out_of_the_e_graph():
    """The router GEMM's weight and bias, the MoE's output and the symbolic token count are read by
    opaque ops or the output only: they are no terms, and the counts say so."""
    from benchmarks.graphs import models
    from eqsat.core.spelling import VocabIndex
    from eqsat.fx.importer import Arg, import_graph

    models.register_ops()
    gm = models.gpt_oss_router_pad()
    options = eqsat.Options()
    imported = import_graph(gm, options.catalog, VocabIndex(options.vocabularies))
    read = {a.node for _, args in imported.terms.values() for a in args if isinstance(a, Arg)}
    leaves = {i for i, (op, _) in imported.terms.items() if op == "Leaf"}
    names = {n.name for i, n in enumerate(imported.nodes) if i in imported.opaque and i not in imported.terms}
    assert leaves <= read and names == {"tokens", "w_router", "b_router", "rocm_unquantized_gemm", "fused_moe"}
    report = eqsat.optimize(gm, strict=True, profile="h200", sizes=8)  # the H200's lines: the kernel wins its copy
    assert report.changed and report.imported_terms == len(imported.terms) - len(leaves) == 4
    assert report.egraph_nodes == 15  # 12, and the Inductor twin I_add_rms_pad with its two outputs


def test_an_ops_purity_is_read_once_per_index(monkeypatch):
    """Whether an op is impure depends on the op alone: the index a pass's engine keeps across graphs
    asks torch once per op, and a graph imported again keeps the same nodes opaque."""
    from eqsat.core.spelling import VocabIndex
    from eqsat.fx.importer import import_graph

    gm = trace(lambda x, w: rms_quant(mystery(x), w), rand(8, 256), rand(256))
    asked: list[object] = []
    real = fx.Node.is_impure
    monkeypatch.setattr(fx.Node, "is_impure", lambda self, *a, **k: asked.append(self.target) or real(self, *a, **k))
    options = eqsat.Options()
    vocab = VocabIndex(options.vocabularies)
    first = import_graph(gm, options.catalog, vocab)
    assert asked and len(asked) == len(set(asked)) and vocab.op_reasons
    seen = list(asked)
    again = import_graph(gm, options.catalog, vocab)
    assert asked == seen and again.opaque == first.opaque


def _deep(depth: int):
    """A fused-add norm + quant whose residual feeds a chain of ``depth`` ops: fusing the norm changes
    the chain's first input, so emit writes every op of the chain again."""
    def f(x, r, w):
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-6)
        for _ in range(depth):
            res = torch.ops.aten.abs.default(res)
        return (*torch.ops.vllm.rocm_aiter_group_fp8_quant(n, 128), res)
    return trace(f, rand(8, 256), rand(8, 256, seed=2), rand(256))


def test_emit_is_iterative_and_linear_in_the_depth_it_writes_again():
    """No recursion along the graph's depth (a 16-layer stack once hit Python's recursion limit), and
    the time to write a chain again grows linearly with its length."""
    import time

    times = {}
    for depth in (300, 2400):
        gm = _deep(depth)
        start = time.perf_counter()
        report = eqsat.optimize(gm, strict=True, profile="mi300x", sizes=256)
        times[depth] = time.perf_counter() - start
        assert report.kernels_chosen == {"K_rmsnorm_add_fp8_group_quant": 1}
        assert sum(n.target is torch.ops.aten.abs.default for n in gm.graph.nodes) == depth
        gm.graph.lint()
    assert times[2400] < 8 * 2.5 * times[300], times  # 8x the nodes: well under quadratic
