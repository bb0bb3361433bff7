"""Which e-nodes extraction may pick: a cost wrapper that makes every other one infinitely dear.

The e-graph states equalities on any rank, layout and dtype; an op does not. A new e-node (no FX
node's own term) is a candidate only where emit can write it as it stands:
- a catalog op needs the spelling emit will use in this graph's vocabularies (``VocabIndex.spelling_for``)
  with its ``accepts`` (``eqsat.core.accepts``) holding on its arguments' facts, or else an ``expand``;
- a reshape needs a shape emit can spell (``fx_out.shape_arg``); no site is ``banned`` (``fx_out.SiteError``);
- a twin over heads (``eqsat.kernels.inductor``) needs rows that are a symbolic heads x tokens and its
  line in the profile (``measured``);
- its row runs on the profile's ``platform``, and a fused row's GPU implementation loads (``gpu_kernels``);
- a row that fuses nothing (a lifted norm, quant, ...) is written only in a vocabulary of the graph's
  own unless ``standalone_lifts`` (alone it saves no traffic and stops Inductor fusing the chain).
The input graph's own e-nodes are always candidates. ``why_not`` says in words why an e-node is no
candidate; ``hypothetical`` admits rows no vocabulary spells (``explain``'s what-if kernels).
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
from eqsat.kernels.inductor import is_over_heads, site_heads

INF = float("inf")
_Choice = tuple[Spelling | None, tuple[str, ...], frozenset[str]]  # spelling, why none, guards relied on


class Admissible:
    """``cost`` where an e-node is a candidate, infinity where it is not (see the module docstring)."""

    def __init__(self, cost: CostFn, egraph: EGraph, catalog: Catalog, vocab: VocabIndex, vocabularies: list[str],
                 originals: Collection[int], shape_args: Mapping[str, object],
                 banned: Collection[int] = (), memo: dict[tuple, _Choice] | None = None,
                 dims: SymbolicDims | None = None, hypothetical: bool = False, platform: str = "any",
                 gpu_kernels: bool = True, standalone_lifts: bool = True,
                 measured: Collection[str] | None = None) -> None:
        self.cost, self.egraph, self.catalog, self.vocab = cost, egraph, catalog, vocab
        self.vocabularies, self.shape_args = list(vocabularies), dict(shape_args)
        self._vkey = tuple(self.vocabularies)
        self.exempt = {egraph.nodes[i] for i in originals}
        self.banned = {egraph.nodes[i] for i in banned}
        self.memo = memo if memo is not None else {}  # (vocabularies, op, argument facts) -> choice
        self.own: dict[tuple, _Choice] = {}  # the same, for choices this graph's shape environment made
        self.dims, self.hypothetical = dims, hypothetical
        self.platform, self.gpu_kernels, self.standalone_lifts = platform, gpu_kernels, standalone_lifts
        self.measured = None if measured is None else frozenset(measured)  # the profile's keys (None: all)
        self._costs: dict[ENode, float] = {}
        self._op_reasons: dict[str, tuple[str, ...]] = {}
        self._asks: dict[str, bool] = {}

    def __call__(self, node: ENode) -> float:
        got = self._costs.get(node)
        if got is None:
            asks = self._asks.get(node.op)
            if asks is None:  # whether an ``op`` e-node may be no candidate, by its arguments
                asks = self._asks[node.op] = node.op == "Reshape" or (
                    node.op in self.catalog and not self._always(node.op))
            if node not in self.exempt and (node in self.banned or (asks and self.why_not(node))):
                got = INF
            else:
                got = self.cost(node)
            self._costs[node] = got
        return got

    def _always(self, op: str) -> bool:
        """Whether every ``op`` e-node is a candidate whatever its arguments: its first spelling requires
        nothing (ATen's ops, the semantic rows in the project's own ops)."""
        if self.op_reasons(op):
            return False
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
        if node.op not in self.catalog or node.op == LEAF:
            return ()
        return self.op_reasons(node.op) or self._choice(node)[1]

    def op_reasons(self, op: str) -> tuple[str, ...]:
        """Why no ``op`` e-node is a candidate in this graph, whatever its arguments (empty: it may be)."""
        got = self._op_reasons.get(op)
        if got is None:
            spec, reasons = self.catalog[op], []
            anywhere = "any" in spec.platforms or self.platform == "any"
            if not anywhere and self.platform not in spec.platforms:
                reasons.append(f"{op} has no implementation on {self.platform} (it runs on {sorted(spec.platforms)})")
            if spec.is_fused and not anywhere and not self.gpu_kernels:
                reasons.append(f"{op}: the graph runs on a GPU and AITER's Triton kernels are not installed "
                               "(pip install --no-deps amd-aiter)")
            if is_over_heads(spec) and self.measured is not None and spec.calibration_key not in self.measured:
                reasons.append(f"{op}: the profile has no line {spec.calibration_key} (only a measurement says the "
                               "chain over heads is the faster)")
            if not (spec.is_fused or spec.expand is not None or self.standalone_lifts or self.hypothetical
                    or self.vocab.spells(op, self.vocabularies)):
                reasons.append(f"{op} alone is left to Inductor: no vocabulary of the graph spells it, and a lifted "
                               "op that fuses nothing moves what Inductor's code for the chain moves")
            got = self._op_reasons[op] = tuple(reasons)
        return got

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
            if is_over_heads(spec) and site_heads(spec, node, self.egraph.facts) is None:
                return None, (f"{node.op}: its rows are not a symbolic heads x tokens",), frozenset()
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
