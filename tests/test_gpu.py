"""On a GPU: each fused ``eqsat::`` op's real implementation (AITER's Triton kernel) and each vLLM
stand-in's against its PyTorch reference within its rule's contract, and the pass inside
``torch.compile`` on CUDA in both vocabularies. Skipped where there is no CUDA device or AITER's Triton
kernels are not installed (``pytest -m gpu`` runs only these).
"""

from __future__ import annotations

import threading

import pytest
import torch

import eqsat
from eqsat.kernels.torch_ops import register_vllm_standins
from eqsat.library import aiter
from eqsat.library.reference import fp8_step_error
from eqsat.library.vllm import standin_fp8_dtype

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not (torch.cuda.is_available() and aiter.installed()),
                                                  reason="needs a CUDA GPU and AITER's Triton kernels")]
own = torch.ops.eqsat
FN = torch.float8_e4m3fn
if torch.cuda.is_available():
    register_vllm_standins(FN)  # the fp8 of every CUDA GPU (and of MI355X); on the CPU the suite's default
vllm, vir = torch.ops.vllm, torch.ops.vllm_ir
EPS = 1e-6


def rand(*shape: int, scale: float = 1.0, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def both(fn, *args):  # noqa: ANN001, ANN201
    """``fn`` on CUDA (the real kernel) and on the CPU (the reference), outputs on the CPU."""
    gpu = fn(*(a.cuda() if isinstance(a, torch.Tensor) else a for a in args))
    cpu = fn(*args)
    torch.cuda.synchronize()
    gpu = gpu if isinstance(gpu, tuple) else (gpu,)
    cpu = cpu if isinstance(cpu, tuple) else (cpu,)
    return tuple(t.cpu() for t in gpu), cpu


def close_bf16(a: torch.Tensor, b: torch.Tensor, ulps: float = 2.0) -> bool:
    """Within ``ulps`` bf16 steps at each element's magnitude."""
    a32, b32 = a.float(), b.float()
    step = torch.finfo(torch.bfloat16).eps * torch.maximum(a32.abs(), b32.abs()).clamp_min(1e-30)
    return bool(((a32 - b32).abs() <= ulps * step + 1e-30).all())


@pytest.mark.parametrize("scale", [1e-2, 1.0, 30.0])
@pytest.mark.parametrize("shape", [(1, 1536), (64, 7168), (3, 5, 512)])
def test_rms_group_quant(shape: tuple[int, ...], scale: float) -> None:
    x, w = rand(*shape, scale=scale), rand(shape[-1], seed=1)
    (q, s), (rq, rs) = both(own.rmsnorm_fp8_group_quant, x, w, EPS, 128, FN)
    assert q.shape == rq.shape and s.shape == rs.shape
    assert fp8_step_error(q, s, rq, rs, 128) <= 1.25
    r = rand(*shape, scale=scale, seed=2)
    (q, res, s), (rq, rres, rs) = both(own.rmsnorm_add_fp8_group_quant, x, r, w, EPS, 128, FN)
    assert torch.equal(res, rres)  # the fp32 sum rounded once, on both
    assert fp8_step_error(q, s, rq, rs, 128) <= 1.25


@pytest.mark.parametrize("scale", [1e-2, 1.0, 30.0])
def test_silu_group_quant(scale: float) -> None:
    x = rand(64, 2 * 2304, scale=scale)
    (q, s), (rq, rs) = both(own.silu_mul_fp8_group_quant, x, 128, FN)
    assert fp8_step_error(q, s, rq, rs, 128) <= 1.25


def test_mla_dual_norm_group_quant() -> None:
    q, kv = rand(16, 1536), rand(16, 512, seed=3)
    qw, kvw = rand(1536, seed=4), rand(512, seed=5)
    (q8, s, kvn), (rq8, rs, rkvn) = both(own.mla_dual_rms_norm_group_quant, q, qw, kv, kvw, EPS, EPS, 128, FN)
    assert fp8_step_error(q8, s, rq8, rs, 128) <= 1.25
    assert close_bf16(kvn, rkvn, 1.0)


def test_add_rmsnorm_pad() -> None:
    x, r, w = rand(32, 2880), rand(32, 2880, seed=6), rand(2880, seed=7)
    (y, res), (ry, rres) = both(own.add_rmsnorm_pad, x, r, w, EPS, 256)
    assert y.shape == ry.shape == (32, 3072) and torch.equal(res, rres)
    assert close_bf16(y, ry, 1.0) and not y[:, 2880:].any()


@pytest.mark.parametrize("residual", [False, True])
def test_rms_static_quant(residual: bool) -> None:
    x, w, r = rand(64, 4096), rand(4096, seed=8), rand(64, 4096, seed=9)
    scale = torch.tensor([0.02])
    if residual:
        (q, res), (rq, rres) = both(own.rmsnorm_add_static_fp8_quant, x, r, w, EPS, scale, FN)
        assert torch.equal(res, rres)
    else:
        (q,), (rq,) = both(own.rmsnorm_static_fp8_quant, x, w, EPS, scale, FN)
    ones = torch.ones(64, 4096 // 128)
    assert fp8_step_error(q, ones * 0.02, rq, ones * 0.02, 128) <= 1.25


@pytest.mark.parametrize("scale", [1e-2, 1.0, 30.0])
@pytest.mark.parametrize("shape", [(1, 4096), (64, 4096), (3, 5, 512)])
def test_rms_token_quant(shape: tuple[int, ...], scale: float) -> None:
    """AITER's Triton rmsnorm2d_fwd_with(_add)_dynamicquant: q·s within the row's rounding (the add
    variant norms the bf16-rounded sum, the reference the fp32 one), the residual bit-equal."""
    x, w, r = rand(*shape, scale=scale), rand(shape[-1], seed=10), rand(*shape, scale=scale, seed=11)
    (q, s), (rq, rs) = both(own.rmsnorm_token_fp8_quant, x, w, EPS, FN)
    assert q.shape == rq.shape and s.shape == rs.shape == (*shape[:-1], 1)
    assert fp8_step_error(q, s, rq, rs, shape[-1]) <= 1.25
    (q, res, s), (rq, rres, rs) = both(own.rmsnorm_add_token_fp8_quant, x, r, w, EPS, FN)
    assert torch.equal(res, rres) and s.shape == rs.shape
    assert fp8_step_error(q, s, rq, rs, shape[-1]) <= 1.25


@pytest.fixture
def standins_fn() -> None:
    if standin_fp8_dtype() != FN:
        pytest.skip(f"this process's vLLM stand-ins quantize to {standin_fp8_dtype()}, not {FN}")


@pytest.mark.parametrize("scale", [1e-2, 1.0, 30.0])
def test_vllm_standin_norms(scale: float) -> None:
    """vLLM-IR's norms on AITER's Triton rms_norm / rmsnorm2d_fwd_with_add, a column slice too (the
    kv_c part of DeepSeek's qkv_a output)."""
    qkv, w, r = rand(16, 2112, scale=scale), rand(512, seed=1), rand(16, 512, scale=scale, seed=2)
    kv = qkv[:, 1536:2048]
    (y,), (ry,) = both(vir.rms_norm, kv, w, EPS)
    assert y.shape == ry.shape and close_bf16(y, ry, 2.0)
    (y, res), (ry, rres) = both(vir.fused_add_rms_norm, kv, r, w, EPS)
    assert torch.equal(res, rres) and close_bf16(y, ry, 2.0)
    (y,), (ry,) = both(vir.rms_norm, kv, None, EPS)  # no weight: the reference, on both
    assert torch.equal(y, ry)


@pytest.mark.parametrize("scale", [1e-2, 1.0, 30.0])
def test_vllm_standin_group_quants(standins_fn: None, scale: float) -> None:
    x, w, r = rand(64, 7168, scale=scale), rand(7168, seed=1), rand(64, 7168, scale=scale, seed=2)
    for transpose in (False, True):
        (q, s), (rq, rs) = both(vllm.rocm_aiter_group_fp8_quant, x, 128, transpose)
        assert q.shape == rq.shape and s.shape == rs.shape
        if transpose:  # the column-major data read as [M, N / 128]
            s, rs = (t.view(t.shape[1], t.shape[0]).t() for t in (s, rs))
        assert fp8_step_error(q, s, rq, rs, 128) <= 1.25
    (q, s), (rq, rs) = both(vllm.rocm_aiter_rmsnorm_fp8_group_quant, x, w, EPS, 128)
    assert fp8_step_error(q, s, rq, rs, 128) <= 1.25
    (q, res, s), (rq, rres, rs) = both(vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant, x, r, w, EPS, 128)
    assert torch.equal(res, rres) and fp8_step_error(q, s, rq, rs, 128) <= 1.25
    gu = rand(64, 2 * 2304, scale=scale, seed=3)
    (q, s), (rq, rs) = both(vllm.rocm_aiter_act_mul_and_fp8_group_quant, gu, 128)
    assert fp8_step_error(q, s, rq, rs, 128) <= 1.25
    qc, kv, qw, kvw = rand(16, 1536, scale=scale), rand(16, 512, seed=4), rand(1536, seed=5), rand(512, seed=6)
    (q8, s, kvn), (rq8, rs, rkvn) = both(vllm.fused_mla_dual_rms_norm_group_quant, qc, qw, kv, kvw, EPS, EPS,
                                          128, False)
    assert fp8_step_error(q8, s, rq8, rs, 128) <= 1.25 and close_bf16(kvn, rkvn, 1.0)


def test_vllm_standin_pad_static_token_gemm_silu(standins_fn: None) -> None:
    x, r, w = rand(32, 2880), rand(32, 2880, seed=6), rand(2880, seed=7)
    (y, res), (ry, rres) = both(vllm.rocm_aiter_triton_add_rmsnorm_pad, x, w, EPS, r, 256)
    assert y.shape == ry.shape == (32, 3072) and torch.equal(res, rres) and close_bf16(y, ry, 1.0)
    wr, b = rand(128, 2880, scale=0.02, seed=8), rand(128, seed=9)
    (y,), (ry,) = both(vllm.rocm_unquantized_gemm, x, wr, b)
    assert (y.float() - ry.float()).abs().max() <= 0.05 * ry.float().abs().max()
    x, w, r, scale = rand(64, 4096), rand(4096, seed=8), rand(64, 4096, seed=9), torch.tensor([0.02])
    ones = torch.ones(64, 4096 // 128) * 0.02
    (q,), (rq,) = both(vllm.rocm_aiter_fused_rms_fp8_per_tensor_static_quant, x, w, EPS, scale, FN)
    assert fp8_step_error(q, ones, rq, ones, 128) <= 1.25
    (q, res), (rq, rres) = both(vllm.rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant, x, r, w, EPS, scale, FN)
    assert torch.equal(res, rres) and fp8_step_error(q, ones, rq, ones, 128) <= 1.25
    (q, s), (rq, rs) = both(vllm.rocm_aiter_rmsnorm_fused_dynamic_quant, x, w, EPS, FN)
    assert s.shape == rs.shape == (64, 1) and fp8_step_error(q, s, rq, rs, 4096) <= 1.25
    (q, res, s), (rq, rres, rs) = both(vllm.rocm_aiter_rmsnorm_fused_add_dynamic_quant, x, r, w, EPS, FN)
    assert torch.equal(res, rres) and fp8_step_error(q, s, rq, rs, 4096) <= 1.25
    gu = rand(8, 2 * 2304)
    out_gpu, out_cpu = torch.empty(8, 2304, dtype=torch.bfloat16, device="cuda"), torch.empty(8, 2304, dtype=torch.bfloat16)
    torch.ops._C.silu_and_mul(out_gpu, gu.cuda())
    torch.ops._C.silu_and_mul(out_cpu, gu)
    assert torch.equal(out_gpu.cpu(), out_cpu)


def test_vllm_standins_keep_vllms_checks_on_cuda(standins_fn: None) -> None:
    """On CUDA a stand-in still takes only what vLLM's fake takes: AITER's fakes unpack a 2-D x."""
    x3 = rand(2, 4, 256).cuda()
    with pytest.raises(ValueError, match="expected 2"):
        vllm.rocm_aiter_group_fp8_quant(x3, 128)
    with pytest.raises(ValueError, match="expected 2"):
        vllm.rocm_aiter_rmsnorm_fp8_group_quant(x3, rand(256).cuda(), EPS, 128)


def test_pass_inside_torch_compile_on_cuda_in_vllms_ops(standins_fn: None) -> None:
    """vLLM-IR's fused add + norm and AITER's group quant: the pass writes vLLM's fused op on the H200
    profile and the compiled model runs AITER's Triton kernel, within the contract of the uncompiled one."""

    def block(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h, res = vir.fused_add_rms_norm(x, r, w, EPS)
        return (*vllm.rocm_aiter_group_fp8_quant(h, 128), res)

    p = eqsat.EqSatPass(profile="h200", sizes=64, strict=True)
    x, r, w = rand(64, 7168).cuda(), rand(64, 7168, seed=2).cuda(), rand(7168, seed=1).cuda()
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=p, fx_graph_cache=False):
        q, s, res = torch.compile(block, dynamic=False)(x, r, w)
    rq, rs, rres = block(x, r, w)
    assert p.last_report is not None and p.last_report.kernels_chosen.get("K_rmsnorm_add_fp8_group_quant") == 1
    assert torch.equal(res, rres)
    assert fp8_step_error(q.cpu(), s.cpu(), rq.cpu(), rs.cpu(), 128) <= 1.25


def test_pass_inside_torch_compile_on_cuda() -> None:
    """rms_norm + group quant in the project's ops: the pass fuses it on the H200 profile, the compiled
    model runs AITER's kernel on CUDA, within the contract of the uncompiled model."""

    def block(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return own.group_fp8_quant(own.rms_norm(x, w, EPS), 128, FN)

    p = eqsat.EqSatPass(profile="h200", sizes=64, strict=True)
    x, w = rand(64, 7168).cuda(), rand(7168, seed=1).cuda()
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=p, fx_graph_cache=False):
        q, s = torch.compile(block, dynamic=False)(x, w)
    rq, rs = block(x, w)
    assert p.last_report is not None and p.last_report.kernels_chosen.get("K_rmsnorm_fp8_group_quant") == 1
    assert fp8_step_error(q.cpu(), s.cpu(), rq.cpu(), rs.cpu(), 128) <= 1.25


def test_pass_inside_torch_compile_on_cuda_from_a_worker_thread() -> None:
    """One pass, a compile in the main thread and then one in a worker thread (a server warming up its
    models off the main thread): both fuse and run AITER's kernel, each thread on its own engine."""

    def block(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return own.group_fp8_quant(own.rms_norm(x, w, EPS), 128, FN)

    p = eqsat.EqSatPass(profile="h200", sizes=64, strict=True)
    x, w = rand(64, 7168).cuda(), rand(7168, seed=1).cuda()
    rq, rs = block(x, w)

    def compile_and_run() -> tuple[torch.Tensor, torch.Tensor, dict[str, int]]:
        torch._dynamo.reset()
        with torch._inductor.config.patch(post_grad_custom_post_pass=p, fx_graph_cache=False):
            q, s = torch.compile(block, dynamic=False)(x, w)
        assert p.last_report is not None
        return q, s, dict(p.last_report.kernels_chosen)

    got: list[object] = [compile_and_run()]

    def in_worker() -> None:
        try:
            got.append(compile_and_run())
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's thread
            got.append(exc)

    worker = threading.Thread(target=in_worker)
    worker.start()
    worker.join()
    assert len(got) == 2
    for result in got:
        if isinstance(result, BaseException):
            raise result
        q, s, kernels = result
        assert kernels.get("K_rmsnorm_fp8_group_quant") == 1
        assert fp8_step_error(q.cpu(), s.cpu(), rq.cpu(), rs.cpu(), 128) <= 1.25
