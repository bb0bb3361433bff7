"""Lift rules (Level A = Level B): vLLM's and Hugging Face's native decompositions are the semantic
ops they implement.

A graph in native ATen form gets the same fusions as one that calls ``vllm_ir.rms_norm``: these
equalities put ``RmsNorm`` / ``AddRmsNorm`` / ``QuantGroup`` / ``SiluMul`` into the e-classes of the
native chains, and the catalog's fuse rules take it from there. The ATen ops are the typed
constructors of ``eqsat.kernels.families.aten_ops``. Each rule is tagged ``exact`` or ``rounding``
(a native quant's q·s within ``NATIVE_QUANT_TOL_STEPS`` fp8 steps of AITER's); what each one states
is in ``docs/lift_rules.md``. Look-alikes (Gemma's ``1 + w``, other bounds or floors) never match.

Constants (``eps``, ``G``) are pattern variables; structure (which dims, dtypes, constants) is
checked exactly with facts. All rules are equalities in one ruleset: their order never matters.
The big rules are cyclic queries; the engine runs them staged (``eqsat.engine.staging``).
"""

from __future__ import annotations

from eqsat.core.rule import Rule, rewrite, rule
from eqsat.core.spec import made, rank, same_dtype, same_last_dim, same_shape

NATIVE_FP8_MAX: tuple[tuple[str, float], ...] = (
    ("float8_e4m3fn", 448.0), ("float8_e4m3fnuz", 224.0), ("float8_e4m3fnuz", 240.0))
"""(fp8 dtype, the max a native group quant clamps to): vLLM's ``get_fp8_min_max`` gives finfo's 448 on
e4m3fn (CUDA, gfx950) and 224 on ROCm's e4m3fnuz; code that reads ``finfo`` on e4m3fnuz clamps to 240."""

E4M3_BINADE_STEPS = 2 ** (3 + 1)
"""An e4m3 binade's upper end in its own steps (3 mantissa bits: [64, 128) in steps of 8 ends at 16)."""

NATIVE_QUANT_TOL_STEPS = (1.5 * E4M3_BINADE_STEPS - 1) / (E4M3_BINADE_STEPS + 1) + 1e-5
"""How far q·scale of a lifted native group quant may move, in fp8 steps at the larger magnitude
(``reference.fp8_step_error``): 23/17, the most two round-to-nearest casts of one value onto e4m3 grids
whose scales differ can disagree by, plus the fp32 rounding of ``x / scale``. vLLM's scale is the
larger (its FMAX of 224 under finfo's 240, or its floor), so AITER's grid is finer but its binades
start elsewhere: at worst vLLM rounds 116 up to 120 (half a step of 8) while AITER rounds
136 = 116 · 136/116 down to 128 (half a step of 16), 120 - 128 · 116/136 = 10.82 apart, 1.353 steps of
8. In general ``(1.5 B - 1) / (B + 1)`` with B the binade's end in steps (``tests/test_lift.py`` finds
the same supremum by search over scale ratios and values)."""

VLLM_FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 224.0}
"""The max of vLLM's own native quant per fp8 dtype: its rule is named without the max."""


def quant_group_name(fp8: str, fmax: float) -> str:
    """``lift-quant-group-e4m3fn`` for vLLM's max, ``lift-quant-group-e4m3fnuz-240`` for another."""
    suffix = "" if VLLM_FP8_MAX.get(fp8) == fmax else f"-{fmax:g}"
    return f"lift-quant-group-{fp8.removeprefix('float8_')}{suffix}"


def normalized32(s32: str) -> str:
    """``s32 * rsqrt(mean_last(s32^2) + eps)``, all fp32."""
    return f"(Mul {s32} (Rsqrt (AddS (MeanLast (PowS {s32} 2.0)) eps)))"


def rms_tail(s32: str) -> str:
    """vLLM-IR's native rms_norm after the fp32 cast ``s32`` of its input: normalise in fp32, cast
    to the weight dtype ``dt``, multiply by the weight ``w``."""
    return f"(Mul (Convert {normalized32(s32)} dt) w)"


_X32 = '(Convert x "float32")'
_S32 = f'(Add {_X32} (Convert r "float32"))'
_NORM32 = normalized32(_X32)
_ADD_RMS = "(AddRmsNorm x r w eps)"
_WEIGHT = (*same_dtype("x", "w"), "(= dt (dtype w))", *rank("w", 1), *same_last_dim("x", "w"))
_RESIDUAL = (*same_shape("x", "r"), *same_dtype("x", "r"))


