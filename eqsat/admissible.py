"""Which e-nodes extraction may pick: a cost wrapper that makes every other one infinitely dear.

The e-graph states equalities on any rank, layout and dtype; an op that runs them does not. A new
e-node (one that is no FX node's own term) is a candidate only where emit can write it as it stands:
- a catalog op needs the spelling emit will use in this graph's vocabularies (``VocabIndex.spelling_for``)
  and that spelling's ``accepts`` (``eqsat.core.accepts``) must hold on the facts of its arguments,
  or, where no vocabulary spells the row, an ``expand`` to inline;
- a reshape needs a shape emit can spell (``fx_out.shape_arg``);
- it is not ``banned`` (a site emit could not write: ``fx_out.SiteError``).
The input graph's own e-nodes are always candidates: the graph runs as it is. ``why_not`` says in
words why an e-node is no candidate (``explain`` prints it). ``hypothetical``: a row no vocabulary
spells is a candidate too (``explain``'s what-if kernels, priced though they cannot be written).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from eqsat.core.accepts import unmet
from eqsat.core.egraph import EGraph, ENode, Ref, TensorFacts
from eqsat.core.ir import LEAF
from eqsat.core.spelling import Spelling, VocabIndex
from eqsat.extract.base import CostFn
from eqsat.fx.emitter import shape_arg
from eqsat.fx.symbolic import SymbolicDims
from eqsat.kernels.catalog import Catalog

INF = float("inf")
_Choice = tuple[Spelling | None, tuple[str, ...], frozenset[str]]  # spelling, why none, guards relied on


class Admissible:
    """``cost`` where an e-node is a candidate, infinity where it is not (see the module docstring)."""

    def __init__(self, cost: CostFn, egraph: EGraph, catalog: Catalog, vocab: VocabIndex, vocabularies: list[str],
                 originals: Collection[int], shape_args: Mapping[str, object],
                 banned: Collection[int] = (), memo: dict[tuple, _Choice] | None = None,
                 dims: SymbolicDims | None = None, hypothetical: bool = False) -> None:
        self.cost, self.egraph, self.catalog, self.vocab = cost, egraph, catalog, vocab
        self.vocabularies, self.shape_args = list(vocabularies), dict(shape_args)
        self._vkey = tuple(self.vocabularies)
        self.exempt = {egraph.nodes[i] for i in originals}
        self.banned = {egraph.nodes[i] for i in banned}
        self.memo = memo if memo is not None else {}  # (vocabularies, op, argument facts) -> choice
        self.own: dict[tuple, _Choice] = {}  # the same, for choices this graph's shape environment made
        self.dims, self.hypothetical = dims, hypothetical
        self._costs: dict[ENode, float] = {}

    def __call__(self, node: ENode) -> float:
        got = self._costs.get(node)
        if got is None:
            asks = node.op == "Reshape" or (node.op in self.catalog and not self._always(node.op))
            if node not in self.exempt and (node in self.banned or (asks and self.why_not(node))):
                got = INF
            else:
                got = self.cost(node)
            self._costs[node] = got
        return got

    def _always(self, op: str) -> bool:
        """Whether every ``op`` e-node is a candidate whatever its arguments: its first spelling requires
        nothing (ATen's ops, the semantic rows in the project's own ops)."""
        got = self.memo.get((self._vkey, op))
        if got is None:
            spellings = self.vocab.spellings_for(op, self.vocabularies)
            got = self.memo[(self._vkey, op)] = bool(spellings) and not spellings[0].accepts  # type: ignore[assignment]
        return bool(got)

    def why_not(self, node: ENode) -> tuple[str, ...]:
        """Why ``node`` cannot be written as it stands (empty when it can; a banned node is not asked)."""
        if node.op == "Reshape":
            return () if shape_arg(node.args[1], self.shape_args) is not None else \
                (f"a reshape to {node.args[1]!r} cannot be spelled (more than one symbolic dim)",)
        return self._choice(node)[1] if node.op in self.catalog and node.op != LEAF else ()

    def guards(self, node: ENode) -> frozenset[str]:
        """The shape guards writing ``node`` relies on (``eqsat.fx.symbolic``: decided on the hints)."""
        return self._choice(node)[2] if node.op in self.catalog and node.op != LEAF else frozenset()

    def spelling(self, node: ENode) -> Spelling | None:
        """The spelling emit writes ``node`` with: the best one whose ``accepts`` holds on its arguments
        (None: an ``expand`` row, or no candidate)."""
        return self._choice(node)[0]

    def _choice(self, node: ENode) -> _Choice:
        facts = self.egraph.facts
        argfacts = tuple([facts.get(a.eclass) if isinstance(a, Ref) else a for a in node.args])
        # a symbolic last dim is answered by this graph's shape environment: not shared across graphs
        symbolic = any(isinstance(f, TensorFacts) and f.shape and isinstance(f.shape[-1], str) for f in argfacts)
        memo = self.own if symbolic else self.memo
        key = (self._vkey, node.op, argfacts)
        got = memo.get(key)
        if got is None:
            got = memo[key] = self._choose(node)
        return got

    def _choose(self, node: ENode) -> _Choice:
        spec = self.catalog[node.op]
        spellings = self.vocab.spellings_for(node.op, self.vocabularies)
        if not spellings:
            if spec.expand is not None or self.hypothetical:
                return None, (), frozenset()
            return None, (f"no op spells {node.op} in vocabularies {self.vocabularies}",), frozenset()
        facts = self.egraph.facts
        args = {name: (facts.get(a.eclass) if isinstance(a, Ref) else a)
                for (name, _), a in zip(spec.params, node.args, strict=True)}
        reasons: list[str] = []
        for spelling in spellings:
            guards: set[str] = set()
            missing = unmet(spelling.accepts, args, self.dims, guards)
            if not missing:
                return spelling, (), frozenset(guards)
            reasons.extend(f"{spelling.target} needs {r}" for r in missing)
        return None, tuple(reasons), frozenset()
