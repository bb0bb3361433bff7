"""One before ≡ after test per rule, each with a numeric check of both sides on random tensors.

``check(before, after, inputs)`` optimizes the graph of ``before`` (``emit="always"``, strict) and
asserts it has the structure of the graph of ``after`` (``conftest.structure``: the same ops on the
same arguments, eps, G, dtypes and flags included, wired the same way); then both run on random
inputs at three magnitudes (1, 1e-2, 1e-3: where eps matters next to the mean square) and every output
is compared with the unoptimized graph's: bit-exact for ``exact`` rules; for ``rounding`` rules bf16
and fp32 outputs bit-exact (but an fp8 output's scale), and each fp8 output with the fp32 scale after it
(or none: a static quant) within ``FP8_TOL_STEPS`` fp8 steps at the larger magnitude of the two (q·s compared, ``reference.fp8_step_error``).
"""

from __future__ import annotations

import pytest
import torch
from torch._inductor.decomposition import select_decomp_table

import eqsat
from eqsat.fx.capture import trace_tokens
from eqsat.library.reference import fp8_step_error
from tests.conftest import assert_same_structure, rand, trace

vllm, vir, aten, own = torch.ops.vllm, torch.ops.vllm_ir, torch.ops.aten, torch.ops.eqsat
FN = torch.float8_e4m3fn
FP8_TOL_STEPS = 1.25
"""A rounding rule's tolerance: 1.25 fp8 steps at the larger magnitude of the two dequantized values."""
MAGNITUDES = (1.0, 1e-2, 1e-3)


def compare_outputs(got: object, want: object, numerics: str, tol: float = FP8_TOL_STEPS) -> None:
    """Every output of ``got`` against ``want`` (see the module docstring); ``tol``: fp8 steps."""
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    assert len(got) == len(want)
    k = 0
    while k < len(got):
        g, w = got[k], want[k]
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape, g.dtype, w.dtype)
        if numerics == "exact" or not g.dtype.is_floating_point or g.dtype.itemsize > 1:  # a scale is read below
            assert torch.equal(g, w), f"output {k} differs"
            k += 1
            continue
        scale = k + 1 < len(got) and got[k + 1].dtype == torch.float32 and got[k + 1].dim() == g.dim()
        if scale:
            sg, sw = got[k + 1], want[k + 1]
            err = fp8_step_error(w, sw, g, sg, g.shape[-1] // sg.shape[-1])
        else:
            one = torch.ones(*g.shape[:-1], 1)
            err = fp8_step_error(w, one, g, one, g.shape[-1])
        assert err <= tol, f"output {k}: {err:.2f} fp8 steps"
        k += 2 if scale else 1


def check(before, after, inputs, *, numerics: str = "exact", group: int = 128, fires: str = "",
          tol: float = FP8_TOL_STEPS, post_grad: bool = False, reference=None, **options) -> None:
    """``tol``: fp8 steps for a rounding rule (``lift-quant-group``'s own is ``NATIVE_QUANT_TOL_STEPS``);
    ``post_grad``: ``after`` is traced with Inductor's decompositions (how emit writes inlined ATen);
    ``reference``: the program both sides are compared with (default ``before``; a rule that restores
    a rounding a compiler removed is held to the program that rounds)."""
    gm = trace(before, *inputs)
    after_gm = trace_tokens(after, *inputs, decompositions=select_decomp_table() if post_grad else None)
    reference = trace(reference or before, *inputs)
    report = eqsat.optimize(gm, emit="always", strict=True, **options)
    assert_same_structure(gm, after_gm)
    if fires:
        assert report.rules_fired[fires] > 0, report.rules_fired
    # both sides on fresh inputs with another token count (the symbolic dim must have survived)
    for magnitude in MAGNITUDES:
        fresh = [(rand(5, *t.shape[1:], dtype=t.dtype, seed=7 + i) * magnitude).to(t.dtype) if t.dim() >= 2 else t
                 for i, t in enumerate(inputs)]
        want = reference(*fresh)
        for side in (gm, after_gm):
            compare_outputs(side(*fresh), want, numerics, tol)


def abs_(t):
    return aten.abs.default(t)


def test_reshape_of_reshape():
    check(lambda x: abs_(x.reshape(-1, 8, 64).reshape(-1, 4, 128)), lambda x: abs_(x.reshape(-1, 4, 128)),
          [rand(8, 512)], fires="reshape-of-reshape")


def test_reshape_noop():
    check(lambda x: abs_(x.reshape(-1, 8, 64).reshape(-1, 512)), lambda x: abs_(x), [rand(8, 512)],
          fires="reshape-noop")


@pytest.mark.parametrize(("eps", "group"), [(1e-6, 128), (3e-4, 128)])
def test_fuse_rmsnorm_group_quant(eps, group):
    check(lambda x, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, eps), group),
          lambda x, w: vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, eps, group),
          [rand(8, 512), rand(512)], numerics="rounding", group=group, fires="fuse-K_rmsnorm_fp8_group_quant")


