"""Family: the Level-A ATen/prims ops that lift rules read, as typed constructors.

Ops outside any family import generically (``A0..A3``), which rules cannot read; the ops vLLM's native
decompositions are made of get typed constructors here, so ``eqsat.rewrites.lift`` can state
``(Mul (Convert (Mul x32 (Rsqrt ...)) dt) w) = (RmsNorm x w eps)`` with ``eps`` a variable.
Every row is Level-B-style (``outputs=None``): its own semantics, extractable, costed as one kernel.
Traffic is inferred from the inputs: elementwise ops write ``max(numel)`` at the larger float item size
(scalars do not promote), ``Convert`` the input's count at the target size, last-dim reductions one
element per row (``MaxLast`` also int64 indices); views (``Slice``, ``SplitLast2``) cost nothing.
Spellings (vocabulary ``"aten"``): import takes the first spelling that fits a node (else generic),
emission a constructor's first. ``MeanLast``, ``MaxLast``, ``AmaxKeepLast`` pin the last dim and
``keepdim=True`` (``Spelling.fixed``), ``MaxDropLast`` the last dim and ``keepdim=False``; ``SplitLast2``
is a two-way last-dim ``split_with_sizes``, ``SplitLast`` a ``split`` into equal pieces over it,
``PadLast`` a zero ``constant_pad_nd`` by ``[0, p]``.
Invariant: every row means exactly what its ATen op computes.
"""

from __future__ import annotations

from collections.abc import Mapping

from eqsat.core.egraph import DTYPE_BYTES
from eqsat.core.spec import KernelSpec, Operand, Traffic, params
from eqsat.core.spelling import Spelling

ATEN_KEY = "aten:"  # an ATen op's calibration key is this prefix and its op's name (a generic op's too)

INDEX_BYTES = 8  # int64 indices of max.dim


def _ops(a: Mapping[str, object]) -> list[Operand]:
    return [v for v in a.values() if isinstance(v, Operand)]


def _elementwise(a: Mapping[str, object]) -> Traffic:
    ins = _ops(a)
    out = max(o.numel for o in ins) * max(o.itemsize for o in ins)
    return Traffic(read=sum(o.bytes for o in ins), written=out)


def _convert(a: Mapping[str, object]) -> Traffic:
    x, dt = a["x"], a["dt"]
    assert isinstance(x, Operand) and isinstance(dt, str)
    return Traffic(read=x.bytes, written=x.numel * DTYPE_BYTES.get(dt, 4))


def _mean_last(a: Mapping[str, object]) -> Traffic:
    x = a["x"]
    assert isinstance(x, Operand)
    return Traffic(read=x.bytes, written=x.rows * x.itemsize)


def _max_last(a: Mapping[str, object]) -> Traffic:
    x = a["x"]
    assert isinstance(x, Operand)
    return Traffic(read=x.bytes, written=x.rows * (x.itemsize + INDEX_BYTES))


def _view(a: Mapping[str, object]) -> Traffic:
    return Traffic(read=0, written=0, launches=0)


def _pad_last(a: Mapping[str, object]) -> Traffic:
    x, p = a["x"], a["p"]
    assert isinstance(x, Operand) and isinstance(p, int)
    return Traffic(read=x.bytes, written=x.rows * max(x.shape[-1] + p, 0) * x.itemsize)


def _row(name: str, sig: str, traffic, target: str, doc: str) -> KernelSpec:
    return KernelSpec(name, params(sig), traffic, calibration_key=f"{ATEN_KEY}{target}", doc=doc)


