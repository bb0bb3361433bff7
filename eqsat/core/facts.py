"""How a tensor's facts are stored in egglog, and how rules that read or state them are rendered.

Rules are written against five fact forms (``eqsat.core.ir``): ``(dtype t)``, ``(shape t)``, ``(ndim t)``,
``(dim t -1)`` and the atom ``(contiguous t)``. egglog keeps three functions per value: ``(dtype t)``
and ``(shape t)`` as written, and ``(facts t)``, one i64 packing the rest (:func:`pack`: contiguity
in bit 0, ndim in the next 7 bits, and above them the last dim + 1, 0 when the last dim is
symbolic). So a value is three rows where it was up to five, and a query reads one ``facts`` atom
per tensor for its rank, last dim and contiguity where it read up to three: fewer rows to load and
clear, and fewer atoms for egglog to join each iteration. All three stay functions: egglog's
planner knows a function's output is determined by its key, which keeps a rule's query one bag
(``rewrites/lift.py`` says why that matters; a relation of the facts, or the dtype read back from
a packed code, made some plans split). ``facts`` merges by ``max``: rows of one value differ only in
contiguity (members of one e-class can have different layouts), and the class is contiguous when
any member is, as the relation ``contiguous`` said before.

:func:`encode_query` and :func:`encode_actions` render a rule in that form: each tensor variable
``v`` whose rank, last dim or contiguity the query reads gets ``(= __p_v (facts v))``, and each such
read becomes an expression of ``__p_v``; ``(dim v -1)`` also requires the last dim to be known, as it
did when a symbolic dim had no row. A new value's ndim, last dim and contiguity statements become one ``facts`` row (its
dtype and shape statements stay as they are).

Invariant: fact forms apply to variables only; anything else raises ``ValueError``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

FACTS = "facts"
SCHEMA = "(function dtype (T) String :merge old)\n(function shape (T) String :merge old)\n" \
         f"(function {FACTS} (T) i64 :merge (max old new))"
_NDIM_BITS = 7  # torch allows at most 64 dims
# the value of one unit of each field: contiguity is bit 0, ndim the next _NDIM_BITS, the last dim + 1
# above; pack, unpack and the egglog expressions below all spell the layout with these
_NDIMS = 1 << _NDIM_BITS
_NDIM_UNIT, _LAST_UNIT = 2, 2 * _NDIMS
_FIELD = {
    "ndim": lambda p: f"(% (/ {p} {_NDIM_UNIT}) {_NDIMS})",
    "dim": lambda p: f"(- (/ {p} {_LAST_UNIT}) 1)",
    "contiguous": lambda p: f"(% {p} {_NDIM_UNIT})",
}
_READ = re.compile(r"\(ndim ([^()\s]+)\)|\(dim ([^()\s]+) -1\)")
_ANY = re.compile(r"\((?:ndim|dim|contiguous) ")
_CONTIGUOUS = re.compile(r"\(contiguous ([^()\s]+)\)")
_SET = re.compile(r"\(set \(ndim ([^()\s]+)\) ([^()\s]+)\)|\(set \(dim ([^()\s]+) -1\) ([^()\s]+)\)")


def pack(ndim: int, last: int, contiguous: bool) -> int:
    """The ``facts`` value of a tensor (``last``: its last dim, -1 when symbolic)."""
    if not 0 <= ndim < _NDIMS or last < -1:
        raise ValueError(f"cannot pack facts ndim={ndim} last={last}")
    return ((last + 1) * _NDIMS + ndim) * _NDIM_UNIT + int(contiguous)


def unpack(p: int) -> tuple[int, int, bool]:
    """(ndim, last dim or -1, contiguous) of a ``facts`` value."""
    return p // _NDIM_UNIT % _NDIMS, p // _LAST_UNIT - 1, bool(p % _NDIM_UNIT)


def encode_query(query: Sequence[str]) -> tuple[str, ...]:
    """``query`` reading the packed facts (see the module docstring)."""
    read: dict[str, set[str]] = {}  # variable -> the fields read

    def use(field: str, v: str) -> str:
        read.setdefault(v, set()).add(field)
        return _FIELD[field](f"__p_{v}")

    out: list[str] = []
    for atom in query:
        whole = _CONTIGUOUS.fullmatch(atom)
        if whole:
            out.append(f"(= {use('contiguous', whole.group(1))} 1)")
            continue
        text = _READ.sub(lambda m: use("dim", m.group(2)) if m.group(2) else use("ndim", m.group(1)), atom)
        if _ANY.search(text):
            raise ValueError(f"a fact form in {atom!r} does not apply to a variable")
        out.append(text)
    bind = [f"(= __p_{v} ({FACTS} {v}))" for v in read]
    known = [f"(>= (/ __p_{v} {_LAST_UNIT}) 1)" for v, fields in read.items() if "dim" in fields]
    return (*out, *bind, *known)


def _statement(action: str) -> tuple[str, str, str] | None:
    """(fact, variable, value) of an ndim, last dim or contiguity statement; None for any other action."""
    m = _SET.fullmatch(action)
    if m:
        return ("dim", m.group(3), m.group(4)) if m.group(3) else ("ndim", m.group(1), m.group(2))
    whole = _CONTIGUOUS.fullmatch(action)
    if whole:
        return "contiguous", whole.group(1), "1"
    if _ANY.search(action):
        raise ValueError(f"cannot render the fact statement {action!r}")
    return None


def encode_actions(actions: Sequence[str]) -> tuple[str, ...]:
    """``actions`` with each new value's ndim, last dim and contiguity statements as one ``facts`` row,
    where its first was (ndim is required; the last dim is -1 and contiguity 0 unless stated)."""
    stated: dict[str, dict[str, str]] = {}
    out: list[str | tuple[str]] = []
    for action in actions:
        parsed = _statement(action)
        if parsed is None:
            out.append(action)
            continue
        field, v, value = parsed
        if v not in stated:
            stated[v] = {}
            out.append((v,))  # the row goes here
        if field in stated[v]:
            raise ValueError(f"{field} of {v} stated twice")
        stated[v][field] = value
    rendered = []
    for a in out:
        if isinstance(a, str):
            rendered.append(a)
            continue
        v, f = a[0], stated[a[0]]
        if "ndim" not in f:
            raise ValueError(f"the facts of {v} lack its ndim: a value's facts are stated together")
        rendered.append(f"(set ({FACTS} {v}) (+ (* (+ (* (+ {f.get('dim', '-1')} 1) {_NDIMS}) "
                        f"{f['ndim']}) {_NDIM_UNIT}) {f.get('contiguous', '0')}))")
    return tuple(rendered)
