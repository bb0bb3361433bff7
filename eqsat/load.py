"""Load: imported terms and facts into a fresh egglog e-graph, with the rules declared.

Terms enter through egglog's binding objects, never a program string (parsing a large string is
quadratic, ``reference/egglog-notes.md``): one rule with an empty query whose actions ``let``-bind
every FX node's term, union it with ``(Node i)`` and set its facts, run once. The schema (the fixed
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


def _lit(v: object) -> eb.Lit:
    if isinstance(v, bool):
        return eb.Lit(_SPAN, eb.Bool(v))
    if isinstance(v, int):
        return eb.Lit(_SPAN, eb.Int(v))
    if isinstance(v, float):
        return eb.Lit(_SPAN, eb.Float(v))
    if isinstance(v, str):
        return eb.Lit(_SPAN, eb.String(v))
    raise TypeError(f"cannot put {type(v).__name__} {v!r} into the e-graph")


def _call(name: str, *args: object) -> eb.Call:
    return eb.Call(_SPAN, name, list(args))


def _var(i: int) -> eb.Var:
    return eb.Var(_SPAN, f"n{i}")


def _fact_actions(i: int, f: TensorFacts) -> list[object]:
    v = _var(i)
    acts: list[object] = [
        eb.Set(_SPAN, "dtype", [v], _lit(f.dtype)),
        eb.Set(_SPAN, "shape", [v], _lit(",".join(str(d) for d in f.shape))),
        eb.Set(_SPAN, "ndim", [v], _lit(len(f.shape))),
    ]
    if f.shape and isinstance(f.shape[-1], int):  # rules read the last dim only (eqsat.ir)
        acts.append(eb.Set(_SPAN, "dim", [v, _lit(-1)], _lit(f.shape[-1])))
    if f.contiguous:
        acts.append(eb.Expr_(_SPAN, _call("contiguous", v)))
    return acts


def term_actions(imported: Imported) -> list[object]:
    acts: list[object] = []
    for i, (op, args) in imported.terms.items():
        expr = _call(op, *(_var(a.node) if isinstance(a, Arg) else _lit(a) for a in args))
        acts.append(eb.Let(_SPAN, f"n{i}", expr))
        acts.append(eb.Union(_SPAN, _call("Node", _lit(i)), _var(i)))
        facts = imported.facts.get(i)
        if facts is not None:
            acts.extend(_fact_actions(i, facts))
    return acts


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
        self.egraph.run_program(*self.egraph.parse_program("\n".join(program)))

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
        rule = eb.RuleCommand(eb.Rule(_SPAN, term_actions(imported), [], "load", "load"))
        self.egraph.run_program(rule, *self.egraph.parse_program("(run load 1)"))
