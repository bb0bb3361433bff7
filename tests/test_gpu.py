"""On a GPU: each fused ``eqsat::`` op's real implementation (AITER's Triton kernel) against its PyTorch
reference within its rule's contract, and the pass inside ``torch.compile`` on CUDA. Skipped where
there is no CUDA device or AITER's Triton kernels are not installed (``pytest -m gpu`` runs only these).
"""

from __future__ import annotations

import pytest
import torch

import eqsat
from eqsat.kernels.catalog import FAMILIES
from eqsat.library import aiter
from eqsat.library.reference import fp8_step_error

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not (torch.cuda.is_available() and aiter.installed()),
                                                  reason="needs a CUDA GPU and AITER's Triton kernels")]
own = torch.ops.eqsat
FN = torch.float8_e4m3fn
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


def test_every_gpu_implementation_is_tested() -> None:
    """A fused op given a GPU implementation gets a test here (the modules' OPS say which have one)."""
    ops = [op.name for family in FAMILIES for op in getattr(family, "OPS", ()) if op.gpu]
    tested = {"rmsnorm_fp8_group_quant", "rmsnorm_add_fp8_group_quant", "silu_mul_fp8_group_quant",
              "mla_dual_rms_norm_group_quant", "add_rmsnorm_pad", "rmsnorm_static_fp8_quant",
              "rmsnorm_add_static_fp8_quant"}
    assert set(ops) == tested


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
