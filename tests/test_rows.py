"""Row-wise ops commute with reshapes that keep the last dim (``rewrites/layout.py``): a norm over
``[T, 2, N]`` viewed as ``(-1, N)`` is the norm of the rows, so its quants fuse into the 2-D kernels
vLLM's ops are (DeepSeek-V3.2's indexer, where vLLM's view pattern #6 crashes); the same for the
fused-add norm (both outputs) and the per-token quant."""

from __future__ import annotations

import torch

import eqsat
from benchmarks.graphs import models
from tests.conftest import FP8, rand, structure, trace
from tests.test_rules import check

vllm, vir = torch.ops.vllm, torch.ops.vllm_ir
TESTED_RULES = {"rms-norm-of-reshape", "add-rms-norm-of-reshape", "quant-token-of-reshape"}
N = 512


def test_norm_of_a_3d_input_viewed_as_rows_fuses():
    check(lambda x, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6).reshape(-1, N), 128),
          lambda x, w: vllm.rocm_aiter_rmsnorm_fp8_group_quant(x.reshape(-1, N), w, 1e-6, 128),
          [rand(8, 2, N), rand(N)], numerics="rounding", fires="rms-norm-of-reshape")


def test_the_v32_indexer_fan_out_over_a_3d_norm_fuses():
    """One norm over ``[T, 2, N]``, viewed ``(-1, N)``, two group quants (the q_b GEMM's and the
    indexer's): each quant becomes the fused kernel over the rows (or one kernel both read)."""
    def before(x, w):
        y = vir.rms_norm(x, w, 1e-6).reshape(-1, N)
        return (*vllm.rocm_aiter_group_fp8_quant(y, 128), *vllm.rocm_aiter_group_fp8_quant(y, 128))

    def after(x, w):
        q, s = vllm.rocm_aiter_rmsnorm_fp8_group_quant(x.reshape(-1, N), w, 1e-6, 128)
        return q, s, q, s

    check(before, after, [rand(8, 2, N), rand(N)], numerics="rounding", fires="rms-norm-of-reshape",
          profile="mi300x", sizes=256)


def test_fused_add_norm_of_3d_inputs_viewed_as_rows_fuses_with_its_residual():
    def before(x, r, w):
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
        return (*vllm.rocm_aiter_group_fp8_quant(n.reshape(-1, N), 128), res)

    def after(x, r, w):
        q, res, s = vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant(x.reshape(-1, N), r.reshape(-1, N), w, 1e-5, 128)
        return q, s, res.reshape(x.shape)

    check(before, after, [rand(8, 2, N), rand(8, 2, N, seed=3), rand(N)], numerics="rounding",
          fires="add-rms-norm-of-reshape")


def test_per_token_quant_of_rows_is_the_quant_reshaped():
    """Bit-exact: the quant of ``x`` viewed as rows and the quant of ``x`` itself share one kernel
    (a choice the exact extractor sees)."""
    def before(x):
        return (*vllm.rocm_aiter_per_token_quant(x.reshape(-1, N), FP8), *vllm.rocm_aiter_per_token_quant(x, FP8))

    def after(x):
        q, s = vllm.rocm_aiter_per_token_quant(x, FP8)
        return q.reshape(-1, N), s.reshape(-1, 1), q, s

    check(before, after, [rand(8, 2, N)], fires="quant-token-of-reshape", extractor="ilp")


def test_norm_of_rows_needs_a_contiguous_input():
    """A transposed input's rows are not its memory's rows: nothing fuses, the graph stays."""
    def f(x, w):
        y = vir.rms_norm(x.transpose(0, 1), w, 1e-6).reshape(-1, N)
        return vllm.rocm_aiter_group_fp8_quant(y, 128)

    gm = trace(f, rand(8, 2, N), rand(N))
    before = structure(gm)
    report = eqsat.optimize(gm, strict=True)
    assert "rms-norm-of-reshape" not in report.rules_fired and structure(gm) == before


def test_deepseek_v32_indexer_3d_graph_fuses():
    gm = models.deepseek_v32_indexer_3d()
    report = eqsat.optimize(gm, profile="mi300x", sizes=256, strict=True)
    assert report.kernels_chosen["K_rmsnorm_fp8_group_quant"] >= 1 and report.predicted_after_us < report.predicted_before_us
    assert not any("rocm_aiter_group_fp8_quant" in str(n.target) for n in gm.graph.nodes)


def test_a_3d_value_never_gets_a_2d_only_op():
    """The layout rule states the group quant of a per-head ``[T, H, 128]`` attention output's
    ``(-1, H * 128)`` view as the reshaped quant of the 3-D value; vLLM's AITER quant is 2-D only
    (its fake unpacks ``M, N``), so no extractor may pick that form (it once took the whole DeepSeek
    layer's rewrite down with it)."""
    def f(a, w):
        o = a.reshape(-1, 16 * 128)
        return (*vllm.rocm_aiter_group_fp8_quant(o, 128), vir.rms_norm(a, w, 1e-6))

    for extractor in ("greedy", "ilp", "tree"):
        gm = trace(f, rand(8, 16, 128), rand(128))
        report = eqsat.optimize(gm, strict=True, emit="always", extractor=extractor)
        assert report.error is None and report.rules_fired["quant-group-of-reshape"] > 0
        quants = [n for n in gm.graph.nodes if "rocm_aiter_group_fp8_quant" in str(n.target)]
        assert quants and all(n.args[0].meta["val"].dim() == 2 for n in quants), gm.code
