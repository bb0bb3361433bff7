"""One row of the kernel catalog, and the named side conditions rows are built from.

A :class:`KernelSpec` says everything the optimizer knows of one op: its egglog constructor and
parameters, its semantics as Level-B terms (one per output; ``None`` for a Level-B op, which *is*
the semantics), the side conditions under which the fused form may replace the semantics, which
activation dtypes it takes, whether the equality is ``exact`` or holds up to ``rounding``, where it
runs, and a traffic formula for the cost model. A row no vocabulary spells (a "leave it to Inductor"
choice) carries ``expand``: a function over the row's parameters, in order, whose traced ATen code
the emitter inlines. Fusion and unlift rules are generated from rows
(``eqsat.rewrites.kernels``); nothing else is written per kernel.

Side conditions are egglog facts over the parameter names, produced by the small predicate
factories below (egg's ``if is_not_zero("?x")`` in data form). Constants such as ``eps`` and the
group size are parameters, never enumerated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Numerics = Literal["exact", "rounding"]
PARAM_SORTS = {"T": "T", "f64": "f64", "i64": "i64", "dtype": "String", "str": "String", "bool": "bool"}


@dataclass(frozen=True)
class Operand:
    """A tensor operand as the traffic formula sees it: a concrete shape and an element size."""

    shape: tuple[int, ...]
    itemsize: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def bytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def rows(self) -> int:
        return self.numel // self.shape[-1] if self.shape and self.shape[-1] else 0


@dataclass(frozen=True)
class Traffic:
    """DRAM bytes read and written and kernel launches of one call; ``rows``: the rows of its first tensor
    operand (the serial work of a kernel that walks rows, as AITER's persistent norms do; 0: not counted)."""

    read: float
    written: float
    launches: int = 1
    rows: float = 0

    @property
    def bytes(self) -> float:
        return self.read + self.written


TrafficFn = Callable[[Mapping[str, object]], Traffic]


@dataclass(frozen=True)
class DimsEqual:
    """An op's precondition, which holds wherever the op runs: tensor parameters ``a`` and ``b`` agree in
    every dim, or (``last``) in their last dim (a weight spans the rows). Import reads the equalities
    of the ops a graph holds (``eqsat.fx.preconditions``): two symbols they tie are one dim."""

    a: str
    b: str
    last: bool = False


@dataclass(frozen=True)
class OpDef:
    """A torch op a kernel module defines: ``namespace::schema`` (``"name(args) -> rets"``), its kernel
    (the PyTorch reference), its fake and, for a fused kernel, ``gpu``: its real implementation
    (AITER's Triton kernel; CUDA and ROCm), which leaves the reference to the CPU. Registered once
    per process; an op that exists already is left alone."""

    namespace: str
    schema: str
    kernel: Callable[..., Any]
    fake: Callable[..., Any]
    gpu: Callable[..., Any] | None = None

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]


@dataclass(frozen=True)
class Twin:
    """A fused row's "leave it to Inductor" twin: the same semantics as the native ATen chain, which
    Inductor compiles into ``launches`` kernels that move only the fused row's boundary traffic,
    under side conditions ``constraints`` (the catalog makes the row: ``eqsat.kernels.catalog``).
    ``quant_epilogue``: the chain ends in a group quant; where an opaque op (a GEMM) reads its q or
    scale, Inductor writes the quant as a kernel of its own after the scales' reduction, which reads the
    chain's inputs again: one launch and one read of the inputs more than ``launches``, what Inductor
    emits for the chain alone, its outputs the graph's (as the calibration times it; docs/gpu.md has
    the measurements).
    ``heads``: the row operands (rank 2, one shape) whose rows may be heads of a token's row: a flat
    ``(tokens * H, D)`` view of ``(tokens, H * D)``. Over those flat rows of a dynamic graph Inductor
    splits the chain's reductions into two kernels; over the ``(tokens, H, D)`` view it writes one. The
    catalog then makes a second twin, the chain written over that view (``eqsat.kernels.inductor``)."""

    launches: int
    constraints: tuple[str, ...]
    quant_epilogue: bool = False
    heads: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelSpec:
    name: str
    params: tuple[tuple[str, str], ...]
    traffic: TrafficFn
    outputs: tuple[str, ...] | None = None
    constraints: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    numerics: Numerics = "exact"
    platforms: frozenset[str] = field(default_factory=lambda: frozenset({"any"}))
    calibration_key: str = ""
    doc: str = ""
    expand: Callable[..., object] | None = None  # ATen code to inline where no vocabulary spells the row
    implies: tuple[DimsEqual, ...] = ()  # what the op requires of its inputs' dims (a fused row: also its semantics')
    reference: Callable[..., Any] | None = None  # a semantic row's PyTorch meaning, over its parameters in order
    inductor: Twin | None = None  # a fused row's "leave it to Inductor" twin, made by the catalog
    traffic_into_op: TrafficFn | None = None  # its traffic where an opaque op reads an output (None: ``traffic``)
    heads: tuple[str, ...] = ()  # a twin's ``Twin.heads``: its row operands that may be flat views of heads

    @property
    def is_fused(self) -> bool:
        return self.outputs is not None

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.params)

    def egglog_sorts(self) -> tuple[str, ...]:
        return tuple(PARAM_SORTS[s] for _, s in self.params)

    def tensor_params(self) -> tuple[str, ...]:
        return tuple(n for n, s in self.params if s == "T")


