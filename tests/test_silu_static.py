"""AITER's fused silu_and_mul + static fp8 quant (``eqsat/kernels/families/silu_static.py``): the fuse and
unlift rules before ≡ after, its arithmetic against the unfused ops at several magnitudes, the near
misses, and that it is no candidate on a platform without an implementation."""

from __future__ import annotations

import pytest
import torch

import eqsat
from eqsat.kernels.families.silu_static import silu_mul_fp8_static_quant
from eqsat.tools.explain import explain
from tests.conftest import FP8, assert_same_structure, rand, trace
from tests.test_rules import FP8_TOL_STEPS
from tests.test_token_static import S, check_static, static_steps, unchanged

own = torch.ops.eqsat
TESTED_RULES = {"fuse-K_silu_mul_fp8_static_quant", "unlift-K_silu_mul_fp8_static_quant"}
X = [rand(8, 2 * 256)]


def unfused(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return own.static_fp8_quant(own.silu_and_mul(x), s, FP8)


def fused(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return own.silu_mul_fp8_static_quant(x, s, FP8)


def same_structure(before, after, inputs) -> None:
    """The rewritten graph calls what ``after`` calls, on the same arguments (scale, dtype), wired alike."""
    gm = trace(before, *inputs)
    eqsat.optimize(gm, emit="always", strict=True)
    assert_same_structure(gm, trace(after, *inputs))


def test_fuse():
    check_static(unfused, fused, [*X, S], fires="fuse-K_silu_mul_fp8_static_quant")
    same_structure(unfused, fused, [*X, S])


def test_unlift_shares_the_kernel():
    """The unfused chain next to the kernel is the kernel's output (unlift puts both in one class)."""
    before, after = (lambda x, s: (fused(x, s), unfused(x, s))), (lambda x, s: (fused(x, s),) * 2)
    check_static(before, after, [*X, S], fires="unlift-K_silu_mul_fp8_static_quant")
    same_structure(before, after, [*X, S])


@pytest.mark.parametrize("magnitude", [1e-3, 1.0, 40.0])
def test_kernel_is_the_unfused_chain_within_rounding(magnitude):
    x = (torch.randn(64, 2 * 1024, generator=torch.Generator().manual_seed(3)) * magnitude).to(torch.bfloat16)
    scale = torch.tensor([0.01 * magnitude])
    q = silu_mul_fp8_static_quant(x, scale, FP8)
    want = unfused(x, scale)
    assert q.shape == want.shape == (64, 1024) and q.dtype == FP8
    assert static_steps(q, want, scale) <= FP8_TOL_STEPS
    assert static_steps(q, want, scale) > 0  # the skipped bf16 rounding shows: the two are not one function


def test_near_misses_stay():
    unchanged(lambda x, s: own.static_fp8_quant(own.silu_and_mul(x), s, FP8), [*X, torch.tensor([0.1, 0.2])])


def test_no_candidate_where_it_has_no_implementation():
    gm = trace(unfused, *X, S)
    report = eqsat.optimize(gm, strict=True, profile="h200", emit="always")
    assert report.rules_fired["fuse-K_silu_mul_fp8_static_quant"] == 1 and not report.kernels_chosen
    why = [s for s in explain(trace(unfused, *X, S), profile="h200") if s.kernel == "K_silu_mul_fp8_static_quant"]
    assert why and all("no implementation on triton" in s.failed_constraint for s in why), why