def quant_group_rule(fp8: str, fmax: float, folded: bool = False) -> Rule:
    """The native group quant of a 2-D ``x`` viewed as ``xg = [.., G]``; ``folded``: of the 2-D
    value ``q`` is viewed back to, when the graph holds no such ``x`` because ``xg`` is already the
    grouped shape (Inductor drops ``reshape(reshape(y, [N, H*G]), [N, H, G])`` of a ``[N, H, G]``
    y): the rule then makes ``x = Reshape(xg, sq)`` and states its facts, read from ``xg`` and q."""
    scale = '(ClampMin (DivS (Convert (Get (MaxLast (Abs xg)) 0) "float32") fmax) lo)'
    q = f"(Reshape (Convert (ClampMax (ClampMin (Div xg {scale}) nf) fmax) dt) sq)"
    common = (f"(= __q {q})", f"(= __s (Reshape {scale} ss))", f'(= dt "{fp8}")', f"(= fmax {fmax!r})",
              "(= nf (neg fmax))", "(= lo (/ 1.0 (* fmax 512.0)))", "(= (dim xg -1) G)", "(> G 0)",
              "(= 0 (% __n G))", *rank("__s", 2), "(= (dim __s -1) (/ __n G))")
    name = quant_group_name(fp8, fmax)
    if not folded:
        query = ("(= xg (Reshape x sg))", *common, *rank("x", 2), "(= (dim x -1) __n)", "(= (shape x) sq)")
        actions = ("(union __q (Get (QuantGroup x G dt) 0))", "(union __s (Get (QuantGroup x G dt) 1))")
        return rule(name, query, actions, "rounding", "lift")
    query = (*common, "(= (shape __q) sq)", *rank("__q", 2), "(= (dim __q -1) __n)", "(= dx (dtype xg))",
             "(contiguous xg)")
    actions = ("(let x (Reshape xg sq))", *made("x", "dx", "sq", 2, "__n"),
               "(union __q (Get (QuantGroup x G dt) 0))", "(union __s (Get (QuantGroup x G dt) 1))")
    return rule(f"{name}-folded", query, actions, "rounding", "lift")


def _sigmoid_times(x32: str) -> str:
    """``x32 / (1 + exp(-x32))``: silu as PyTorch's decomposition writes it."""
    return f"(Div {x32} (AddS (Exp (Neg {x32})) 1.0))"


_A = "(Slice x sd 0 d)"
_UP = "(Slice x sd d e)"
_A32 = f'(Convert {_A} "float32")'
_SILU32 = _sigmoid_times(_A32)
_HALVES = ("(= dt (dtype x))", "(= (dim x -1) (* 2 d))", "(> d 0)", "(>= e (* 2 d))", "(= (ndim x) __r)",
           "(= sd (- __r 1))")  # both halves of the last dim, named as tracers name it: ndim - 1

_BIG = (
    rewrite("lift-rms-norm", rms_tail(_X32), "(RmsNorm x w eps)", *_WEIGHT, family="lift"),
    rewrite("lift-rms-norm-fp32-weight", f"(Convert (Mul {_NORM32} w) dt)", "(RmsNorm x w eps)", *_WEIGHT,
            numerics="rounding", family="lift"),
    rewrite("lift-rms-norm-fp32-weight-cast", f'(Convert (Mul {_NORM32} (Convert w "float32")) dt)',
            "(RmsNorm x w eps)", *_WEIGHT, numerics="rounding", family="lift"),
    rewrite("lift-add-rms-norm", rms_tail(_S32), f"(Get {_ADD_RMS} 0)", *_WEIGHT, *_RESIDUAL, family="lift"),
    rule("lift-add-rms-norm-residual",
         (f"(= __n {rms_tail(_S32)})", f"(= __res (Convert {_S32} (dtype x)))", *_WEIGHT, *_RESIDUAL),
         (f"(union __res (Get {_ADD_RMS} 1))",), family="lift"),
    rule("lift-add-rms-norm-fp32-residual",
         ('(= __s2 (Add (Convert x "float32") s))', '(= s (Add (Convert a "float32") (Convert b "float32")))',
          "(= dt (dtype x))", "(= (dtype a) dt)", "(= (dtype b) dt)", '(!= dt "float32")', "(= S (shape x))",
          "(= (shape s) S)", "(= (ndim x) __k)", "(= (dim x -1) __d)", "(contiguous s)"),
         ("(let __r (Convert s dt))", *made("__r", "dt", "S", "__k", "__d"), '(let __r32 (Convert __r "float32"))',
          *made("__r32", '"float32"', "S", "__k", "__d"), '(union __s2 (Add (Convert x "float32") __r32))'),
         "rounding", "lift", chains=True),  # each firing gives the next layer's sum the form it matches
    *(quant_group_rule(fp8, fmax, folded) for fp8, fmax in NATIVE_FP8_MAX for folded in (False, True)),
)
RULES: tuple[Rule, ...] = (
    *_BIG,
    rewrite("mul-comm", "(Mul a b)", "(Mul b a)", family="lift"),
    rewrite("lift-silu-and-mul", f"(Mul (Convert {_SILU32} dt) {_UP})", "(SiluMul x)", *_HALVES, family="lift"),
    rewrite("lift-silu-and-mul-fp32", f'(Convert (Mul {_SILU32} (Convert {_UP} "float32")) dt)', "(SiluMul x)",
            *_HALVES, numerics="rounding", family="lift"),
    rewrite("silu-decomposed", "(Silu x)", f"(Convert {_sigmoid_times(_X32)} dt)",
            "(= dt (dtype x))", '(!= dt "float32")', family="lift"),
    rewrite("silu-decomposed-fp32", "(Silu x)", _sigmoid_times("x"), '(= (dtype x) "float32")', family="lift"),
    rewrite("silu-sigmoid", "(Mul x (Sigmoid x))", _sigmoid_times("x"), '(= (dtype x) "float32")',
            numerics="rounding", family="lift"),
    rewrite("slice-whole", "(Slice x d 0 9223372036854775807)", "x", family="lift"),
    rewrite("amax-is-max", "(AmaxKeepLast x)", "(Get (MaxLast x) 0)", family="lift"),
    rewrite("max-dropped-is-amax", "(Get (MaxDropLast x) 0)", "(AmaxLast x)", family="lift"),
    rewrite("clamp-split", "(Clamp x lo hi)", "(ClampMax (ClampMin x lo) hi)", family="lift"),
)
