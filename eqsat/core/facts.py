"""How a tensor's facts are stored in egglog, and how rules that read or state them are rendered.

Rules are written against five fact forms (``eqsat.core.ir``): ``(dtype t)``, ``(shape t)``, ``(ndim t)``,
``(dim t -1)`` and the atom ``(contiguous t)``. egglog keeps three functions per value: ``dtype`` and
``shape`` as written, and ``facts``, one i64 packing the rest (:func:`pack`: contiguity in bit 0, ndim
in the next 7 bits, above them the last dim + 1, 0 when it is symbolic), merged by ``max`` (a class is
contiguous when any member is). :func:`encode_query` and :func:`encode_actions` render a rule into
that form, as walks over the parsed text (``eqsat.core.sexp``): each variable whose rank, last dim
or contiguity a query reads gets one ``(= __p_v (facts v))`` atom, a ``(dim v -1)`` read also requires
the last dim known, and a new value's ndim, last dim and contiguity statements become one ``facts`` row.

Invariant: fact forms apply to variables only; anything else raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence

from eqsat.core.sexp import Sexp, calls, is_var, parse, show

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
def pack(ndim: int, last: int, contiguous: bool) -> int:
    """The ``facts`` value of a tensor (``last``: its last dim, -1 when symbolic)."""
    if not 0 <= ndim < _NDIMS or last < -1:
        raise ValueError(f"cannot pack facts ndim={ndim} last={last}")
    return ((last + 1) * _NDIMS + ndim) * _NDIM_UNIT + int(contiguous)


def unpack(p: int) -> tuple[int, int, bool]:
    """(ndim, last dim or -1, contiguous) of a ``facts`` value."""
    return p // _NDIM_UNIT % _NDIMS, p // _LAST_UNIT - 1, bool(p % _NDIM_UNIT)


def _is_form(e: Sexp) -> bool:
    return isinstance(e, list) and bool(e) and e[0] in _FIELD


def encode_query(query: Sequence[str]) -> tuple[str, ...]:
    """``query`` reading the packed facts (see the module docstring)."""
    read: dict[str, set[str]] = {}  # variable -> the fields read

    def use(field: str, v: Sexp) -> Sexp:
        if not isinstance(v, str) or not is_var(v):
            raise ValueError(f"a fact form ({field} {show(v)}) does not apply to a variable")
        read.setdefault(v, set()).add(field)
        return parse(_FIELD[field](f"__p_{v}"))

    def walk(e: Sexp) -> Sexp:
        if not isinstance(e, list):
            return e
        if e and e[0] == "ndim" and len(e) == 2:
            return use("ndim", e[1])
        if e and e[0] == "dim" and len(e) == 3 and e[2] == "-1":
            return use("dim", e[1])
        if _is_form(e):
            raise ValueError(f"a fact form {show(e)} does not apply to a variable")
        return [walk(a) for a in e]

    out: list[str] = []
    for atom in query:
        e = parse(atom)
        if isinstance(e, list) and e and e[0] == "contiguous" and len(e) == 2:
            out.append(f"(= {show(use('contiguous', e[1]))} 1)")
        else:
            out.append(show(walk(e)) if isinstance(e, list) else atom)
    bind = [f"(= __p_{v} ({FACTS} {v}))" for v in read]
    known = [f"(>= (/ __p_{v} {_LAST_UNIT}) 1)" for v, fields in read.items() if "dim" in fields]
    return (*out, *bind, *known)


def _statement(action: str) -> tuple[str, str, str] | None:
    """(fact, variable, value) of an ndim, last dim or contiguity statement; None for any other action."""
    e = parse(action)
    if isinstance(e, list) and len(e) == 3 and e[0] == "set" and _is_form(e[1]):
        form, value = e[1], show(e[2])
        if form[0] == "ndim" and len(form) == 2 and is_var(form[1]):
            return "ndim", form[1], value
        if form[0] == "dim" and len(form) == 3 and form[2] == "-1" and is_var(form[1]):
            return "dim", form[1], value
    if isinstance(e, list) and len(e) == 2 and e[0] == "contiguous" and is_var(e[1]):
        return "contiguous", e[1], "1"
    if any(_is_form(c) for c in calls(e)):
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
