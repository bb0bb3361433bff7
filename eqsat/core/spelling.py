"""Vocabularies: how one library spells the catalog's ops in an FX graph.

A :class:`Spelling` ties a catalog constructor to one FX target: which constructor parameters are
the op's leading positional arguments (in order), and which parameters are read off the op's
output instead (vLLM's AITER ops take no fp8 dtype; it is the platform's, seen on the output), and
which further schema arguments it pins to a value (``fixed``: ``mean.dim`` over the last dim with
``keepdim=True``; a ``dim`` argument compares modulo the rank of the op's first input, as ATen wraps
it; emission passes them as keywords). Every other schema argument must hold its schema default, or
the node is not this op. A list argument binds element by element when its entry in ``args`` is a
tuple of parameter names and ints the element must equal: ``constant_pad_nd(x, [0, p])`` is
``("x", (0, "p"))``. A :class:`Const` entry pins a positional argument that sits between bound ones
(AITER's gated quant takes ``bias=None`` between its weight and ``z``).
Several spellings may share a target (``add.Tensor`` with a scalar or a tensor second argument):
import takes the first that fits, emission the first spelling of a constructor in its vocabulary.
Import and emission both read the same spelling, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

import torch

from eqsat.core.accepts import Requirement


@dataclass(frozen=True)
class Const:
    """A positional argument pinned to one value (an absent optional tensor, a flag, a mode string):
    import requires exactly that value (type included: ``True`` is not ``1``), emission passes it."""

    value: object

    def holds(self, value: object) -> bool:
        return type(value) is type(self.value) and value == self.value


@dataclass(frozen=True)
class Spelling:
    constructor: str
    target: str  # "namespace::op" or "namespace::op.overload"
    # a tuple: a list argument, bound element by element; a Const: a positional argument pinned to a value
    args: tuple[str | Const | tuple[str | int, ...], ...]
    from_output_dtype: tuple[str, ...] = ()  # parameters equal to the dtype of output 0
    fixed: tuple[tuple[str, object], ...] = ()  # (schema argument, the value it must hold)
    # Mutating ops (vLLM's ``_C`` ops) appear as ``auto_functionalized(op, **kwargs)``: ``names`` are
    # the schema arguments bound to ``args`` (by name), ``mutated`` the output buffers in the order of
    # the constructor's outputs. Such spellings are read, never written (the emitter uses functional
    # spellings). ``guard`` is a last check over the schema arguments given (by name).
    names: tuple[str, ...] = ()
    mutated: tuple[str, ...] = ()
    guard: Callable[[Mapping[str, object]], bool] | None = None
    # what the target can run (its fake and its kernel), over the constructor's parameters
    # (``eqsat.core.accepts``): extraction never picks a new node of this spelling outside it
    accepts: tuple[Requirement, ...] = ()

    def call_args(self, named: Mapping[str, object]) -> tuple[object, ...]:
        """The op's leading positional arguments, given the constructor's parameter values by name."""
        def one(p: str | Const | tuple[str | int, ...]) -> object:
            if isinstance(p, Const):
                return p.value
            return [named[e] if isinstance(e, str) else e for e in p] if isinstance(p, tuple) else named[p]
        return tuple(one(p) for p in self.args)

    @property
    def functionalized(self) -> bool:
        return bool(self.mutated)

    def overload(self) -> torch._ops.OpOverload | None:
        """The OpOverload if the op is registered in this process, else None."""
        ns, _, rest = self.target.partition("::")
        name, _, ov = rest.partition(".")
        packet = getattr(getattr(torch.ops, ns), name, None) if hasattr(torch.ops, ns) else None
        if packet is None:
            return None
        try:
            return getattr(packet, ov or "default")
        except AttributeError:
            return None

    @property
    def qualname(self) -> str:
        return self.target if "." in self.target.partition("::")[2] else f"{self.target}.default"


@dataclass(frozen=True)
class Vocabulary:
    name: str
    spellings: tuple[Spelling, ...]
    by_constructor: dict[str, Spelling] = field(init=False, repr=False, compare=False)
    by_qualname: dict[str, tuple[Spelling, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        first: dict[str, Spelling] = {}
        named: dict[str, tuple[Spelling, ...]] = {}
        for s in self.spellings:
            if not s.functionalized:
                first.setdefault(s.constructor, s)
            named[s.qualname] = (*named.get(s.qualname, ()), s)
        object.__setattr__(self, "by_constructor", first)
        object.__setattr__(self, "by_qualname", named)

    def __iter__(self) -> Iterator[Spelling]:
        return iter(self.spellings)


class OpArgument(NamedTuple):
    name: str
    has_default: bool
    default: object  # None when there is none
    written: bool  # the op writes it in place (alias info ``(a!)``)


class OpSchema(NamedTuple):
    arguments: tuple[OpArgument, ...]
    returns_alias: bool  # an output aliases an input (a view, an in-place op)


@cache
def op_schema(op: torch._ops.OpOverload) -> OpSchema:
    """What binding and import read of ``op``'s schema, read once per op: the schema builds new
    objects on every access, and an op's schema never changes."""
    schema = op._schema
    arguments = tuple(OpArgument(a.name, a.has_default_value(), a.default_value if a.has_default_value() else None,
                                 a.alias_info is not None and a.alias_info.is_write) for a in schema.arguments)
    return OpSchema(arguments, any(r.alias_info is not None for r in schema.returns))


