"""Load: imported terms and facts into a fresh egglog e-graph, with the rules declared.

Terms enter through egglog's binding objects, never a program string (parsing a large string is
quadratic, ``reference/egglog-notes.md``): one rule with an empty query whose actions ``let``-bind
every FX node's term and state its facts in one ``tensor`` row, run once; then the ``facts`` ruleset
spreads the rows into the fact functions rules read (``eqsat.ir``). The schema (the fixed
constructors plus one per catalog row) and the rules are declared once per :class:`Engine`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from egglog import bindings as eb

from eqsat.fx_in import Arg, Imported
from eqsat.ir import FIXED_CONSTRUCTORS, schema
from eqsat.kernels.catalog import Catalog
from extract.egraph import TensorFacts
from rewrites.rule import Rule

RULESET = "main"
_SPAN = eb.RustSpan("eqsat", 0, 0)


def constructors(catalog: Catalog) -> dict[str, tuple[str, ...]]:
    table = dict(FIXED_CONSTRUCTORS)
    for spec in catalog:
        if spec.name in table:
            raise ValueError(f"catalog entry {spec.name!r} clashes with a built-in constructor")
        table[spec.name] = spec.egglog_sorts()
    return table


_LIT_SORTS = ((bool, eb.Bool), (int, eb.Int), (float, eb.Float), (str, eb.String))


def _lit(v: object) -> eb.Lit:
    for py, sort in _LIT_SORTS:  # bool before int: True is an int too
        if isinstance(v, py):
            return eb.Lit(_SPAN, sort(v))
    raise TypeError(f"cannot put {type(v).__name__} {v!r} into the e-graph")


class _Actions:
    """Builds the load rule's actions; equal literals and each node's variable are built once (a
    binding object costs microseconds, and a graph repeats the same dtypes, shapes and constants)."""

    def __init__(self) -> None:
        self.acts: list[object] = []
        self.lits: dict[tuple[type, object], eb.Lit] = {}
        self.vars: dict[int, eb.Var] = {}

    def lit(self, v: object) -> eb.Lit:
        key = (type(v), v)
        got = self.lits.get(key)
        if got is None:
            got = self.lits[key] = _lit(v)
        return got

    def var(self, i: int) -> eb.Var:
        got = self.vars.get(i)
        if got is None:
            got = self.vars[i] = eb.Var(_SPAN, f"n{i}")
        return got

    def term(self, i: int, op: str, args: tuple) -> None:
        expr = eb.Call(_SPAN, op, [self.var(a.node) if isinstance(a, Arg) else self.lit(a) for a in args])
        self.acts.append(eb.Let(_SPAN, f"n{i}", expr))

    def facts(self, i: int, f: TensorFacts) -> None:
        last = f.shape[-1] if f.shape and isinstance(f.shape[-1], int) else -1  # eqsat.ir: -1 is symbolic
        args = [self.var(i), self.lit(f.dtype), self.lit(",".join(str(d) for d in f.shape)), self.lit(len(f.shape)),
                self.lit(last), self.lit(f.contiguous)]
        self.acts.append(eb.Expr_(_SPAN, eb.Call(_SPAN, "tensor", args)))


def term_actions(imported: Imported) -> list[object]:
    b = _Actions()
    for i, (op, args) in imported.terms.items():
        b.term(i, op, args)
        facts = imported.facts.get(i)
        if facts is not None:
            b.facts(i, facts)
    return b.acts


class Engine:
    """An egglog e-graph with the schema, the catalog's dtype facts and the rules declared once.

    Declaring costs tens of milliseconds (egglog compiles every rule), loading a graph about 0.2 ms
    a term: so one engine serves many graphs, each inside ``scope()`` (egglog push/pop), which
    leaves the engine exactly as declared afterwards. ``serves`` says whether it was declared for a
    given catalog and rule list.
    """

    def __init__(self, catalog: Catalog, rules: Sequence[Rule]) -> None:
        self.constructors = constructors(catalog)
        self.catalog, self.rules = catalog, tuple(rules)
        self.egraph = eb.EGraph()
        program = [schema(self.constructors), f"(ruleset {RULESET})", "(ruleset load)"]
        program += [f'(dtype-ok "{s.name}" "{d}")' for s in catalog for d in s.dtypes]
        program += [r.egglog(RULESET) for r in rules]
        # one small parse per declaration: a parsed node's span holds its whole source text, so one big
        # program string costs time quadratic in its length (reference/egglog-notes.md)
        self.egraph.run_program(*(c for text in program for c in self.egraph.parse_program(text)))

    def serves(self, catalog: Catalog, rules: Sequence[Rule]) -> bool:
        return (self.catalog is catalog or self.catalog == catalog) and self.rules == tuple(rules)

    @contextmanager
    def scope(self) -> Iterator[eb.EGraph]:
        self.egraph.run_program(eb.Push(1))
        try:
            yield self.egraph
        finally:
            self.egraph.run_program(eb.Pop(_SPAN, 1))

    def load(self, imported: Imported) -> None:
        """Add the imported terms and facts (call inside ``scope()``)."""
        self.egraph.run_program(*load_commands(self.egraph, imported))


def load_commands(egraph: eb.EGraph, imported: Imported) -> list[object]:
    """The commands that add ``imported`` to an e-graph declared with ``schema`` and a ``load``
    ruleset: the load rule, run once, then the ``facts`` ruleset."""
    rule = eb.RuleCommand(eb.Rule(_SPAN, term_actions(imported), [], "load", "load"))
    return [rule, *egraph.parse_program("(run load 1) (run facts 1)")]
