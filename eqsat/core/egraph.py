"""The serialized e-graph: the one value saturation hands to extraction.

Saturation (``eqsat``) ends by freezing egglog's e-graph into an :class:`EGraph`; extractors, cost
models and the emitter read only this value, never egglog itself (egg's Runner/Extractor split).

Invariants:
- every e-node belongs to exactly one e-class (``node.eclass``) and is listed in ``classes``;
- ``node.children`` are the e-class ids among ``node.args``, in argument order; ``node.args`` keeps
  primitive arguments (int, float, str, bool) in place and e-class arguments as :class:`Ref`;
- ``facts`` holds tensor facts for tensor-valued classes only (tuple-valued classes have none);
- an ``EGraph`` is never changed once made: what is derived from its structure alone (``kids``,
  ``users``, ``members``, ``eclass_of``) is worked out once, on first use, and shared by every extraction over it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True, slots=True)
class Ref:
    """An e-class argument of an e-node."""

    eclass: int

    def __hash__(self) -> int:  # not dataclass's ``hash((eclass,))``: e-node args tuples hash their Refs often
        return self.eclass


@dataclass(frozen=True, slots=True)
class TensorFacts:
    """What is known of a tensor-valued e-class: dtype name, shape (ints and symbol names), contiguity."""

    dtype: str
    shape: tuple[int | str, ...]
    contiguous: bool = True
    _hash: int = field(init=False, repr=False, compare=False)  # facts key memos (costs, load rows)
    symbolic: bool = field(init=False, repr=False, compare=False)  # a dim of the shape is a symbol's expression

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.dtype, self.shape, self.contiguous)))
        object.__setattr__(self, "symbolic", not all(isinstance(d, int) for d in self.shape))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[TensorFacts], tuple[str, tuple[int | str, ...], bool]]:
        return TensorFacts, (self.dtype, self.shape, self.contiguous)  # str hashes differ between processes

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 4)


DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "int16": 2,
    "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
}


@dataclass(frozen=True, slots=True, init=False)
class ENode:
    """One e-node: an egglog constructor applied to arguments."""

    op: str
    args: tuple[object, ...]
    eclass: int
    children: tuple[int, ...] = field(init=False, repr=False, compare=False)  # the Ref args' e-classes
    _hash: int = field(init=False, repr=False, compare=False)  # e-nodes key the cost and hash-cons tables

    def __init__(self, op: str, args: tuple[object, ...], eclass: int) -> None:
        # the slots' own setters: a frozen dataclass's __init__ goes through object.__setattr__, and
        # serialization makes an ENode per row
        _set_op(self, op)
        _set_args(self, args)
        _set_eclass(self, eclass)
        _set_children(self, tuple([a.eclass for a in args if type(a) is Ref]))
        _set_hash(self, hash((op, args, eclass)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[ENode], tuple[str, tuple[object, ...], int]]:
        return ENode, (self.op, self.args, self.eclass)  # str hashes differ between processes: rehash


_set_op, _set_args, _set_eclass, _set_children, _set_hash = (
    ENode.__dict__[name].__set__ for name in ("op", "args", "eclass", "children", "_hash"))


@dataclass
class EGraph:
    """A frozen e-graph: nodes, their classes, facts, and the roots extraction must cover."""

    nodes: list[ENode]
    roots: list[int]
    facts: dict[int, TensorFacts] = field(default_factory=dict)
    classes: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.classes:
            for i, n in enumerate(self.nodes):
                self.classes.setdefault(n.eclass, []).append(i)

    @classmethod
    def from_nodes(cls, nodes: Iterable[ENode], roots: Iterable[int],
                   facts: Mapping[int, TensorFacts] | None = None) -> EGraph:
        return cls(list(nodes), list(roots), dict(facts or {}))

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def eclass_of(self) -> list[int]:
        """Each e-node's class, by node index."""
        return [n.eclass for n in self.nodes]

    @cached_property
    def kids(self) -> list[tuple[int, ...]]:
        """Each e-node's distinct child classes, in argument order."""
        return [n.children if len(n.children) < 2 else tuple(dict.fromkeys(n.children)) for n in self.nodes]

    @cached_property
    def users(self) -> dict[int, list[int]]:
        """E-class -> the e-nodes that read it (each once, in index order)."""
        users: dict[int, list[int]] = {}
        for i, ks in enumerate(self.kids):
            for k in ks:
                if k in users:
                    users[k].append(i)
                else:
                    users[k] = [i]
        return users

    @cached_property
    def members(self) -> dict[int, int]:
        """E-class -> its e-nodes as a bitset over node indices (bit ``i`` for e-node ``i``)."""
        out: dict[int, int] = {}
        for c, nodes in self.classes.items():
            bits = 0
            for j in nodes:
                bits |= 1 << j
            out[c] = bits
        return out


Selection = dict[int, int]
"""A choice of one e-node index per e-class reached from the roots."""