def overload_qualname(op: torch._ops.OpOverload) -> str:
    """``torch.ops.vllm.rocm_aiter_group_fp8_quant.default`` -> ``"vllm::rocm_aiter_group_fp8_quant.default"``."""
    return f"{op.namespace}::{op._opname}.{op._overloadname}"


@dataclass(frozen=True)
class VocabIndex:
    """All spellings of a set of vocabularies, looked up by FX target qualname."""

    vocabularies: tuple[Vocabulary, ...]
    by_target: dict[str, tuple[tuple[Vocabulary, Spelling], ...]] = field(init=False, repr=False, compare=False)
    # op -> why import keeps its nodes opaque whatever their arguments, or None (``eqsat.fx.importer``
    # fills it as it meets ops): it reads only the op (its schema, tags and torch's side-effect
    # registries), so the index a pass's engine keeps answers each op once
    op_reasons: dict[object, str | None] = field(init=False, default_factory=dict, repr=False, compare=False)
    by_op: dict[object, tuple[tuple[Vocabulary, Spelling], ...]] = field(init=False, default_factory=dict, repr=False,
                                                                         compare=False)  # ``candidates``, by op

    def __post_init__(self) -> None:  # one per pass: each vocabulary keeps its own table by qualname
        table: dict[str, tuple[tuple[Vocabulary, Spelling], ...]] = {}
        for v in self.vocabularies:
            for name, spellings in v.by_qualname.items():
                table[name] = (*table.get(name, ()), *((v, s) for s in spellings))
        object.__setattr__(self, "by_target", table)

    def candidates(self, op: object) -> tuple[tuple[Vocabulary, Spelling], ...]:
        """Every spelling of ``op``, in vocabulary order: import takes the first that fits a node."""
        got = self.by_op.get(op)
        if got is None:
            got = self.by_op[op] = self.by_target.get(overload_qualname(op), ()) \
                if isinstance(op, torch._ops.OpOverload) else ()
        return got

    def lookup(self, op: object) -> tuple[Vocabulary, Spelling] | None:
        hits = self.candidates(op)
        return hits[0] if hits else None

    def spelling_for(self, constructor: str, preferred: list[str]) -> Spelling | None:
        """The first of ``spellings_for``, or None."""
        return next(iter(self.spellings_for(constructor, preferred)), None)

    def spells(self, constructor: str, preferred: list[str]) -> bool:
        """Whether one of the ``preferred`` vocabularies (the graph's own) spells ``constructor``."""
        return any(v.name in preferred and constructor in v.by_constructor for v in self.vocabularies)

    def spellings_for(self, constructor: str, preferred: list[str]) -> tuple[Spelling, ...]:
        """The spellings ``constructor`` can be emitted with, best first, each only where its op exists
        in this process: the preferred vocabularies' (the graph's own, in their order) where any of
        them spells it, else the other vocabularies' (a graph in vLLM's ops never gets another
        library's op for what vLLM's ops can spell)."""
        own, other = [], []
        for v in sorted(self.vocabularies, key=lambda v: preferred.index(v.name) if v.name in preferred else 99):
            s = v.by_constructor.get(constructor)
            if s is not None and s.overload() is not None:
                (own if v.name in preferred else other).append(s)
        return tuple(own or other)