@pytest.mark.parametrize(("eps", "group"), [(1e-5, 64), (1e-6, 32)])
def test_fuse_rmsnorm_group_quant_any_group_in_eqsat_ops(eps, group):
    """vLLM's AITER group quant runs G = 128 only (its per_1x128 kernel); the rule holds for any G, and
    the project's own ops take one."""
    check(lambda x, w: own.group_fp8_quant(own.rms_norm(x, w, eps), group, FN),
          lambda x, w: own.rmsnorm_fp8_group_quant(x, w, eps, group, FN),
          [rand(8, 512), rand(512)], numerics="rounding", group=group, fires="fuse-K_rmsnorm_fp8_group_quant")


def test_vllms_group_quant_refuses_a_group_other_than_128():
    with pytest.raises(ValueError, match="group_size 128 only"):
        vllm.rocm_aiter_group_fp8_quant(rand(8, 512), 64)


def test_check_sees_a_wrong_eps():
    """The before ≡ after check compares arguments, and its inputs at small magnitudes make eps show in
    the numbers too (group quant divides each row's scale out: at magnitude 1, eps 1e-2 against 3e-4
    moves q·s by about one fp8 step)."""
    wrong = (lambda x, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 3e-4), 128),
             lambda x, w: vllm.rocm_aiter_rmsnorm_fp8_group_quant(x, w, 1e-2, 128))
    with pytest.raises(AssertionError, match="got:"):
        check(*wrong, [rand(8, 512), rand(512)], numerics="rounding")
    x, w = (rand(8, 512) * 1e-2).to(torch.bfloat16), rand(512)
    with pytest.raises(AssertionError, match="fp8 steps"):
        compare_outputs(wrong[1](x, w), wrong[0](x, w), "rounding")


def test_fuse_rmsnorm_group_quant_of_a_strided_view():
    """AITER's fused_rms_fp8_group_quant takes 2-D inputs of any strides (aiter-kernels.md T1): a
    column split of a wider activation (MLA's q_c) fuses as it is, with no copy."""
    check(lambda p, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(p[:, :512], w, 1e-6), 128),
          lambda p, w: vllm.rocm_aiter_rmsnorm_fp8_group_quant(p[..., :512], w, 1e-6, 128),
          [rand(8, 768), rand(512)], numerics="rounding", fires="fuse-K_rmsnorm_fp8_group_quant")


@pytest.mark.parametrize(("eps", "group"), [(1e-6, 128), (2e-5, 128)])
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
    that no module lists fails here, and so does a listed name no engine runs (a stage ``.match``
    included)."""
    import importlib
    import pkgutil

    from eqsat.rewrites.schedule import default_rules

    import tests
    from eqsat.engine.engine import Engine

    tested: set[str] = set()
    for mod in pkgutil.iter_modules(tests.__path__):
        if mod.name.startswith("test_"):
            tested |= getattr(importlib.import_module(f"tests.{mod.name}"), "TESTED_RULES", set())
    rules = default_rules(eqsat.DEFAULT_CATALOG, "rounding")
    missing = {r.name for r in rules} - tested
    assert not missing, f"rules without a before ≡ after test: {sorted(missing)}"
    run = {r.name for r in (*rules, *Engine(eqsat.DEFAULT_CATALOG, rules).rules)}
    assert not tested - run, f"listed as tested, but no rule: {sorted(tested - run)}"