def params(spec: str) -> tuple[tuple[str, str], ...]:
    """``"x:T w:T eps:f64"`` -> ``(("x", "T"), ("w", "T"), ("eps", "f64"))``."""
    out = []
    for item in spec.split():
        name, _, sort = item.partition(":")
        if sort not in PARAM_SORTS:
            raise ValueError(f"parameter {item!r}: sort must be one of {sorted(PARAM_SORTS)}")
        out.append((name, sort))
    return tuple(out)


# -- named side conditions (each returns egglog query facts) -------------------------------------

def made(t: str, dt: str, shape: str, ndim: object, last: str) -> tuple[str, ...]:
    """The actions that state the facts of ``t``, a contiguous tensor a rule makes: dtype ``dt``, shape
    ``shape``, rank ``ndim``, last dim ``last`` (egglog terms or variables of the rule)."""
    return (f"(set (dtype {t}) {dt})", f"(set (shape {t}) {shape})", f"(set (ndim {t}) {ndim})",
            f"(set (dim {t} -1) {last})", f"(contiguous {t})")


def rank(x: str, n: int) -> tuple[str, ...]:
    return (f"(= (ndim {x}) {n})",)


def contiguous(x: str) -> tuple[str, ...]:
    return (f"(contiguous {x})",)


def same_dtype(a: str, b: str) -> tuple[str, ...]:
    return (f"(= (dtype {a}) (dtype {b}))",)


def dtype_accepted(kernel: str, x: str) -> tuple[str, ...]:
    return (f'(dtype-ok "{kernel}" (dtype {x}))',)


def last_dim_divisible(x: str, g: str) -> tuple[str, ...]:
    n = f"__n_{x}"
    return (f"(= (dim {x} -1) {n})", f"(> {g} 0)", f"(= 0 (% {n} {g}))")


def power_of_two(g: str) -> tuple[str, ...]:
    return (f"(> {g} 0)", f"(= 0 (& {g} (- {g} 1)))")


def same_last_dim(a: str, b: str) -> tuple[str, ...]:
    n = f"__n_{a}_{b}"
    return (f"(= (dim {a} -1) {n})", f"(= (dim {b} -1) {n})")


def same_shape(a: str, b: str) -> tuple[str, ...]:
    return (f"(= (shape {a}) (shape {b}))",)


def one_element(t: str) -> tuple[str, ...]:
    """Every dim of ``t`` is 1 (shape key ``""``, ``"1"``, ``"1,1"``, ...): one element, 0-d included.
    Drop each ``"1,"`` of the key plus a trailing comma, then every comma: only all-ones keys leave
    nothing (``"11"`` leaves ``"1"``, a symbolic ``"s0,1"`` leaves ``"s0"``)."""
    k = f"__shape_{t}"
    return (f"(= {k} (shape {t}))", f'(= "" (replace (replace (+ {k} ",") "1," "") "," ""))')


def static_scale(s: str) -> tuple[str, ...]:
    """``s`` is a static quant's scale: one fp32 element."""
    return (f'(= (dtype {s}) "float32")', *one_element(s))
