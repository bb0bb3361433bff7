"""Staging: the engine's way around egglog 13.2's query planner, so no rule author meets it.

egglog 13.2 (egglog-python's pin) splits a cyclic query into bags and can join two bags without
checking a variable they share (fixed upstream in egglog#880): a match that reads ``float(bf16(s))``
as if it read ``s``. A query with one atom over all its term variables plans as one bag, which is
sound. So :func:`stage` turns every rule whose constructor atoms form a cyclic hypergraph (not
α-acyclic: the GYO reduction leaves edges) into two: ``<name>.match`` joins the constructor atoms
only (a fact set later does not re-run the big join) and records ``(Witness "<name>" t0 .. t31)``
over every term variable (padded with the last); ``<name>`` re-reads the witness, the fact atoms and
the constructor atoms that bind a variable the witness does not hold (a shape, a constant), checks
every side condition in one bag, then acts. A constructor atom over terms only is not joined again:
it held when the witness was made, and within a graph the e-graph only grows. ``Witness`` is the engine's own constructor, never
extracted. A side condition that pins a variable to a literal (``(= dt "float8_e4m3fn")``) is written
into the match's atoms too, so rules that differ only in such constants join only what each can match
(the check stage still checks it: the matches are the same). Acyclic rules are left as written.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from eqsat.core.rule import Rule
from eqsat.core.sexp import Sexp, is_var, parse, show

WITNESS = "Witness"
WITNESS_TERMS = 32
WITNESS_SORTS: tuple[str, ...] = ("String", *("T",) * WITNESS_TERMS)
FACT_TABLES: dict[str, tuple[tuple[str, ...], str]] = {
    "dtype": (("T",), "String"), "shape": (("T",), "String"), "ndim": (("T",), "i64"), "dim": (("T", "i64"), "i64"),
}
"""The fact forms a query reads (``eqsat.core.facts``): checked by a staged rule's second stage only."""


def tables(constructors: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[tuple[str, ...], str]]:
    """The tables a query over ``constructors`` (name -> argument sorts) reads: theirs and the facts'."""
    return {**{name: (sorts, "T") for name, sorts in constructors.items()}, **FACT_TABLES}


class FlatQuery:
    """A query as table atoms ``(= v (f a ..))`` over variables and literals, plus primitive checks."""

    def __init__(self, query: Iterable[str], known: Mapping[str, tuple[tuple[str, ...], str]]) -> None:
        self.known = known
        self.tables: list[str] = []
        self.structure: list[tuple[str, list[str], list]] = []  # constructor atoms: text, the variables it joins, parsed
        self.checks: list[str] = []
        self.pins: dict[str, str] = {}  # ``pins(checks)``, read as the checks are
        self.sorts: dict[str, str] = {}
        self.seen: dict[str, str] = {}  # table atom -> the variable it binds
        self.atoms: list[tuple[str, str, list[str]]] = []  # tables' atoms, read: (v, f, [a ..])
        self.fresh = (f"__v{i}" for i in itertools.count())
        for atom in query:
            self._top(parse(atom))

    def _table(self, e: Sexp) -> bool:
        return isinstance(e, list) and e[0] in self.known

    def _top(self, e: Sexp) -> None:
        if isinstance(e, list) and e[0] == "=" and any(map(self._table, e[1:])) and \
                all(self._table(a) or is_var(a) for a in e[1:]):
            left, right = sorted(e[1:], key=self._table)  # a variable (if any) names the output
            self._term(right, out=self._term(left) if self._table(left) else left)  # type: ignore[arg-type]
        else:
            check = self._sub(e)
            self.checks.append(show(check))
            _pin(check, self.pins)

    def _sub(self, e: Sexp) -> Sexp:
        if self._table(e):
            return self._term(e)  # type: ignore[arg-type]
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
        self.atoms.append((v, e[0], args))
        if e[0] not in FACT_TABLES:
            self.structure.append((self.tables[-1], [v, *(a for a in args if is_var(a))], ["=", v, [e[0], *args]]))
        return v


def cyclic(edges: Iterable[Iterable[str]]) -> bool:
    """Whether a hypergraph is not α-acyclic: the GYO reduction (drop a vertex in one edge only, drop an
    edge inside another) leaves edges."""
    live = [set(e) for e in edges]
    changed = True
    while changed:
        changed = False
        count: dict[str, int] = {}
        for e in live:
            for v in e:
                count[v] = count.get(v, 0) + 1
        for e in live:
            lone = {v for v in e if count[v] == 1}
            if lone:
                e -= lone
                changed = True
        kept = []
        for i, e in enumerate(live):
            if not e or any(e <= f and (e != f or j < i) for j, f in enumerate(live) if j != i):
                changed = True
                continue
            kept.append(e)
        live = kept
    return bool(live)


def pins(checks: Iterable[str]) -> dict[str, str]:
    """The variables that side conditions ``(= v literal)`` pin (never a term's: a literal is no term),
    and their literals."""
    found: dict[str, str] = {}
    for check in checks:
        _pin(parse(check), found)
    return found


def _pin(e: Sexp, found: dict[str, str]) -> None:
    if isinstance(e, list) and len(e) == 3 and e[0] == "=":
        for v, lit in ((e[1], e[2]), (e[2], e[1])):
            if is_var(v) and isinstance(lit, str) and not is_var(lit):
                found.setdefault(v, lit)


def _pinned(e: Sexp, pins: Mapping[str, str]) -> Sexp:
    if isinstance(e, list):
        return [e[0], *(_pinned(a, pins) for a in e[1:])]
    return pins.get(e, e)


def stage(r: Rule, constructors: Mapping[str, tuple[str, ...]], flat: FlatQuery | None = None) -> tuple[Rule, ...]:
    """``r`` as written when its constructor atoms are acyclic, else its two stages (module docstring);
    ``constructors``: the engine's table of constructor argument sorts; ``flat``: ``r``'s query read
    over ``tables(constructors)``, if it has been."""
    flat = flat or FlatQuery(r.query, tables(constructors))
    if not cyclic(vs for _, vs, _ in flat.structure):
        return (r,)
    terms = [v for v, sort in flat.sorts.items() if sort == "T"]
    if not 0 < len(terms) <= WITNESS_TERMS:
        raise ValueError(f"rule {r.name}: {len(terms)} term variables; a witness holds 1..{WITNESS_TERMS}")
    witness = f'({WITNESS} "{r.name}" {" ".join(terms + terms[-1:] * (WITNESS_TERMS - len(terms)))})'
    match = Rule(f"{r.name}.match", tuple(show(_pinned(atom, flat.pins)) for _, _, atom in flat.structure),
                 (witness,), r.numerics, r.family)
    held = held_by_witness(flat)
    check = Rule(r.name, (f"(= __witness {witness})", *(t for t in flat.tables if t not in held), *flat.checks),
                 r.actions, r.numerics, r.family, r.converse)
    return match, check


def held_by_witness(flat: FlatQuery) -> frozenset[str]:
    """The constructor atoms of a staged query (as ``flat.tables`` writes them) over term variables only,
    which its check stage does not join again: the witness holds every term variable."""
    return frozenset(text for text, vs, _ in flat.structure if all(flat.sorts.get(v) == "T" for v in vs))
