"""Reference semantics, op registration, fakes and compile-ability of eqsat's and the vLLM stand-in ops."""

from __future__ import annotations

import importlib
import operator
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from eqsat.kernels.catalog import FAMILIES
from eqsat.kernels.families import norm_quant
from eqsat.kernels.torch_ops import register_vllm_standins, vllm_standin_ops
from eqsat.library import reference as ref

own = torch.ops.eqsat

register_vllm_standins()

FP8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz]
SHAPES = [(33, 512), (3, 7, 256)]
EPS = 1e-6
BF16 = torch.bfloat16


def _inputs(shape: tuple[int, ...], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 3).to(BF16)
    r = torch.randn(shape, generator=g).to(BF16)
    w = (1 + 0.5 * torch.randn(shape[-1], generator=g)).to(BF16)
    return x, r, w


def _direct_group_quant(y: torch.Tensor, gs: int, fp8: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Slice-by-slice group quant, written independently of eqsat.library.reference."""
    fmax = torch.finfo(fp8).max
    y = y.float()
    qs, ss = [], []
    for i in range(y.shape[-1] // gs):
        grp = y[..., i * gs : (i + 1) * gs]
        scale = grp.abs().amax(dim=-1, keepdim=True).clamp_min(1e-10) / fmax
        qs.append(torch.clamp(grp * scale.reciprocal(), -fmax, fmax).to(fp8))
        ss.append(scale)
    return torch.cat(qs, dim=-1), torch.cat(ss, dim=-1)


@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_matches_direct(shape: tuple[int, ...]) -> None:
    x, _, w = _inputs(shape)
    y32 = F.rms_norm(x.float(), (shape[-1],), eps=EPS)
    torch.testing.assert_close(ref.rms_norm(x, w, EPS), y32.to(BF16) * w)
    torch.testing.assert_close(ref.rms_norm(x, None, EPS), y32.to(BF16))
    assert torch.equal(own.rms_norm.default(x, w, EPS), ref.rms_norm(x, w, EPS))


@pytest.mark.parametrize("shape", SHAPES)
def test_fused_add_rms_norm_matches_direct(shape: tuple[int, ...]) -> None:
    x, r, w = _inputs(shape)
    s64 = x.double() + r.double()
    normed, res = ref.fused_add_rms_norm(x, r, w, EPS)
    assert torch.equal(res, s64.to(BF16))
    torch.testing.assert_close(normed, F.rms_norm(s64.float(), (shape[-1],), eps=EPS).to(BF16) * w)


@pytest.mark.parametrize("fp8", FP8, ids=["e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("shape", SHAPES)
def test_group_fp8_quant_matches_direct(shape: tuple[int, ...], fp8: torch.dtype) -> None:
    x, _, _ = _inputs(shape)
    q, s = ref.group_fp8_quant(x, 128, fp8)
    q_d, s_d = _direct_group_quant(x, 128, fp8)
    assert q.dtype == fp8 and q.shape == x.shape and s.shape == (*shape[:-1], shape[-1] // 128)
    assert torch.equal(q.float(), q_d.float()) and torch.equal(s, s_d)


@pytest.mark.parametrize("fp8", FP8, ids=["e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_rms_quant_matches_direct(shape: tuple[int, ...], fp8: torch.dtype) -> None:
    x, r, w = _inputs(shape)
    n = shape[-1]
    q, s = norm_quant.rmsnorm_fp8_group_quant(x, w, EPS, 64, fp8)
    q_d, s_d = _direct_group_quant(F.rms_norm(x.float(), (n,), w.float(), EPS), 64, fp8)
    torch.testing.assert_close(s, s_d)
    assert ref.fp8_step_error(q, s, q_d, s_d, 64) <= 1.0
    q, res, s = norm_quant.rmsnorm_add_fp8_group_quant(x, r, w, EPS, 64, fp8)
    s32 = x.float() + r.float()
    q_d, s_d = _direct_group_quant(F.rms_norm(s32, (n,), w.float(), EPS), 64, fp8)
    assert torch.equal(res, s32.to(BF16))
    torch.testing.assert_close(s, s_d)
    assert ref.fp8_step_error(q, s, q_d, s_d, 64) <= 1.0


@pytest.mark.parametrize("fp8", FP8, ids=["e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("gs", [128, 64])
def test_fused_agrees_with_unfused_within_fp8_step(gs: int, fp8: torch.dtype) -> None:
    for seed in range(4):
        x, r, w = _inputs((33, 512), seed)
        q_f, s_f = own.rmsnorm_fp8_group_quant.default(x, w, EPS, gs, fp8)
        q_u, s_u = own.group_fp8_quant.default(own.rms_norm.default(x, w, EPS), gs, fp8)
        assert ref.fp8_step_error(q_f, s_f, q_u, s_u, gs) <= 1.25
        q_f, res_f, s_f = own.rmsnorm_add_fp8_group_quant.default(x, r, w, EPS, gs, fp8)
        normed, res_u = own.fused_add_rms_norm.default(x, r, w, EPS)
        q_u, s_u = own.group_fp8_quant.default(normed, gs, fp8)
        assert torch.equal(res_f, res_u)
        assert ref.fp8_step_error(q_f, s_f, q_u, s_u, gs) <= 1.25


def test_fp8_step_error_counts_steps() -> None:
    x, _, _ = _inputs((4, 256))
    q, s = ref.group_fp8_quant(x, 128, torch.float8_e4m3fn)
    assert ref.fp8_step_error(q, s, q, s, 128) == 0.0
    bits = q.view(torch.uint8).clone()
    mag = q.float().abs()
    ok = (mag > 16) & (mag < 400) & ((bits & 7) < 7)  # normal, below max, same binade after +1
    i = int(torch.argmax(ok.int().flatten()))
    bits.view(-1)[i] += 1  # next representable magnitude: exactly one step away
    assert ref.fp8_step_error(q, s, bits.view(torch.float8_e4m3fn), s, 128) == pytest.approx(1.0)


def test_group_quant_rejects_ragged_groups() -> None:
    x = torch.randn(4, 100, dtype=BF16)
    with pytest.raises(ValueError):
        ref.group_fp8_quant(x, 64, torch.float8_e4m3fn)
    with pytest.raises(ValueError):
        own.group_fp8_quant.default(x, 64, torch.float8_e4m3fn)


def test_outputs_do_not_alias_inputs() -> None:
    x, r, w = (t.float() for t in _inputs((4, 128)))
    normed, res = own.fused_add_rms_norm.default(x, r, w, EPS)
    ptrs = {t.untyped_storage().data_ptr() for t in (x, r, w)}
    assert normed.untyped_storage().data_ptr() not in ptrs and res.untyped_storage().data_ptr() not in ptrs
    assert normed.untyped_storage().data_ptr() != res.untyped_storage().data_ptr()


def test_opcheck_all_ops() -> None:
    x, r, w = _inputs((5, 256))
    e4 = torch.float8_e4m3fn
    cases = [
        (own.rms_norm.default, (x, w, EPS)),
        (own.fused_add_rms_norm.default, (x, r, w, EPS)),
        (own.group_fp8_quant.default, (x, 128, e4)),
        (own.rmsnorm_fp8_group_quant.default, (x, w, EPS, 128, e4)),
        (own.rmsnorm_add_fp8_group_quant.default, (x, r, w, EPS, 64, e4)),
        (torch.ops.vllm_ir.rms_norm.default, (x, None, EPS)),
        (torch.ops.vllm_ir.fused_add_rms_norm.default, (x, r, w, EPS)),
        (torch.ops.vllm.rocm_aiter_group_fp8_quant.default, (x, 128, True)),
        (torch.ops.vllm.rocm_aiter_rmsnorm_fp8_group_quant.default, (x, w, EPS, 128)),
        (torch.ops.vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant.default, (x, r, w, EPS, 128)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_transpose_scale_is_aiters_column_major_data_in_the_fakes_row_major_shape() -> None:
    """vLLM's fake gives a row-major (M, N / G) scale either way; with ``transpose_scale`` AITER fills it
    with the scale's column-major data (the GEMM reading it knows), so an element is not the scale's."""
    x, _, _ = _inputs((5, 256))
    q, s = torch.ops.vllm.rocm_aiter_group_fp8_quant(x, 128)
    q_t, s_t = torch.ops.vllm.rocm_aiter_group_fp8_quant(x, 128, True)
    assert s_t.shape == s.shape and s_t.stride() == s.stride() == (2, 1)
    assert torch.equal(s_t.flatten(), s.t().flatten()) and not torch.equal(s_t, s)
    assert torch.equal(q.float(), q_t.float())


def test_fakes_trace_with_symbolic_token_dim() -> None:
    def f(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q1, s1 = own.group_fp8_quant.default(own.rms_norm.default(x, w, EPS), 128, torch.float8_e4m3fnuz)
        q2, res, s2 = own.rmsnorm_add_fp8_group_quant.default(x, r, w, EPS, 128, torch.float8_e4m3fn)
        normed, res_v = torch.ops.vllm_ir.fused_add_rms_norm(x, r, w, EPS)
        q3, s3 = torch.ops.vllm.rocm_aiter_group_fp8_quant(normed, 128, True)
        q4, s4 = torch.ops.vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, EPS, 128)
        return q1, s1, q2, res, s2, res_v, q3, s3, q4, s4

    gm = make_fx(f, tracing_mode="symbolic")(*_inputs((6, 256)))
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is operator.getitem]
    assert len(calls) == 11  # the 10 returned tensors plus `normed`
    for n in calls:
        assert isinstance(n.meta["val"].shape[0], torch.SymInt)
    outs = [n.meta["val"] for n in gm.graph.output_node().args[0]]
    assert outs[0].dtype == torch.float8_e4m3fnuz and outs[2].dtype == torch.float8_e4m3fn
    assert outs[7].shape[1] == outs[1].shape[1]  # ceil(N/G) and N // G agree when G divides N
    assert outs[7].stride()[1] == 1  # transpose_scale: vLLM's fake is row-major either way


EXPECTED_SCHEMAS = {
    "vllm_ir.rms_norm": "vllm_ir::rms_norm(Tensor x, Tensor? weight, float epsilon, "
    "SymInt? variance_size=None) -> Tensor",
    "vllm_ir.fused_add_rms_norm": "vllm_ir::fused_add_rms_norm(Tensor x, Tensor x_residual, Tensor? weight, "
    "float epsilon, SymInt? variance_size=None) -> (Tensor, Tensor)",
    "vllm.rocm_aiter_group_fp8_quant": "vllm::rocm_aiter_group_fp8_quant(Tensor x, SymInt group_size, "
    "bool transpose_scale=False) -> (Tensor, Tensor)",
    "vllm.rocm_aiter_rmsnorm_fp8_group_quant": "vllm::rocm_aiter_rmsnorm_fp8_group_quant(Tensor x, "
    "Tensor weight, float variance_epsilon, SymInt group_size) -> (Tensor, Tensor)",
    "vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant": "vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant("
    "Tensor x, Tensor residual, Tensor weight, float variance_epsilon, SymInt group_size) "
    "-> (Tensor, Tensor, Tensor)",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_SCHEMAS))
def test_standin_schemas_are_exact(name: str) -> None:
    namespace, op = name.split(".")
    assert str(getattr(getattr(torch.ops, namespace), op).default._schema) == EXPECTED_SCHEMAS[name]


def test_registration_is_idempotent() -> None:
    from eqsat.kernels.torch_ops import register_eqsat_ops
    from eqsat.library import define
    importlib.reload(define)  # the libraries survive a reload: the ops stay defined, none is defined twice
    register_eqsat_ops()
    register_vllm_standins(torch.float8_e4m3fn)  # already defined: the first dtype stays
    x, _, w = _inputs((4, 256))
    assert torch.ops.vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, EPS, 128)[0].dtype == torch.float8_e4m3fnuz
    assert torch.equal(own.rms_norm.default(x, w, EPS), ref.rms_norm(x, w, EPS))


def test_ops_under_torch_compile_dynamic() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.ops.eqsat.rms_norm(x * 2, w, EPS)
        return torch.ops.eqsat.group_fp8_quant(y, 128, torch.float8_e4m3fn)

    torch._dynamo.reset()
    compiled = torch.compile(f, dynamic=True, backend="inductor", fullgraph=True)
    for m in (7, 19):
        x, _, w = _inputs((m, 256), seed=m)
        q, s = compiled(x, w)
        q_e, s_e = f(x, w)
        assert torch.equal(q.float(), q_e.float()) and torch.equal(s, s_e)


def test_every_gpu_implementation_is_run_by_the_gpu_tests() -> None:
    """Each op with a GPU implementation, the project's and vLLM's stand-ins' (on CUDA's fp8), is run by
    ``tests/test_gpu.py`` (which runs only on a device): an op given one without a test there fails here,
    on the CPU."""
    gpu_tests = (Path(__file__).parent / "test_gpu.py").read_text()
    ops = [op for family in FAMILIES for op in getattr(family, "OPS", ()) if op.gpu]
    ops += [op for op in vllm_standin_ops(torch.float8_e4m3fn) if op.gpu]
    assert len(ops) >= 20
    untested = [f"{op.namespace}::{op.name}" for op in ops if not re.search(rf"\.{op.name}\b", gpu_tests)]
    assert not untested
