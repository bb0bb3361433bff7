"""What one implementation of an op accepts: requirements over a constructor's parameters.

A :class:`~eqsat.core.spelling.Spelling` names the FX target that runs a catalog row; its ``accepts``
says which inputs that target can run (its fake and its kernel: vLLM's AITER fakes unpack
``M, N = x.shape``, so they are 2-D; AITER's ``per_1x128`` quant ignores its group size, so it is
G = 128 only). Each requirement is a small value with ``holds(args)``, where ``args`` maps a tensor
parameter to its facts (anything with ``dtype``, ``shape`` and ``contiguous``) and any other
parameter to its constant, and ``str()`` says it in words (``explain`` prints it). ``holds`` answers
True, False, or None when the facts cannot decide (a symbolic last dim against a divisor): a caller
that must be sure treats None as False.

Invariant: a requirement reads only facts and constants, never an FX node or egglog, so extraction
(which sees only the serialized e-graph) and emit check the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

Answer = tuple[bool | None, str | None]  # whether it holds, and the guard that answer relies on


class Dims(Protocol):
    def multiple(self, d: str, step: int) -> Answer: ...

    def at_most(self, d: str, n: int) -> Answer: ...


def _facts(args: Mapping[str, object], name: str) -> object | None:
    f = args.get(name)
    return f if hasattr(f, "shape") and hasattr(f, "dtype") else None


@dataclass(frozen=True)
class Rank:
    """Tensor ``x`` has exactly ``n`` dims."""

    x: str
    n: int

    def holds(self, args: Mapping[str, object]) -> bool | None:
        f = _facts(args, self.x)
        return None if f is None else len(f.shape) == self.n  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return f"{self.x} is {self.n}-D"


@dataclass(frozen=True)
class Contiguous:
    """Tensor ``x`` is contiguous (row-major, no gaps)."""

    x: str

    def holds(self, args: Mapping[str, object]) -> bool | None:
        f = _facts(args, self.x)
        return None if f is None else bool(f.contiguous)  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return f"{self.x} is contiguous"


@dataclass(frozen=True)
class LastDimMultiple:
    """The last dim of ``x`` is a positive multiple of ``times`` x ``of`` (a parameter or an int)."""

    x: str
    of: str | int
    times: int = 1

    def holds(self, args: Mapping[str, object]) -> bool | None:
        return self.check(args)[0]

    def check(self, args: Mapping[str, object], dims: Dims | None = None) -> Answer:
        f = _facts(args, self.x)
        g = args.get(self.of) if isinstance(self.of, str) else self.of
        if f is None or not f.shape or not isinstance(g, int) or isinstance(g, bool):  # type: ignore[attr-defined]
            return None, None
        n, step = f.shape[-1], g * self.times  # type: ignore[attr-defined]
        if not isinstance(n, int):  # a symbolic last dim: only the shape environment can say
            return dims.multiple(n, step) if dims is not None and step > 0 else (None, None)
        return step > 0 and n > 0 and n % step == 0, None

    def __str__(self) -> str:
        of = f"{self.times} * {self.of}" if self.times != 1 else str(self.of)
        return f"the last dim of {self.x} is a multiple of {of}"


@dataclass(frozen=True)
class OneOf:
    """Constant parameter ``p`` is one of ``values`` (AITER's per_1x128 quant: G is 128)."""

    p: str
    values: tuple[object, ...]

    def holds(self, args: Mapping[str, object]) -> bool | None:
        if self.p not in args:
            return None
        v = args[self.p]
        return any(type(v) is type(w) and v == w for w in self.values)

    def __str__(self) -> str:
        return f"{self.p} in {{{', '.join(map(repr, self.values))}}}"


@dataclass(frozen=True)
class LastDimAtMost:
    """The last dim of ``x`` is at most ``n`` (a kernel that holds one row in registers)."""

    x: str
    n: int

    def holds(self, args: Mapping[str, object]) -> bool | None:
        return self.check(args)[0]

    def check(self, args: Mapping[str, object], dims: Dims | None = None) -> Answer:
        f = _facts(args, self.x)
        if f is None or not f.shape:  # type: ignore[attr-defined]
            return None, None
        d = f.shape[-1]  # type: ignore[attr-defined]
        if not isinstance(d, int):
            return dims.at_most(d, self.n) if dims is not None else (None, None)
        return d <= self.n, None

    def __str__(self) -> str:
        return f"the last dim of {self.x} is at most {self.n}"


@dataclass(frozen=True)
class DtypeIn:
    """Tensor ``x``'s dtype (by name, ``"bfloat16"``) is one of ``dtypes``."""

    x: str
    dtypes: tuple[str, ...]

    def holds(self, args: Mapping[str, object]) -> bool | None:
        f = _facts(args, self.x)
        return None if f is None else f.dtype in self.dtypes  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return f"{self.x} is {' or '.join(self.dtypes)}"


@dataclass(frozen=True)
class SameDtype:
    """Tensors ``a`` and ``b`` have one dtype."""

    a: str
    b: str

    def holds(self, args: Mapping[str, object]) -> bool | None:
        fa, fb = _facts(args, self.a), _facts(args, self.b)
        return None if fa is None or fb is None else fa.dtype == fb.dtype  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return f"{self.a} and {self.b} have one dtype"


@dataclass(frozen=True)
class Produces:
    """Dtype parameter ``p`` (a name, ``"float8_e4m3fnuz"``) is the dtype the op produces, which
    ``dtype_of()`` says (vLLM's AITER ops quantize to the platform's fp8, whatever the graph asked)."""

    p: str
    dtype_of: Callable[[], object]

    def holds(self, args: Mapping[str, object]) -> bool | None:
        made = self.dtype_of()
        if made is None or self.p not in args:
            return None
        return args[self.p] == str(made).removeprefix("torch.")

    def __str__(self) -> str:
        made = self.dtype_of()
        return f"{self.p} is {str(made).removeprefix('torch.') if made is not None else 'the platform dtype'}"


Requirement = Rank | Contiguous | LastDimMultiple | OneOf | LastDimAtMost | DtypeIn | SameDtype | Produces


def check(r: Requirement, args: Mapping[str, object], dims: Dims | None = None) -> Answer:
    """Whether ``r`` holds on ``args`` (None: undecided), and the guard the answer relies on."""
    own = getattr(r, "check", None)
    return own(args, dims) if own is not None else (r.holds(args), None)


def unmet(accepts: tuple[Requirement, ...], args: Mapping[str, object], dims: Dims | None = None,
          guards: set[str] | None = None) -> list[str]:
    """The requirements of ``accepts`` not known to hold for ``args`` (undecided ones say so); the
    guards the others relied on are added to ``guards``."""
    out = []
    for r in accepts:
        ok, guard = check(r, args, dims)
        if ok is not True:
            out.append(str(r) if ok is False else f"{r} (cannot be proven: symbolic)")
        elif guard is not None and guards is not None:
            guards.add(guard)
    return out


def two_d(*xs: str) -> tuple[Requirement, ...]:
    """vLLM's AITER fakes unpack ``M, N = x.shape``: each of ``xs`` is 2-D."""
    return tuple(Rank(x, 2) for x in xs)
