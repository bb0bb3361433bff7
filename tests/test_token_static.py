"""Per-token dynamic and static per-tensor fp8 quant (vLLM patterns #1, #2, #8, #9): the conventions,
one before ≡ after test per rule, every vLLM spelling (AITER functional ops; ``_C`` and AITER's
mutating quant under ``auto_functionalized`` v1, captured through torch.compile) and the near misses.
Static quants return q alone: their numeric check compares q·s with the input scale (``static_steps``).
"""

from __future__ import annotations

import pytest
import torch
from eqsat.rewrites.lift import NATIVE_QUANT_TOL_STEPS

import eqsat
from eqsat.fx.importer import import_graph
from eqsat.kernels.families import token_static
from eqsat.kernels.vocabularies import default_index
from eqsat.library import reference as ref
from eqsat.library.reference import fp8_step_error
from tests.conftest import BF16, FP8, assert_same_structure, rand, targets, trace
from tests.test_functionalized import Capture, compile_with
from tests.test_lift import _plan
from tests.test_rules import FP8_TOL_STEPS, check

vllm, vir, own, C = torch.ops.vllm, torch.ops.vllm_ir, torch.ops.eqsat, torch.ops._C
FN = torch.float8_e4m3fn
N = 512
TOKEN_TOL_STEPS = NATIVE_QUANT_TOL_STEPS  # vLLM's scale and its floor against AITER's (as lift-quant-group)

TESTED_RULES = {
    "fuse-K_rmsnorm_fused_dynamic_quant", "unlift-K_rmsnorm_fused_dynamic_quant",
    "fuse-K_rmsnorm_fused_add_dynamic_quant", "unlift-K_rmsnorm_fused_add_dynamic_quant",
    "fuse-K_rms_fp8_per_tensor_static_quant", "unlift-K_rms_fp8_per_tensor_static_quant",
    "fuse-K_add_rms_fp8_per_tensor_static_quant", "unlift-K_add_rms_fp8_per_tensor_static_quant",
    "quant-static-inplace-q", "quant-static-inplace-scale", "quant-token-vllm", "quant-static-vllm",
    "lift-quant-token-e4m3fnuz", "lift-quant-token-e4m3fn", "lift-quant-static-e4m3fnuz", "lift-quant-static-e4m3fn",
    "lift-quant-token-e4m3fnuz.match", "lift-quant-token-e4m3fn.match",  # staged (rewrites/lift.py)
    "lift-quant-token-e4m3fnuz-240", "lift-quant-token-e4m3fnuz-240.match", "lift-quant-static-e4m3fnuz-240",
    "max-dropped-is-amax",
}


def token_native(x, dt=FP8, fmax=None, spelled="amax"):
    """vLLM ``QuantFP8`` per-token forward_native as post-grad graphs spell it (§4.5): the row's max as
    0.33.0's ``amax(dim=-1)`` or (``spelled="max"``) earlier vLLMs' ``max(dim=-1)`` values."""
    fmax = fmax or ref.vllm_fp8_max(dt)
    x_max = x.abs().amax(-1) if spelled == "amax" else x.abs().max(dim=-1)[0]
    s = (x_max.unsqueeze(-1).float() / fmax).clamp_min(1 / (fmax * 512))
    return (x.float() * s.reciprocal()).clamp_min(-fmax).clamp_max(fmax).to(dt), s


def static_native(x, s, dt=FP8, fmax=None):
    fmax = fmax or ref.vllm_fp8_max(dt)
    return (x.float() * s.reciprocal()).clamp_min(-fmax).clamp_max(fmax).to(dt)


def static_steps(q_a, q_b, s) -> float:
    """fp8 steps between two static quants of one scale ``s``, compared as q·s."""
    scale = s.float().reshape(1, 1).expand(q_a.shape[0], 1)
    return fp8_step_error(q_a, scale, q_b, scale, q_a.shape[-1])


