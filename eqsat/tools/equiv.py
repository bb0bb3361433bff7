"""Equivalence checking: is a hand-fused graph the same computation as its reference?

``check_equiv(reference, candidate)`` puts both graphs into one e-graph (the candidate's inputs are
the reference's, by position), saturates with the rules the contract admits, and reports per
output: ``equal`` (same e-class: proven under the ``exact`` or ``rounding`` contract), or else it
runs both graphs on random inputs: ``different`` when they disagree beyond the contract (a
counterexample: the largest error is reported; under ``rounding`` an fp8 output followed by its fp32
scale is compared as q·s, in fp8 steps, with the tolerance of the native quant lifts: the scale alone
may move by what the contract allows), ``not proven`` when they agree on every trial, or
when they cannot run here (an op with no kernel on this machine, e.g. a saved graph's opaque
stand-in; the detail says why). "Not proven" is never reported as "different" without a
counterexample.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.fx as fx

from eqsat.core.errors import EqSatInputError
from eqsat.core.ir import LEAF
from eqsat.core.spec import Numerics
from eqsat.core.spelling import VocabIndex
from eqsat.engine import engine as load
from eqsat.engine import saturate, serialize
from eqsat.fx import importer as fx_in
from eqsat.fx.importer import Arg, Imported
from eqsat.library.reference import fp8_step_error
from eqsat.options import Options
from eqsat.rewrites.lift import NATIVE_QUANT_TOL_STEPS

ROUNDING_REL_TOL = {1: 0.13, 2: 0.02}  # by element size: one fp8 step (2^-3) / a few bf16 ulps
FP8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


@dataclass(frozen=True)
class Verdict:
    output: int
    status: str  # "equal" | "not proven" | "different"
    detail: str = ""


def _outputs(graph: fx.Graph) -> list[fx.Node]:
    out = graph.output_node().args[0]
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _merge(a: Imported, b: Imported, outs_a: list[int], outs_b: list[int]) -> tuple[Imported, list[int], list[int]]:
    """One term set holding both graphs, and the two graphs' outputs in it; the candidate's
    placeholders are the reference's (its terms read those nodes: a leaf's e-class is its node's,
    ``eqsat.core.ir``). An output no term reads (a placeholder, an opaque op's value) is given its
    ``Leaf``, which import leaves out."""
    pa = [i for i, n in enumerate(a.nodes) if n.op == "placeholder"]
    pb = [i for i, n in enumerate(b.nodes) if n.op == "placeholder"]
    if len(pa) != len(pb):
        raise EqSatInputError(f"the graphs take {len(pa)} and {len(pb)} inputs; they must match by position")
    off = len(a.nodes)
    same_input = dict(zip(pb, pa, strict=True))

    def node(i: int) -> int:
        """Node ``i`` of the candidate in the merged numbering."""
        return same_input.get(i, off + i)

    terms, facts = dict(a.terms), dict(a.facts)
    for i, (op, args) in b.terms.items():
        j = node(i)
        if op == LEAF:
            terms.setdefault(j, (LEAF, (j,)))
        else:
            terms[j] = (op, tuple(Arg(node(x.node)) if isinstance(x, Arg) else x for x in args))
        if i in b.facts:
            facts.setdefault(j, b.facts[i])
    ib = [node(i) for i in outs_b]
    for i in [*outs_a, *ib]:
        terms.setdefault(i, (LEAF, (i,)))
    merged = Imported(a.graph, [*a.nodes, *b.nodes], terms, facts, [], [])
    return merged, outs_a, ib


TRIAL_MAGNITUDES = (1.0, 1e-2, 1e-3)
"""Trial k scales its activations (inputs of rank >= 2) by ``TRIAL_MAGNITUDES[k % 3]``: where eps shows
next to the mean square (as the rule tests do)."""


def _concrete(val: torch.Tensor, seed: int, magnitude: float = 1.0) -> torch.Tensor:
    shape = [int(d.node.hint) if isinstance(d, torch.SymInt) else int(d) for d in val.shape]
    g = torch.Generator().manual_seed(seed)
    if val.dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * (magnitude if len(shape) >= 2 else 1.0)).to(val.dtype)
    return torch.randint(0, 8, shape, generator=g).to(val.dtype)


def _disagreement(x: object, y: object, numerics: Numerics) -> float:
    """0 when the two values agree under the contract, else the largest (relative) error."""
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        return 0.0 if x == y else float("inf")
    if x.shape != y.shape or x.dtype != y.dtype:
        return float("inf")
    if torch.equal(x, y):
        return 0.0
    xf, yf = x.float(), y.float()
    both_nan = xf.isnan() & yf.isnan()
    err = ((xf - yf).abs().masked_fill(both_nan, 0).max() / (yf.abs().max() + 1e-12)).item()
    if numerics == "exact":
        return err if err > 0 else float("inf")
    return err if err > ROUNDING_REL_TOL.get(x.element_size(), 1e-3) else 0.0


def _quant_pairs(outs: list[object]) -> dict[int, int]:
    """fp8 output -> the fp32 scale right after it, of one rank (a dynamic quant's (q, scale))."""
    pairs = {}
    for k in range(len(outs) - 1):
        q, s = outs[k], outs[k + 1]
        if isinstance(q, torch.Tensor) and isinstance(s, torch.Tensor) and q.dtype in FP8 \
                and s.dtype == torch.float32 and s.dim() == q.dim() and s.shape[-1] > 0 \
                and q.shape[-1] % s.shape[-1] == 0 and q.shape[:-1] == s.shape[:-1]:
            pairs[k] = k + 1
    return pairs


def _pair_error(qa: torch.Tensor, sa: torch.Tensor, qb: torch.Tensor, sb: torch.Tensor) -> float:
    """0 when two (q, scale) pairs agree as q·s within the contract, else the error in fp8 steps."""
    if qa.shape != qb.shape or sa.shape != sb.shape or qa.dtype != qb.dtype:
        return float("inf")
    err = fp8_step_error(qa, sa, qb, sb, qa.shape[-1] // sa.shape[-1])
    return err if not err <= NATIVE_QUANT_TOL_STEPS else 0.0


def check_equiv(reference: fx.GraphModule, candidate: fx.GraphModule, *, numerics: Numerics = "rounding",
                options: Options | None = None, trials: int = 3) -> list[Verdict]:
    """Per output of ``reference``: equal, not proven, or different (see the module docstring)."""
    options = replace(options or Options(), numerics=numerics)
    vocab = VocabIndex(options.vocabularies)
    a = fx_in.import_graph(reference, options.catalog, vocab)
    b = fx_in.import_graph(candidate, options.catalog, vocab)
    outs_a, outs_b = _outputs(a.graph), _outputs(b.graph)
    if len(outs_a) != len(outs_b):
        raise EqSatInputError(f"the graphs have {len(outs_a)} and {len(outs_b)} outputs")
    merged, ia, ib = _merge(a, b, [a.nodes.index(n) for n in outs_a], [b.nodes.index(n) for n in outs_b])
    engine = load.Engine(options.catalog, options.active_rules())
    engine.declare_for(merged)
    with engine.scope() as egraph:
        engine.load(merged)
        saturate.saturate(egraph, options.budgets, ruleset=engine.ruleset)
        ser = serialize.serialize(egraph, engine.extractable, merged.terms, [*ia, *ib])
    cls = ser.class_of_node
    verdicts = []
    unproven = [k for k in range(len(ia)) if cls[ia[k]] != cls[ib[k]]]
    worst = {k: 0.0 for k in unproven}
    ran, unrunnable, paired = 0, "", set()
    for seed in range(trials if unproven else 0):
        inputs = [_concrete(n.meta["val"], seed * 101 + j, TRIAL_MAGNITUDES[seed % len(TRIAL_MAGNITUDES)])
                  for j, n in enumerate(n for n in a.nodes if n.op == "placeholder")]
        try:
            ra, rb = reference(*inputs), candidate(*inputs)
        except Exception as exc:  # e.g. an op with no kernel here (a saved graph's opaque stand-in)
            unrunnable = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            break
        ran += 1
        ra, rb = (ra if isinstance(ra, (list, tuple)) else [ra]), (rb if isinstance(rb, (list, tuple)) else [rb])
        pairs = _quant_pairs(list(ra)) if numerics == "rounding" else {}
        paired |= {*pairs, *pairs.values()}
        for k in unproven:
            q = next((q for q, sc in pairs.items() if k in (q, sc)), None)
            err = _disagreement(rb[k], ra[k], numerics) if q is None else \
                _pair_error(ra[q], ra[pairs[q]], rb[q], rb[pairs[q]])
            worst[k] = max(worst[k], err)
    for k in range(len(ia)):
        if k not in worst:
            verdicts.append(Verdict(k, "equal", f"same e-class under the {numerics} contract"))
        elif worst[k] > 0:
            unit = "fp8 steps (q·s)" if k in paired else "relative error"
            verdicts.append(Verdict(k, "different", f"counterexample: largest {unit} {worst[k]:.3g}"))
        elif unrunnable:
            verdicts.append(Verdict(k, "not proven", f"no rule proves it; the graphs could not run to look for a "
                                                     f"counterexample ({unrunnable}); {ran} trials ran"))
        else:
            verdicts.append(Verdict(k, "not proven", f"no rule proves it; {trials} random trials agree"))
    return verdicts