ROWS: tuple[KernelSpec, ...] = (
    _row("Convert", "x:T dt:dtype", _convert, "prims.convert_element_type.default", "x cast to dtype dt"),
    _row("PowS", "x:T p:f64", _elementwise, "aten.pow.Tensor_Scalar", "x ** p, p a scalar"),
    _row("MeanLast", "x:T", _mean_last, "aten.mean.dim", "mean over the last dim, keepdim=True"),
    _row("AddS", "x:T c:f64", _elementwise, "aten.add.Tensor", "x + c, c a scalar"),
    _row("Add", "x:T y:T", _elementwise, "aten.add.Tensor", "x + y, broadcast and promoted"),
    _row("Mul", "x:T y:T", _elementwise, "aten.mul.Tensor", "x * y, broadcast and promoted"),
    _row("Rsqrt", "x:T", _elementwise, "aten.rsqrt.default", "1 / sqrt(x)"),
    _row("Abs", "x:T", _elementwise, "aten.abs.default", "|x|"),
    _row("Sigmoid", "x:T", _elementwise, "aten.sigmoid.default", "1 / (1 + exp(-x))"),
    _row("Silu", "x:T", _elementwise, "aten.silu.default", "x / (1 + exp(-x)), computed in fp32, in x.dtype"),
    _row("MaxLast", "x:T", _max_last, "aten.max.dim", "(values, indices) of max over the last dim, keepdim=True"),
    _row("MaxDropLast", "x:T", _max_last, "aten.max.dim", "(values, indices) of max over the last dim, keepdim=False"),
    _row("AmaxKeepLast", "x:T", _mean_last, "aten.amax.default", "max over the last dim, keepdim=True (values only)"),
    _row("DivS", "x:T c:f64", _elementwise, "aten.div.Tensor", "x / c, c a scalar (true division)"),
    _row("Div", "x:T y:T", _elementwise, "aten.div.Tensor", "x / y, broadcast and promoted (true division)"),
    _row("ClampMin", "x:T c:f64", _elementwise, "aten.clamp_min.default", "max(x, c), NaN kept"),
    _row("ClampMax", "x:T c:f64", _elementwise, "aten.clamp_max.default", "min(x, c), NaN kept"),
    _row("Clamp", "x:T lo:f64 hi:f64", _elementwise, "aten.clamp.default", "min(max(x, lo), hi), NaN kept"),
    _row("Slice", "x:T dim:i64 start:i64 end:i64", _view, "aten.slice.Tensor", "x[start:end] along dim (a view)"),
    _row("SplitLast2", "x:T a:i64 b:i64", _view, "aten.split_with_sizes.default",
         "(x[..., :a], x[..., a:a+b]) with a + b the last dim (views)"),
    _row("SplitLast", "x:T s:i64", _view, "aten.split.Tensor",
         "(x[..., :s], x[..., s:2s], ...): pieces of s along the last dim, the last one shorter (views)"),
    _row("PadLast", "x:T p:i64", _pad_last, "aten.constant_pad_nd.default",
         "x with p zeros appended to its last dim (p < 0 crops)"),
)

_LAST_KEEPDIM = (("dim", (-1,)), ("keepdim", True))

SPELLINGS: dict[str, tuple[Spelling, ...]] = {
    "aten": (
        Spelling("Convert", "prims::convert_element_type", ("x", "dt")),
        Spelling("Convert", "aten::_to_copy", ("x", "dt")),  # kwarg dtype only; device etc. at defaults
        Spelling("PowS", "aten::pow.Tensor_Scalar", ("x", "p")),
        Spelling("MeanLast", "aten::mean.dim", ("x",), fixed=_LAST_KEEPDIM),
        Spelling("AddS", "aten::add.Tensor", ("x", "c")),
        Spelling("Add", "aten::add.Tensor", ("x", "y")),
        Spelling("Mul", "aten::mul.Tensor", ("x", "y")),
        Spelling("Rsqrt", "aten::rsqrt", ("x",)),
        Spelling("Abs", "aten::abs", ("x",)),
        Spelling("Sigmoid", "aten::sigmoid", ("x",)),
        Spelling("Silu", "aten::silu", ("x",)),
        Spelling("MaxLast", "aten::max.dim", ("x",), fixed=(("dim", -1), ("keepdim", True))),
        Spelling("MaxDropLast", "aten::max.dim", ("x",), fixed=(("dim", -1), ("keepdim", False))),
        Spelling("AmaxKeepLast", "aten::amax", ("x",), fixed=_LAST_KEEPDIM),
        Spelling("DivS", "aten::div.Tensor", ("x", "c")),
        Spelling("Div", "aten::div.Tensor", ("x", "y")),
        Spelling("ClampMin", "aten::clamp_min", ("x", "c")),
        Spelling("ClampMax", "aten::clamp_max", ("x", "c")),
        Spelling("Clamp", "aten::clamp", ("x", "lo", "hi")),
        Spelling("ClampMin", "aten::clamp", ("x", "c")),  # clamp(x, min) with max left None
        Spelling("Slice", "aten::slice.Tensor", ("x", "dim", "start", "end"), fixed=(("step", 1),)),
        Spelling("SplitLast2", "aten::split_with_sizes", ("x", ("a", "b")), fixed=(("dim", -1),)),
        Spelling("SplitLast", "aten::split.Tensor", ("x", "s"), fixed=(("dim", -1),)),
        Spelling("PadLast", "aten::constant_pad_nd", ("x", (0, "p")), fixed=(("value", 0.0),)),
    ),
}
