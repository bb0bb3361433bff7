"""One before ≡ after test per rule, each with a numeric check of both sides on random tensors.

``check(before, after, inputs)`` optimizes the graph of ``before`` (``emit="always"``, strict) and
asserts it has exactly the ops of the graph of ``after``; then both run on random inputs: bit-exact
for ``exact`` rules, within 1.25 fp8 steps (q·s compared, ``reference.fp8_step_error``) for
``rounding`` rules.
"""

from __future__ import annotations

import pytest
import torch

import eqsat
from eqsat.reference import fp8_step_error
from tests.conftest import rand, targets, trace

vllm, vir, aten = torch.ops.vllm, torch.ops.vllm_ir, torch.ops.aten
FP8_TOL_STEPS = 1.25


def _norm(ts: list[str]) -> list[str]:
    return sorted(t.replace("aten.view.default", "aten.reshape.default") for t in ts)


def check(before, after, inputs, *, numerics: str = "exact", group: int = 128, fires: str = "",
          **options) -> None:
    gm, after_gm = trace(before, *inputs), trace(after, *inputs)
    reference = trace(before, *inputs)
    report = eqsat.optimize(gm, emit="always", strict=True, **options)
    assert _norm(targets(gm)) == _norm(targets(after_gm)), gm.code
    if fires:
        assert report.rules_fired[fires] > 0, report.rules_fired
    # both sides on fresh inputs with another token count (the symbolic dim must have survived)
    fresh = [rand(5, *t.shape[1:], dtype=t.dtype, seed=7 + i) if t.dim() >= 2 else t for i, t in enumerate(inputs)]
    want = reference(*fresh)
    for side in (gm, after_gm):
        got = side(*fresh)
        for g, w in zip(got, want, strict=True):
            if numerics == "exact" or g.dtype in (torch.bfloat16, torch.float16):
                assert torch.equal(g, w)
        if numerics == "rounding":
            assert fp8_step_error(got[0], got[1], want[0], want[1], group) <= FP8_TOL_STEPS


def abs_(t):
    return aten.abs.default(t)


def test_reshape_of_reshape():
    check(lambda x: abs_(x.reshape(-1, 8, 64).reshape(-1, 4, 128)), lambda x: abs_(x.reshape(-1, 4, 128)),
          [rand(8, 512)], fires="reshape-of-reshape")


def test_reshape_noop():
    check(lambda x: abs_(x.reshape(-1, 8, 64).reshape(-1, 512)), lambda x: abs_(x), [rand(8, 512)],
          fires="reshape-noop")


@pytest.mark.parametrize(("eps", "group"), [(1e-6, 128), (1e-5, 64), (3e-4, 128)])
def test_fuse_rmsnorm_group_quant(eps, group):
    check(lambda x, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, eps), group),
          lambda x, w: vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, eps, group),
          [rand(8, 512), rand(512)], numerics="rounding", group=group, fires="fuse-K_rmsnorm_fp8_group_quant")


def test_fuse_rmsnorm_group_quant_of_a_strided_view():
    """AITER's fused_rms_fp8_group_quant takes 2-D inputs of any strides (aiter-kernels.md T1): a
    column split of a wider activation (MLA's q_c) fuses as it is, with no copy."""
    check(lambda p, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(p[:, :512], w, 1e-6), 128),
          lambda p, w: vllm.rocm_aiter_rmsnorm_fp8_group_quant(p[:, :512], w, 1e-6, 128),
          [rand(8, 768), rand(512)], numerics="rounding", fires="fuse-K_rmsnorm_fp8_group_quant")


@pytest.mark.parametrize(("eps", "group"), [(1e-6, 128), (2e-5, 64)])
def test_fuse_add_rmsnorm_group_quant(eps, group):
    def before(x, r, w):
        n, res = vir.fused_add_rms_norm(x, r, w, eps)
        q, s = vllm.rocm_aiter_group_fp8_quant(n, group)
        return q, s, res

    def after(x, r, w):
        q, res, s = vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant(x, r, w, eps, group)
        return q, s, res

    check(before, after, [rand(8, 512), rand(8, 512, seed=3), rand(512)], numerics="rounding", group=group,
          fires="fuse-K_rmsnorm_add_fp8_group_quant")


def test_unlift_rmsnorm_group_quant_shares_kernel():
    """A fused kernel already in the graph has its semantics: an unfused twin becomes the same kernel."""
    def before(x, w):
        q1, s1 = vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, 1e-6, 128)
        q2, s2 = vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128)
        return q1, s1, q2, s2

    def after(x, w):
        q, s = vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, 1e-6, 128)
        return q, s, q, s

    check(before, after, [rand(8, 512), rand(512)], numerics="rounding", fires="unlift-K_rmsnorm_fp8_group_quant")


def test_unlift_add_rmsnorm_group_quant_shares_kernel():
    def before(x, r, w):
        q1, res1, s1 = vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant(x, r, w, 1e-6, 128)
        n, res2 = vir.fused_add_rms_norm(x, r, w, 1e-6)
        q2, s2 = vllm.rocm_aiter_group_fp8_quant(n, 128)
        return q1, s1, q2, s2, res1, res2

    def after(x, r, w):
        q, res, s = vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant(x, r, w, 1e-6, 128)
        return q, s, q, s, res, res

    check(before, after, [rand(8, 512), rand(8, 512, seed=3), rand(512)], numerics="rounding",
          fires="unlift-K_rmsnorm_add_fp8_group_quant")


TESTED_RULES = {
    "reshape-of-reshape", "reshape-noop", "fuse-K_rmsnorm_fp8_group_quant", "fuse-K_rmsnorm_add_fp8_group_quant",
    "unlift-K_rmsnorm_fp8_group_quant", "unlift-K_rmsnorm_add_fp8_group_quant",
}


def test_every_rule_has_a_test():
    """Each test module lists the rules it gives a before ≡ after test in ``TESTED_RULES``; a rule
    that no module lists fails here."""
    import importlib
    import pkgutil

    import tests
    from rewrites.schedule import default_rules

    tested: set[str] = set()
    for mod in pkgutil.iter_modules(tests.__path__):
        if mod.name.startswith("test_"):
            tested |= getattr(importlib.import_module(f"tests.{mod.name}"), "TESTED_RULES", set())
    missing = {r.name for r in default_rules(eqsat.DEFAULT_CATALOG, "rounding")} - tested
    assert not missing, f"rules without a before ≡ after test: {sorted(missing)}"
