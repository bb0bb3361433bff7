"""Lift rules (Level A = Level B): vLLM's native decompositions are the semantic ops they implement.

A graph in native ATen form (custom ops off, ``reference/vllm-facts.md`` §4.4-4.5) gets the same
fusions as one that calls ``vllm_ir.rms_norm``: these equalities put ``RmsNorm`` / ``AddRmsNorm`` /
``QuantGroup`` into the e-classes of the native chains, and the catalog's fuse rules take it from
there. The ATen ops are the typed constructors of ``eqsat.kernels.aten_ops``.

- ``lift-rms-norm`` (exact): ``x32 = float(x)``; ``cast(x32 * rsqrt(mean_last(x32^2) + eps), dt) * w``
  is ``RmsNorm(x, w, eps)`` when ``dt`` is the dtype of ``w`` and of ``x`` (so the final cast back to
  ``x.dtype`` is the no-op the graph dropped) and ``w`` is a 1-D weight over the last dim.
- ``lift-add-rms-norm`` / ``-residual`` (exact): the same tail over ``s32 = float(x) + float(r)`` is
  output 0 of ``AddRmsNorm(x, r, w, eps)``, and ``cast(s32, x.dtype)`` next to it is output 1.
- ``mul-comm`` (exact): IEEE multiplication commutes (broadcast and promotion are symmetric), so
  ``w * y`` and ``y * w`` both match; ``clamp-split`` (exact): ``clamp(x, lo, hi)`` is
  ``clamp_max(clamp_min(x, lo), hi)``, NaN and ``lo > hi`` included (how post-grad graphs spell it).
- ``lift-quant-group-<fp8>`` (rounding): vLLM's native ``QuantFP8`` group quant (view as
  ``[.., G]``, ``scale = clamp_min(float(max|x_g|) / FMAX, 1 / (FMAX * 512))``,
  ``q = cast(clamp(x_g / scale, -FMAX, FMAX))``, view back, squeeze the scale) is ``QuantGroup(x, G,
  fp8)``. AITER's QuantGroup uses ``finfo(fp8).max`` (240 on e4m3fnuz, vLLM native 224) and floors
  amax at 1e-10 instead of the scale, so (q, scale) differ but q·scale agree within 1.3 fp8 steps
  (``reference.fp8_step_error``; measured: 0.93 where the group's amax >= FMAX * min_scale = 1/512,
  1.29 below it, where vLLM's scale floor coarsens its grid); all-zero groups give q·scale = 0 on both.
  ``G`` is read off the grouped view's last dim; x is 2-D, its last dim a multiple of ``G``, q is
  viewed back to x's shape and the scale to ``[rows, N / G]``. FMAX comes from ``NATIVE_FP8_MAX``.
  ``-folded``: the same chain where no 2-D x exists because the grouped view is the producer's own
  shape (Inductor dropped the two reshapes); x is made as the reshape of that value to q's shape.

Constants (``eps``, ``G``) are pattern variables; structure (which dims, dtypes, constants) is
checked exactly with facts. All rules are equalities in one ruleset: their order never matters.
The four big rules run in two stages (``staged``, below) because egglog 13.2 answers some
multi-bag query plans wrongly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from eqsat.core.ir import FIXED_CONSTRUCTORS
from eqsat.core.rule import Rule, rewrite, rule
from eqsat.core.sexp import is_var, parse, show
from eqsat.core.spec import KernelSpec, rank, same_dtype, same_last_dim, same_shape
from eqsat.kernels import aten_ops

NATIVE_FP8_MAX: dict[str, float] = {"float8_e4m3fnuz": 224.0}
"""fp8 dtype -> the max vLLM's native QuantFP8 clamps to (``get_fp8_min_max``: 224 on ROCm fnuz).
e4m3fn (448) is not listed: the vLLM stand-in emits e4m3fnuz only, so it could not be tested."""


def rms_tail(s32: str) -> str:
    """vLLM-IR's native rms_norm after the fp32 cast ``s32`` of its input: normalise in fp32, cast
    to the weight dtype ``dt``, multiply by the weight ``w``."""
    return f"(Mul (Convert (Mul {s32} (Rsqrt (AddS (MeanLast (PowS {s32} 2.0)) eps))) dt) w)"


_X32 = '(Convert x "float32")'
_S32 = f'(Add {_X32} (Convert r "float32"))'
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
    name = f"lift-quant-group-{fp8.removeprefix('float8_')}"
    if not folded:
        query = ("(= xg (Reshape x sg))", *common, *rank("x", 2), "(= (dim x -1) __n)", "(= (shape x) sq)")
        actions = ("(union __q (Get (QuantGroup x G dt) 0))", "(union __s (Get (QuantGroup x G dt) 1))")
        return rule(name, query, actions, "rounding", "lift")
    query = (*common, "(= (shape __q) sq)", *rank("__q", 2), "(= (dim __q -1) __n)", "(= dx (dtype xg))",
             "(contiguous xg)")
    actions = ("(let x (Reshape xg sq))", "(set (dtype x) dx)", "(set (shape x) sq)", "(set (ndim x) 2)",
               "(set (dim x -1) __n)", "(contiguous x)",
               "(union __q (Get (QuantGroup x G dt) 0))", "(union __s (Get (QuantGroup x G dt) 1))")
    return rule(f"{name}-folded", query, actions, "rounding", "lift")


# -- staging: egglog 13.2 answers some decomposed (multi-bag) query plans wrongly ------------------
#
# egglog-python 13.2.0 pins egglog 2e5657b, whose planner splits large cyclic queries into bags
# (tree decomposition) and can then join two bags without checking a shared variable: the native
# rms chain over ``float(bf16(s32))`` matched as if it read ``s32`` (fixed upstream after it, in
# egglog#880). A query with one atom over all its term variables plans as a single bag (checked by
# ``tests/test_lift.py``), which is sound. So each big rule runs in two stages: ``<name>.match``
# finds the query's term atoms only (its constructors; the fact atoms, ``dtype`` ``shape`` ``ndim``
# ``dim``, are left to the second stage, so a fact some rule sets does not re-run the big join: an
# iteration re-runs a rule once per atom whose table got rows) and records ``(Witness "<name>" t0 ..
# t31)`` over all their term variables (padded with the last; a spurious witness is harmless: a term
# of its own that nothing reads); ``<name>`` re-checks the witness, every atom and every side
# condition in one bag, and only then unions. ``Witness`` is a row of ``eqsat.kernels.aten_ops``;
# nothing extracts it.

_FACT_TABLES: dict[str, tuple[tuple[str, ...], str]] = {
    "dtype": (("T",), "String"), "shape": (("T",), "String"), "ndim": (("T",), "i64"), "dim": (("T", "i64"), "i64"),
}  # checked by a staged rule's second stage only
_TABLES: dict[str, tuple[tuple[str, ...], str]] = {
    **{name: (sorts, "T") for name, sorts in FIXED_CONSTRUCTORS.items()},
    **{row.name: (row.egglog_sorts(), "T") for row in aten_ops.ROWS},
    **_FACT_TABLES,
}
class _Flat:
    """A query as table atoms ``(= v (f a ..))`` over variables and literals, plus primitive checks."""

    def __init__(self, query: tuple[str, ...], known: dict[str, tuple[tuple[str, ...], str]]) -> None:
        self.known = known
        self.tables: list[str] = []
        self.structure: list[str] = []  # the table atoms over constructors (not facts)
        self.checks: list[str] = []
        self.sorts: dict[str, str] = {}
        self.seen: dict[str, str] = {}  # table atom -> the variable it binds
        self.fresh = (f"__v{i}" for i in itertools.count())
        for atom in query:
            self._top(parse(atom))

    def _top(self, e: object) -> None:
        if isinstance(e, list) and e[0] == "=" and any(map(self._table, e[1:])) and \
                all(self._table(a) or is_var(a) for a in e[1:]):
            left, right = sorted(e[1:], key=self._table)  # a variable (if any) names the output
            self._term(right, out=self._term(left) if self._table(left) else left)
        else:
            self.checks.append(show(self._sub(e)))

    def _table(self, e: object) -> bool:
        return isinstance(e, list) and e[0] in self.known

    def _sub(self, e: object) -> object:
        if self._table(e):
            return self._term(e)
        return [e[0], *map(self._sub, e[1:])] if isinstance(e, list) else e

    def _term(self, e: list, out: str | None = None) -> str:
        arg_sorts, out_sort = self.known[e[0]]
        args = [self._term(a) if self._table(a) else a for a in e[1:]]
        for a, sort in zip(args, arg_sorts, strict=True):
            if is_var(a):
                self.sorts.setdefault(a, sort)
        atom = f"({e[0]} {' '.join(args)})"
        if out is None and atom in self.seen:
            return self.seen[atom]
        v = out or next(self.fresh)
        self.seen.setdefault(atom, v)
        self.sorts.setdefault(v, out_sort)
        self.tables.append(f"(= {v} {atom})")
        if e[0] not in _FACT_TABLES:
            self.structure.append(self.tables[-1])
        return v


def staged(r: Rule, rows: Iterable[KernelSpec] = ()) -> tuple[Rule, Rule]:
    """``r`` as a witness-recording rule and a single-bag checking rule; ``rows``: catalog rows
    beyond ``aten_ops`` whose constructors ``r``'s query mentions."""
    flat = _Flat(r.query, {**_TABLES, **{row.name: (row.egglog_sorts(), "T") for row in rows}})
    terms = [v for v, sort in flat.sorts.items() if sort == "T"]
    if not 0 < len(terms) <= aten_ops.WITNESS_TERMS:
        raise ValueError(f"rule {r.name}: {len(terms)} term variables; a witness holds 1..{aten_ops.WITNESS_TERMS}")
    witness = f'(Witness "{r.name}" {" ".join(terms + terms[-1:] * (aten_ops.WITNESS_TERMS - len(terms)))})'
    match = Rule(f"{r.name}.match", tuple(flat.structure), (witness,), r.numerics, r.family)
    check = Rule(r.name, (f"(= __witness {witness})", *flat.tables, *flat.checks), r.actions, r.numerics,
                 r.family)
    return match, check


_BIG = (
    rewrite("lift-rms-norm", rms_tail(_X32), "(RmsNorm x w eps)", *_WEIGHT, family="lift"),
    rewrite("lift-add-rms-norm", rms_tail(_S32), f"(Get {_ADD_RMS} 0)", *_WEIGHT, *_RESIDUAL, family="lift"),
    rule("lift-add-rms-norm-residual",
         (f"(= __n {rms_tail(_S32)})", f"(= __res (Convert {_S32} (dtype x)))", *_WEIGHT, *_RESIDUAL),
         (f"(union __res (Get {_ADD_RMS} 1))",), family="lift"),
    *(quant_group_rule(fp8, fmax, folded) for fp8, fmax in NATIVE_FP8_MAX.items() for folded in (False, True)),
)
_STAGED = tuple(staged(r) for r in _BIG)

RULES: tuple[Rule, ...] = (
    *(r for pair in _STAGED for r in pair),
    rewrite("mul-comm", "(Mul a b)", "(Mul b a)", family="lift"),
    rewrite("clamp-split", "(Clamp x lo hi)", "(ClampMax (ClampMin x lo) hi)", family="lift"),
)
