"""Lifting vLLM's native ``SiluAndMul`` (``rewrites/lift.py``): before ≡ after per tracer's form,
fused with every native group quant form, and look-alikes (split gate / up, the silu on the other
half, an uneven split, gelu) left as they were.

The forms: ``make_fx`` keeps ``aten.silu`` (``eager``); Inductor's post-grad graphs decompose it to
``a32 / (1 + exp(-a32))`` cast back (``decomposed``); ``benchmarks/gpu/native.py`` multiplies in fp32
and casts once (``fp32``, within rounding: checked through the quant that follows it).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import rand
from tests.test_lift import FN, FORMS, QUANT_TOL_STEPS, quant_native, unchanged
from tests.test_rules import check

vllm, own = torch.ops.vllm, torch.ops.eqsat
TESTED_RULES = {"lift-silu-and-mul", "lift-silu-and-mul.match", "lift-silu-and-mul-fp32",
                "lift-silu-and-mul-fp32.match", "silu-decomposed", "silu-decomposed-fp32", "slice-whole", "silu-sigmoid",
                "split-first-piece", "split-second-piece"}
X = [rand(8, 1024)]


def silu_eager(x):
    """vLLM ``SiluAndMul.forward_native``."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def silu_decomposed(x):
    d = x.shape[-1] // 2
    a = x[..., :d].float()
    return (a / (1 + torch.exp(-a))).to(x.dtype) * x[..., d:]


def silu_core_aten(x):
    """``core_aten_decompositions``' silu: ``x32 * sigmoid(x32)`` cast back."""
    d = x.shape[-1] // 2
    a = x[..., :d].float()
    return (a * torch.sigmoid(a)).to(x.dtype) * x[..., d:]


def silu_fp32(x):
    """``benchmarks/gpu/native.py``: ``x[:, :n]`` (a whole-dim slice first), fp32 product, one cast."""
    n = x.shape[1] // 2
    return (F.silu(x[:, :n].float()) * x[:, n:].float()).to(x.dtype)


def fused(fp8):
    if fp8 == torch.float8_e4m3fnuz:
        return lambda x: vllm.rocm_aiter_act_mul_and_fp8_group_quant(x, 128)
    return lambda x: own.silu_mul_fp8_group_quant(x, 128, fp8)


@pytest.mark.parametrize(("silu", "fires"), [(silu_eager, "silu-decomposed"), (silu_decomposed, "lift-silu-and-mul")])
def test_lift_silu_and_mul(silu, fires):
    check(silu, own.silu_and_mul, X, fires=fires, standalone_lifts=True)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("silu", "fires"), [(silu_eager, "lift-silu-and-mul"), (silu_decomposed, "lift-silu-and-mul"),
                                             (silu_fp32, "lift-silu-and-mul-fp32"),
                                             (silu_core_aten, "silu-sigmoid")])
def test_native_silu_and_mul_and_quant_fuse(silu, fires, form):
    fp8, fmax = FORMS[form]
    check(lambda x: quant_native(silu(x), 128, fmax, fp8=fp8), fused(fp8), X, numerics="rounding", fires=fires,
          tol=QUANT_TOL_STEPS)  # silu(a) * b of inputs at 1e-3 is below 1/512: vLLM's scale floor


def test_gpu_benchmarks_native_silu_quant_fuses():
    from benchmarks.gpu import native

    check(native.native_silu_group_quant, fused(FN), X, numerics="rounding", fires="silu-decomposed-fp32",
          tol=QUANT_TOL_STEPS)


def test_chunked_gate_up():
    """Phi-3's MLP: ``gate, up = x.chunk(2, -1)``; ``up * silu(gate)`` (``aten.split`` into halves)."""
    def phi3(x):
        gate, up = x.chunk(2, dim=-1)
        return quant_native(up * F.silu(gate), 128, 448.0, fp8=FN)

    check(phi3, fused(FN), X, numerics="rounding", fires="split-second-piece", tol=QUANT_TOL_STEPS)


def test_slice_whole():
    check(lambda x: own.silu_and_mul(x[0:]), own.silu_and_mul, X, fires="slice-whole")


LOOK_ALIKES = {
    "split-gate-up": lambda g, u: F.silu(g) * u,
    "silu-of-the-second-half": lambda x, _: x[..., :512] * F.silu(x[..., 512:]),
    "uneven-split": lambda x, _: F.silu(x[..., :256]) * x[..., 256:512],
    "gelu": lambda x, _: F.gelu(x[..., :512]) * x[..., 512:],
    "silu-over-rows": lambda x, _: F.silu(x[:4]) * x[4:],
}


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_look_alike_is_not_lifted(name):
    unchanged(LOOK_ALIKES[name], [rand(8, 1024), rand(8, 1024)])