def check_static(before, after, inputs, *, fires: str) -> None:
    """``check`` for graphs whose fp8 outputs are static quants with the scale ``inputs[-1]``."""
    gm, after_gm, reference = (trace(f, *inputs) for f in (before, after, before))
    report = eqsat.optimize(gm, emit="always", strict=True)
    assert_same_structure(gm, after_gm)
    assert report.rules_fired[fires] > 0, report.rules_fired
    fresh = [rand(5, *t.shape[1:], dtype=t.dtype, seed=7 + i) if t.dim() >= 2 else t for i, t in enumerate(inputs[:-1])]
    want = reference(*fresh, inputs[-1])
    for side in (gm, after_gm):
        for g, w in zip(side(*fresh, inputs[-1]), want, strict=True):
            assert torch.equal(g, w) if g.dtype == BF16 else static_steps(g, w, inputs[-1]) <= FP8_TOL_STEPS


def _token(x, w):
    return vllm.rocm_aiter_per_token_quant(vir.rms_norm(x, w, 1e-6), FP8)


def _static(x, w, s):
    return own.static_fp8_quant(vir.rms_norm(x, w, 1e-6), s, FP8)


def unchanged(before, inputs) -> None:
    gm = trace(before, *inputs)
    code = gm.code
    report = eqsat.optimize(gm, strict=True)
    fused = [r for r in report.rules_fired if r.startswith("fuse-K_")]  # a kernel's contract, not its cost, says no
    assert not fused and not report.kernels_chosen and gm.code == code, (report.rules_fired, gm.code)


XW = [rand(8, N), rand(N, seed=1)]
XRW = [rand(8, N), rand(8, N, seed=3), rand(N, seed=1)]
S = torch.tensor([0.02])


# -- the conventions ----------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [FP8, FN])
def test_native_chains_are_the_vllm_rows_bitwise(dt):
    x = rand(33, N, seed=5) * 40
    x[0] = 0
    assert all(torch.equal(a.float(), b.float()) for a, b in zip(token_native(x, dt), ref.vllm_token_fp8_quant(x, dt),
                                                                 strict=True))
    for scale in (torch.tensor(0.03), torch.tensor([0.03]), torch.tensor([[0.03]])):
        assert torch.equal(static_native(x, scale, dt).float(), ref.vllm_static_fp8_quant(x, scale, dt).float())


@pytest.mark.parametrize("magnitude", [0.0, 1e-5, 1e-3, 2e-3, 1.0, 300.0])
def test_vllm_convention_is_aiter_within_tolerance(magnitude):
    """The rounding of ``quant-token-vllm`` / ``quant-static-vllm`` (and of reading ``_C``'s division)."""
    x = (torch.randn(64, N, generator=torch.Generator().manual_seed(1)) * magnitude).to(BF16)
    x[1] = 0
    assert fp8_step_error(*ref.vllm_token_fp8_quant(x, FP8), *ref.token_fp8_quant(x, FP8), N) <= TOKEN_TOL_STEPS
    q_c, s_c = torch.empty(x.shape, dtype=FP8), torch.empty(64, 1)
    C.dynamic_per_token_scaled_fp8_quant(q_c, x, s_c, None)
    assert fp8_step_error(q_c, s_c, *ref.token_fp8_quant(x, FP8), N) <= TOKEN_TOL_STEPS
    s = torch.tensor([0.01])  # x / s saturates from magnitude 1 on
    assert static_steps(ref.vllm_static_fp8_quant(x, s, FP8), ref.static_fp8_quant(x, s, FP8), s) <= 1.0
    for dt, fmax in ((FN, 448.0), (FP8, 240.0)):  # finfo's bound: the per-token floor is the only difference
        assert fp8_step_error(*token_native(x, dt, fmax), *ref.token_fp8_quant(x, dt), N) <= TOKEN_TOL_STEPS
        assert torch.equal(static_native(x, s, dt, fmax), ref.static_fp8_quant(x, s, dt))


