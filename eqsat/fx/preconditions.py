"""Dims the ops of a graph tie together, read off their preconditions.

Every op of the input graph runs whenever the graph does, so what it requires of its inputs holds
(``KernelSpec.implies``: vLLM's ``fla_rms_norm_gated`` asserts that z has x's shape, a norm's weight
spans the rows; a fused row requires what its semantics' ops do). Two symbolic dims so tied are one dim,
and a symbolic dim tied to a number is that number: :func:`tie_dims` rewrites the import's facts
accordingly (``torch.compile(dynamic=True)`` gives x's and z's token dims, or a hidden dim and its
weight's length, symbols of their own). Ties that contradict each other (two numbers) change nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import sympy

from eqsat.core.egraph import TensorFacts
from eqsat.core.sexp import calls, is_var, parse
from eqsat.core.spec import DimsEqual
from eqsat.core.unionfind import UnionFind
from eqsat.kernels.catalog import Catalog

Dim = int | str


def implied(catalog: Catalog, name: str) -> tuple[DimsEqual, ...]:
    """The dim equalities row ``name`` implies over its own parameters: its ``implies`` and those of
    every catalog op its semantics apply to parameters of its own."""
    try:
        return _implied(catalog, name)
    except TypeError:  # a catalog with an unhashable row: worked out each time
        return _implied.__wrapped__(catalog, name)


@cache
def _implied(catalog: Catalog, name: str) -> tuple[DimsEqual, ...]:
    spec = catalog[name]
    out = list(spec.implies)
    own = set(spec.param_names)
    for term in spec.outputs or ():
        for call in calls(parse(term)):
            head = call[0]
            if head == name or head not in catalog:
                continue
            callee = catalog[head]
            bound = {p: a for p, a in zip(callee.param_names, call[1:], strict=False)
                     if isinstance(a, str) and is_var(a) and a in own}
            out.extend(DimsEqual(bound[e.a], bound[e.b], e.last) for e in implied(catalog, head)
                       if e.a in bound and e.b in bound)
    return tuple(dict.fromkeys(out))


def _symbols(d: str) -> set[sympy.Symbol]:
    return sympy.sympify(d).free_symbols


def _substitution(ties: UnionFind[Dim]) -> dict[sympy.Symbol, sympy.Expr]:
    """Symbol -> what it equals, from each class of tied dims: a number where the class holds one (and
    only one), else one symbol's expression in terms of another's (``8*s1 = 8*s0`` gives ``s1 = s0``)."""
    subst: dict[sympy.Symbol, sympy.Expr] = {}
    for members in ties.classes():
        ints = {d for d in members if isinstance(d, int)}
        exprs = [sympy.sympify(d) for d in members if isinstance(d, str)]
        if len(ints) > 1 or not exprs:
            continue  # contradictory (the graph cannot run) or nothing symbolic
        target = sympy.Integer(next(iter(ints))) if ints else exprs[0]
        for e in exprs:
            if e == target or len(e.free_symbols) != 1:
                continue
            (sym,) = e.free_symbols
            if sym in subst or sym in target.free_symbols:
                continue
            solved = sympy.solve(sympy.Eq(e, target), sym)
            if len(solved) == 1 and (solved[0].is_integer or solved[0].free_symbols):
                subst[sym] = solved[0]
    return subst


def tie_dims(terms: Mapping[int, tuple[str, tuple]], facts: dict[int, TensorFacts], catalog: Catalog) -> bool:
    """Rewrite ``facts`` (FX node index -> facts) in place with the dims the ops of ``terms`` tie; whether
    any changed. Term arguments that are FX values are objects with a ``node`` index (``fx_in.Arg``)."""
    ties: UnionFind[Dim] = UnionFind()
    for op, args in terms.values():
        if op not in catalog:
            continue
        equal = implied(catalog, op)
        if not equal:
            continue
        named = dict(zip(catalog[op].param_names, args, strict=False))
        for e in equal:
            fa, fb = (facts.get(getattr(named.get(p), "node", -1)) for p in (e.a, e.b))
            if fa is None or fb is None or not fa.shape or not fb.shape:
                continue
            pairs = [(fa.shape[-1], fb.shape[-1])] if e.last else \
                list(zip(fa.shape, fb.shape, strict=True)) if len(fa.shape) == len(fb.shape) else []
            for a, b in pairs:
                if a != b:
                    ties.union(a, b)
    if not ties.parent:
        return False
    subst = _substitution(ties)
    substitute(facts, {str(k): v for k, v in subst.items()})
    return bool(subst)


def substitute(facts: dict[int, TensorFacts], by_name: Mapping[str, object]) -> None:
    """Rewrite the shapes of ``facts`` in place, each symbol named in ``by_name`` replaced by its value
    (an int or a sympy expression) in every symbolic dim."""
    if not by_name:
        return
    memo: dict[str, Dim] = {}
    names = set(by_name)
    subst = {sympy.Symbol(n): sympy.sympify(v) for n, v in by_name.items()}  # as sympify names symbols

    def dim(d: Dim) -> Dim:
        if isinstance(d, int):
            return d
        got = memo.get(d)
        if got is None:
            got = d
            if any(n in d for n in names):
                expr = sympy.sympify(d)
                if expr.free_symbols & subst.keys():
                    new = sympy.simplify(expr.subs(subst))
                    got = int(new) if new.is_number else str(new)
            memo[d] = got
        return got

    for i, f in list(facts.items()):
        shape = tuple(dim(d) for d in f.shape)
        if shape != f.shape:
            facts[i] = TensorFacts(f.dtype, shape, f.contiguous)
