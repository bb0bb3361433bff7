"""vLLM's mutating ``_C`` ops as Inductor hands them to a post-grad pass: ``auto_functionalized`` (v1,
as vLLM configures Inductor) writing into ``empty`` buffers. Captured through torch.compile, fused,
and checked against eager."""

from __future__ import annotations

import torch

import eqsat
from eqsat.library.reference import fp8_step_error
from tests.conftest import rand

FNUZ = torch.float8_e4m3fnuz
FMAX = torch.finfo(FNUZ).max
C = torch.ops._C


def compile_with(pass_, fn, *inputs):
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=pass_, enable_auto_functionalized_v2=False,
                                      fx_graph_cache=False):
        torch._dynamo.mark_dynamic(inputs[0], 0)  # the token dim, as vLLM marks it; hidden sizes static
        return torch.compile(fn)(*inputs)


class Capture(eqsat.EqSatPass):
    def __call__(self, graph):
        self.before = graph.python_code("self").src
        super().__call__(graph)
        self.after = graph.python_code("self").src


def c_rms_group_quant(x, w):
    y = torch.empty_like(x)
    C.rms_norm(y, x, w, 1e-6)
    q = torch.empty(x.shape, dtype=FNUZ)
    s = torch.empty(x.shape[0], x.shape[1] // 128, dtype=torch.float32)
    C.per_token_group_fp8_quant(y, q, s, 128, 1e-10, -FMAX, FMAX, False, False, False)
    return q, s


def c_silu_group_quant(x):
    y = torch.empty(x.shape[0], x.shape[1] // 2, dtype=x.dtype)
    C.silu_and_mul(y, x)
    q = torch.empty(y.shape, dtype=FNUZ)
    s = torch.empty(y.shape[0], y.shape[1] // 128, dtype=torch.float32)
    C.per_token_group_fp8_quant(y, q, s, 128, 1e-10, -FMAX, FMAX, False, False, False)
    return q, s


def test_c_ops_under_auto_functionalized_fuse():
    x, w = rand(16, 512), rand(512)
    p = Capture(strict=True)
    got = compile_with(p, c_rms_group_quant, x, w)
    assert "auto_functionalized" in p.before and "empty" in p.before
    assert p.last_report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1}
    assert "auto_functionalized" not in p.after and "empty" not in p.after
    want = c_rms_group_quant(x, w)
    assert fp8_step_error(got[0], got[1], want[0], want[1], 128) <= 1.25


def test_c_silu_and_quant_fuse():
    x = rand(16, 1024)
    p = Capture(strict=True, sizes=8)
    got = compile_with(p, c_silu_group_quant, x)
    assert p.last_report.kernels_chosen == {"K_silu_mul_fp8_group_quant": 1}
    want = c_silu_group_quant(x)
    assert fp8_step_error(got[0], got[1], want[0], want[1], 128) <= 1.25


def test_quant_with_other_bounds_is_not_this_op():
    """vLLM's native bound on e4m3fnuz is 224, not the dtype's 240: that quant is not QuantGroup."""
    def f(x, w):
        y = torch.empty_like(x)
        C.rms_norm(y, x, w, 1e-6)
        q = torch.empty(x.shape, dtype=FNUZ)
        s = torch.empty(x.shape[0], x.shape[1] // 128, dtype=torch.float32)
        C.per_token_group_fp8_quant(y, q, s, 128, 1e-10, -224.0, 224.0, False, False, False)
        return q, s

    p = Capture(strict=True)
    compile_with(p, f, rand(16, 512), rand(512))
    assert not p.last_report.kernels_chosen and p.after == p.before


def test_input_mutated_in_place_keeps_its_copy_epilogue():
    """An input mutated in place ends the graph with ``copy_(input, new)``, after every reader: both
    sides fuse (the r side reads ``r * 2``, a fresh value), the write-back stays."""
    vllm, vir = torch.ops.vllm, torch.ops.vllm_ir

    def f(x, r, w):
        q, s = vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128)
        r.mul_(2)  # an in-place update of an input: a copy_ epilogue after functionalization
        q2, s2 = vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(r, w, 1e-6), 128)
        return q, s, q2, s2

    x, r, w = rand(16, 512), rand(16, 512, seed=3), rand(512)
    p = Capture(strict=True)
    r_compiled = r.clone()
    got = compile_with(p, f, x, r_compiled, w)
    assert "copy_" in p.before and "copy_" in p.after
    assert p.last_report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 2}
    r_eager = r.clone()
    want = f(x, r_eager, w)
    assert torch.equal(r_compiled, r_eager)
    assert fp8_step_error(got[0], got[1], want[0], want[1], 128) <= 1.25
    assert fp8_step_error(got[2], got[3], want[2], want[3], 128) <= 1.25


def test_values_an_epilogue_overwrites_are_computed_before_it():
    """The copy_ that writes back a mutated input comes after every node: a term reading the input
    is rewritten (here a reshape chain) and its new code must still read the value before the write."""
    def f(x, s):
        out = s.reshape(-1, 8, 64).reshape(-1, 4, 128).abs()
        s.add_(1.0)
        return out, x.abs()

    x, s = rand(16, 512), rand(16, 512)
    p = Capture(strict=True, emit="always")
    got = compile_with(p, f, x, s.clone())
    assert "copy_" in p.after and p.last_report.rules_fired["reshape-of-reshape"] > 0, p.after
    assert p.after.index("reshape") < p.after.index("copy_"), p.after
    assert torch.equal(got[0], f(x, s.clone())[0])