SCHEMAS = [
    "rocm_aiter_per_token_quant(Tensor x, ScalarType quant_dtype, Tensor? scale=None) -> (Tensor, Tensor)",
    "rocm_aiter_per_tensor_quant(Tensor(a0!) out, Tensor x, Tensor(a2!) scale, bool is_dynamic) -> ()",
    "rocm_aiter_rmsnorm_fused_dynamic_quant(Tensor x, Tensor weight, float epsilon, ScalarType quant_dtype)"
    " -> (Tensor, Tensor)",
    "rocm_aiter_rmsnorm_fused_add_dynamic_quant(Tensor x, Tensor residual, Tensor weight, float epsilon,"
    " ScalarType quant_dtype) -> (Tensor, Tensor, Tensor)",
    "rocm_aiter_fused_rms_fp8_per_tensor_static_quant(Tensor x, Tensor weight, float epsilon, Tensor scale,"
    " ScalarType quant_dtype) -> Tensor",
    "rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant(Tensor x, Tensor residual, Tensor weight,"
    " float epsilon, Tensor scale, ScalarType quant_dtype) -> (Tensor, Tensor)",
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_standin_schemas_are_exact(schema):
    assert str(getattr(vllm, schema.split("(")[0]).default._schema) == f"vllm::{schema}"


def test_opcheck():
    x, r, w = XRW
    values = {"x": x, "r": r, "w": w, "eps": 1e-6, "s": S, "dt": FP8}
    for sp in (*token_static.SPELLINGS["vllm"], *token_static.SPELLINGS["eqsat"]):
        if not sp.functionalized:
            torch.library.opcheck(sp.overload(), tuple(values[a] for a in sp.args))
    q = torch.empty(x.shape, dtype=FP8)  # mutating ops: the schema check cannot compare fp8 buffers on CPU
    for op, args in [(vllm.rocm_aiter_per_tensor_quant, (q, x, S.clone(), False)),
                     (C.dynamic_per_token_scaled_fp8_quant, (q, x, torch.empty(8, 1), None)),
                     (C.static_scaled_fp8_quant, (q, x, S, [-1, -1]))]:
        torch.library.opcheck(op.default, args, test_utils=("test_faketensor", "test_autograd_registration"))


def test_mutating_quants_read_as_per_tensor_only_with_one_element_scales():
    node = torch.fx.Graph().placeholder("s")
    for shape, ok in (((), True), ((1, 1), True), ((2,), False), ((8, 1), False)):
        node.meta["val"] = torch.empty(shape)
        assert token_static.one_element_scale({"s": node}) == ok


def test_exact_numerics_keep_vllm_and_aiter_quants_apart():
    """vLLM's and AITER's per-token quant differ (224 vs 240, scale vs amax floor): one only under rounding."""
    def f(x):
        return (*own.vllm_token_fp8_quant(x, FP8), *vllm.rocm_aiter_per_token_quant(x, FP8))

    for numerics, quants in (("exact", 2), ("rounding", 1)):
        gm = trace(f, XW[0])
        eqsat.optimize(gm, emit="always", strict=True, numerics=numerics)
        assert len(targets(gm)) == quants, gm.code


def test_rules_plan_as_one_bag():
    """egglog 13.2 may join the bags of a decomposed query plan unsoundly (``rewrites/lift.py``): on a
    graph where they all match, every rule of this family plans as one bag."""
    def every(x, r, w, s):
        a, res = vir.fused_add_rms_norm(x, r, w, 1e-6)
        return (*token_native(vir.rms_norm(x, w, 1e-6)), static_native(a, s), *token_native(x, FN),
                static_native(x, s, FN), *token_native(a, FP8, 240.0), *token_native(res, FN, spelled="max"), static_native(res, s, FP8, 240.0),
                *own.vllm_token_fp8_quant(a, FP8), own.vllm_static_fp8_quant(a, s, FP8),
                *vllm.rocm_aiter_rmsnorm_fused_dynamic_quant(x, w, 1e-6, FP8), res,
                *vllm.rocm_aiter_rmsnorm_fused_add_dynamic_quant(x, r, w, 1e-6, FP8),
                vllm.rocm_aiter_fused_rms_fp8_per_tensor_static_quant(x, w, 1e-6, s, FP8),
                *vllm.rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant(x, r, w, 1e-6, s, FP8))

    imported = import_graph(trace(every, *XRW, S), eqsat.DEFAULT_CATALOG, default_index())
    plans = {name: _plan(name, imported) for name in TESTED_RULES if not name.endswith(".match")}
    inplace = {"quant-static-inplace-q", "quant-static-inplace-scale"}  # they read auto_functionalized: below
    assert {n for n, p in plans.items() if p != "single"} == inplace and {plans[n] for n in inplace} == {"not run"}


def test_inplace_rules_plan_as_one_bag():
    """The in-place static quant's rules, on the graph torch.compile hands the pass (the call under
    ``auto_functionalized``), plan as one bag too."""
    inplace = ("quant-static-inplace-q", "quant-static-inplace-scale")
    plans: dict[str, str] = {}

    class Plans(eqsat.EqSatPass):
        def __call__(self, graph):
            imported = import_graph(graph, eqsat.DEFAULT_CATALOG, default_index())
            plans.update({name: _plan(name, imported) for name in inplace})

    compile_with(Plans(strict=True), _rms_aiter_static, *XW, S.clone())
    assert plans == dict.fromkeys(inplace, "single")


# -- one before ≡ after test per rule --------------------------------------------------------------

@pytest.mark.parametrize(("eps", "quant", "fires"), [  # 3e-4: an eps vLLM registers no pattern for
    (1e-6, vllm.rocm_aiter_per_token_quant, "fuse-K_rmsnorm_fused_dynamic_quant"),
    (3e-4, vllm.rocm_aiter_per_token_quant, "fuse-K_rmsnorm_fused_dynamic_quant"),
    (1e-6, own.vllm_token_fp8_quant, "quant-token-vllm"),
])
def test_fuse_rmsnorm_dynamic_quant(eps, quant, fires):
    check(lambda x, w: quant(vir.rms_norm(x, w, eps), FP8),
          lambda x, w: vllm.rocm_aiter_rmsnorm_fused_dynamic_quant(x, w, eps, FP8),
          XW, numerics="rounding", group=N, fires=fires)


@pytest.mark.parametrize("eps", [1e-5, 3e-4])
def test_fuse_add_rmsnorm_dynamic_quant(eps):
    def before(x, r, w):
        n, res = vir.fused_add_rms_norm(x, r, w, eps)
        q, s = vllm.rocm_aiter_per_token_quant(n, FP8)
        return q, s, res

    def after(x, r, w):
        q, res, s = vllm.rocm_aiter_rmsnorm_fused_add_dynamic_quant(x, r, w, eps, FP8)
        return q, s, res

    check(before, after, XRW, numerics="rounding", group=N, fires="fuse-K_rmsnorm_fused_add_dynamic_quant")


@pytest.mark.parametrize(("eps", "scale", "quant", "fires"), [  # scales of shape (1,), () and (1, 1)
    (1e-6, torch.tensor([0.02]), own.static_fp8_quant, "fuse-K_rms_fp8_per_tensor_static_quant"),
    (3e-4, torch.tensor(0.05), own.static_fp8_quant, "fuse-K_rms_fp8_per_tensor_static_quant"),
    (1e-6, torch.tensor([[0.01]]), own.static_fp8_quant, "fuse-K_rms_fp8_per_tensor_static_quant"),
    (1e-6, torch.tensor([0.02]), own.vllm_static_fp8_quant, "quant-static-vllm"),
])
def test_fuse_rmsnorm_static_quant(eps, scale, quant, fires):
    check_static(lambda x, w, s: (quant(vir.rms_norm(x, w, eps), s, FP8),),
                 lambda x, w, s: (vllm.rocm_aiter_fused_rms_fp8_per_tensor_static_quant(x, w, eps, s, FP8),),
                 [*XW, scale], fires=fires)


@pytest.mark.parametrize("eps", [1e-5, 3e-4])
def test_fuse_add_rmsnorm_static_quant(eps):
    def before(x, r, w, s):
        n, res = vir.fused_add_rms_norm(x, r, w, eps)
        return own.static_fp8_quant(n, s, FP8), res

    def after(x, r, w, s):
        return vllm.rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant(x, r, w, eps, s, FP8)

    check_static(before, after, [*XRW, S], fires="fuse-K_add_rms_fp8_per_tensor_static_quant")


def test_unlift_rmsnorm_dynamic_quant_shares_kernel():
    check(lambda x, w: (*vllm.rocm_aiter_rmsnorm_fused_dynamic_quant(x, w, 1e-6, FP8), *_token(x, w)),
          lambda x, w: vllm.rocm_aiter_rmsnorm_fused_dynamic_quant(x, w, 1e-6, FP8) * 2,
          XW, numerics="rounding", group=N, fires="unlift-K_rmsnorm_fused_dynamic_quant")


def test_unlift_add_rmsnorm_dynamic_quant_shares_kernel():
    def before(x, r, w):
        q1, res1, s1 = vllm.rocm_aiter_rmsnorm_fused_add_dynamic_quant(x, r, w, 1e-6, FP8)
        n, res2 = vir.fused_add_rms_norm(x, r, w, 1e-6)
        return q1, s1, *vllm.rocm_aiter_per_token_quant(n, FP8), res1, res2

    def after(x, r, w):
        q, res, s = vllm.rocm_aiter_rmsnorm_fused_add_dynamic_quant(x, r, w, 1e-6, FP8)
        return q, s, q, s, res, res

    check(before, after, XRW, numerics="rounding", group=N, fires="unlift-K_rmsnorm_fused_add_dynamic_quant")


def test_unlift_rmsnorm_static_quant_shares_kernel():
    check_static(lambda x, w, s: (vllm.rocm_aiter_fused_rms_fp8_per_tensor_static_quant(x, w, 1e-6, s, FP8),
                                  _static(x, w, s)),
                 lambda x, w, s: (vllm.rocm_aiter_fused_rms_fp8_per_tensor_static_quant(x, w, 1e-6, s, FP8),) * 2,
                 [*XW, S], fires="unlift-K_rms_fp8_per_tensor_static_quant")


def test_unlift_add_rmsnorm_static_quant_shares_kernel():
    def before(x, r, w, s):
        q1, res1 = vllm.rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant(x, r, w, 1e-6, s, FP8)
        n, res2 = vir.fused_add_rms_norm(x, r, w, 1e-6)
        return q1, own.static_fp8_quant(n, s, FP8), res1, res2

    def after(x, r, w, s):
        q, res = vllm.rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant(x, r, w, 1e-6, s, FP8)
        return q, q, res, res

    check_static(before, after, [*XRW, S], fires="unlift-K_add_rms_fp8_per_tensor_static_quant")


@pytest.mark.parametrize(("dt", "fmax"), [(FP8, None), (FN, None), (FP8, 240.0)])
def test_lift_native_quants(dt, fmax):
    """vLLM's bounds (224 on e4m3fnuz, 448 on e4m3fn) and finfo's 240 on e4m3fnuz (-240)."""
    name = str(dt).removeprefix("torch.float8_") + (f"-{fmax:g}" if fmax else "")
    check(lambda x, w: token_native(vir.rms_norm(x, w, 1e-6), dt, fmax),
          lambda x, w: vllm.rocm_aiter_rmsnorm_fused_dynamic_quant(x, w, 1e-6, dt),
          XW, numerics="rounding", group=N, fires=f"lift-quant-token-{name}")

    def before(x, r, w, s):
        n, res = vir.fused_add_rms_norm(x, r, w, 1e-6)
        return static_native(n, s, dt, fmax), res

    check_static(before, lambda x, r, w, s: vllm.rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant(
        x, r, w, 1e-6, s, dt), [*XRW, S], fires=f"lift-quant-static-{name}")


@pytest.mark.parametrize("dt", [FP8, FN])
def test_lift_native_token_quant_written_with_max(dt):
    """The row max as ``x.abs().max(dim=-1)`` values (keepdim False) reads as ``amax``, so the chain fuses."""
    check(lambda x, w: token_native(vir.rms_norm(x, w, 1e-6), dt, spelled="max"),
          lambda x, w: vllm.rocm_aiter_rmsnorm_fused_dynamic_quant(x, w, 1e-6, dt),
          XW, numerics="rounding", group=N, fires="max-dropped-is-amax")


def test_max_of_a_row_kept_where_its_indices_are_read():
    """Only the values are amax: a graph reading the indices keeps its ``max.dim``."""
    def before(x):
        values, indices = x.abs().max(dim=-1)
        return values * 2, indices

    gm = trace(before, rand(8, 64))
    eqsat.optimize(gm, emit="always", strict=True)
    assert targets(gm) == ["aten.abs.default", "aten.max.dim", "aten.mul.Tensor"], gm.code


# -- vLLM's mutating quants under auto_functionalized (v1), through torch.compile ----------------

# The scale these "mutate" is a clone of the input, which functionalization folds away: nothing is written
# back. A mutated input itself ends the graph with copy_ (the xfail below).
def _rms_aiter_static(x, w, s):
    s = s.clone()
    q = torch.empty(x.shape, dtype=FP8)
    vllm.rocm_aiter_per_tensor_quant(q, vir.rms_norm(x, w, 1e-6), s, False)
    return q, s * 2  # a later read of the scale: getitem 2 of the functionalized call


def _fused_add_aiter_static(x, r, w, s):
    s = s.clone()
    n, res = vir.fused_add_rms_norm(x, r, w, 1e-5)
    q = torch.empty(x.shape, dtype=FP8)
    vllm.rocm_aiter_per_tensor_quant(q, n, s, False)
    return q, res, s * 2


@pytest.mark.parametrize(("fn", "kernel", "inputs"), [
    (_rms_aiter_static, "K_rms_fp8_per_tensor_static_quant", [*XW, S]),
    (_fused_add_aiter_static, "K_add_rms_fp8_per_tensor_static_quant", [*XRW, S]),
])
def test_aiter_per_tensor_quant_under_auto_functionalized(fn, kernel, inputs):
    """getitem 1 is q and getitem 2 the scale the static call leaves as it was: both rules fire, and
    the fused kernel (q only) replaces the call while later reads of the scale read the input."""
    p = Capture(strict=True)
    compiled_inputs = [t.clone() for t in inputs]
    for t in compiled_inputs[1:-2]:  # a residual: its token dim too
        torch._dynamo.mark_dynamic(t, 0)
    got = compile_with(p, fn, *compiled_inputs)
    assert "auto_functionalized" in p.before and "auto_functionalized" not in p.after, p.after
    assert p.last_report.kernels_chosen == {kernel: 1}
    assert {"quant-static-inplace-q", "quant-static-inplace-scale"} <= set(p.last_report.rules_fired)
    want = fn(*(t.clone() for t in inputs))
    assert static_steps(got[0], want[0], inputs[-1]) <= FP8_TOL_STEPS
    assert all(map(torch.equal, got[1:], want[1:]))


def test_aiter_per_tensor_quant_of_a_scale_input_fuses():
    def f(x, w, s):
        q = torch.empty(x.shape, dtype=FP8)
        vllm.rocm_aiter_per_tensor_quant(q, vir.rms_norm(x, w, 1e-6), s, False)
        return q  # the scale is not read again: functionalization writes it back with copy_

    p, s = Capture(strict=True), S.clone()
    got = compile_with(p, f, *XW, s)
    assert "copy_" in p.before and p.last_report.kernels_chosen == {"K_rms_fp8_per_tensor_static_quant": 1}
    assert "copy_" not in p.after, p.after  # the write-back of the scale onto itself is gone
    assert torch.equal(s, S) and static_steps(got, f(*XW, S.clone()), S) <= FP8_TOL_STEPS


def _c_token(x, w):
    y = torch.empty_like(x)
    C.rms_norm(y, x, w, 1e-6)
    q, s = torch.empty(x.shape, dtype=FP8), torch.empty(x.shape[0], 1, dtype=torch.float32)
    C.dynamic_per_token_scaled_fp8_quant(q, y, s, None)
    return q, s


def test_c_dynamic_per_token_quant_fuses():
    p = Capture(strict=True)
    got = compile_with(p, _c_token, *XW)
    assert p.before.count("auto_functionalized(") == 2 and "empty" not in p.after
    assert p.last_report.kernels_chosen == {"K_rmsnorm_fused_dynamic_quant": 1}
    assert fp8_step_error(*got, *_c_token(*XW), N) <= TOKEN_TOL_STEPS


@pytest.mark.parametrize("group_shape", [None, [-1, -1]])
def test_c_static_quant_fuses(group_shape):
    def f(x, w, s):
        q = torch.empty(x.shape, dtype=FP8)
        C.static_scaled_fp8_quant(q, vir.rms_norm(x, w, 1e-6), s, group_shape)
        return q

    p = Capture(strict=True)
    got = compile_with(p, f, *XW, S)
    assert p.last_report.kernels_chosen == {"K_rms_fp8_per_tensor_static_quant": 1}
    assert static_steps(got, f(*XW, S), S) <= FP8_TOL_STEPS


def test_dynamic_per_tensor_quant_is_not_static():
    def f(x, w, s):
        s = s.clone()
        q = torch.empty(x.shape, dtype=FP8)
        vllm.rocm_aiter_per_tensor_quant(q, vir.rms_norm(x, w, 1e-6), s, True)  # writes a new scale
        return q, s * 2

    p = Capture(strict=True)
    compile_with(p, f, *XW, S.clone())
    assert not p.last_report.kernels_chosen and p.after == p.before


# -- near misses: no rewrite ------------------------------------------------------------------------

def _scale_of_another(x, w, y):  # the native per-token tail of the norm output, with the scale of y
    s = (y.abs().amax(-1).unsqueeze(-1).float() / 224.0).clamp_min(1 / (224.0 * 512))
    return (vir.rms_norm(x, w, 1e-6).float() * s.reciprocal()).clamp_min(-224.0).clamp_max(224.0).to(FP8), s


@pytest.mark.parametrize(("before", "inputs"), [
    (_token, [XW[0], W32 := rand(N, dtype=torch.float32)]), (_static, [XW[0], W32, S]),  # weight dtype ≠ input's
    (_token, [X3 := rand(4, 2, N), XW[1]]), (_static, [X3, XW[1], S]),  # 3-D input
    (_static, [*XW, torch.tensor([0.02, 0.03])]), (_static, [*XW, torch.tensor([[0.02, 0.02]])]),  # 2 elements
    (_static, [*XW, torch.tensor([0.02], dtype=BF16)]),  # a bf16 scale
    (lambda x, w: token_native(vir.rms_norm(x, w, 1e-6), fmax=200.0), XW),  # no fp8 bound: no lift
    (lambda x, w, s: static_native(vir.rms_norm(x, w, 1e-6), s, fmax=200.0), [*XW, S]),
    (lambda x, w: token_native(vir.rms_norm(x, w, 1e-6), FN, fmax=240.0), XW),  # e4m3fn's is 448
    (_scale_of_another, [*XW, rand(8, N, seed=9)]),
], ids=["w32-token", "w32-static", "3d-token", "3d-static", "scale2", "scale1x2", "scale-bf16",
        "native-token-200", "native-static-200",
        "e4m3fn-token-240", "native-scale-of-another"])
def test_no_rewrite(before, inputs):
    unchanged(before, inputs)


def test_strided_input_gets_no_fused_kernel():
    """A transposed x: AITER's kernel reads contiguous rows, so it does not apply; Inductor's twin of the
    chain (any layout) may, as the profile prices it."""
    gm = trace(lambda xt, w: _token(xt.t(), w), rand(N, 8), XW[1])
    report = eqsat.optimize(gm, emit="always", strict=True)
    assert not [k for k in report.kernels_chosen if k.startswith("K_")], report.kernels_chosen
