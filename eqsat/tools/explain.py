"""Explain and discover: where each kernel could apply, whether it was chosen and why; and which
memory-bound chains no kernel covers. Read-only: the graph is never changed.

``explain(gm)`` lists every *site* of every fused catalog row (where its semantics occur in the
saturated e-graph) as ``chosen``, ``not chosen`` (the kernel's predicted time against what extraction
chose instead, at the bound sizes) or ``constraint failed`` (the first side condition that fails, or
what the op needs that these inputs lack: ``eqsat.admissible``). Sites are found by diagnostic rules
generated from the rows (one per constraint-list prefix), so a new or hypothetical row
(``Catalog.extend``) is explained with no extra code: the "what-if kernel" report.

``discover(gm)`` groups the extracted graph's memory-bound ops (ATen ops, plus semantic ops and
projections joined to them) into connected chains holding an ATen op, ranked by the saving of one
fused kernel moving only the chain's boundary traffic. Both name model source lines
(``node.meta["stack_trace"]``).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch.fx as fx

from eqsat.admissible import Admissible
from eqsat.core.egraph import EGraph, ENode, Selection
from eqsat.core.rule import Rule
from eqsat.core.sexp import calls, parse
from eqsat.core.spec import Traffic
from eqsat.core.spelling import VocabIndex
from eqsat.core.unionfind import UnionFind
from eqsat.cost.roofline import RooflineCost, load_profile
from eqsat.engine import engine as load
from eqsat.engine import saturate, serialize
from eqsat.extract import EXTRACTORS
from eqsat.fx import importer as fx_in
from eqsat.fx.symbolic import SymbolicDims
from eqsat.kernels.catalog import Catalog
from eqsat.options import Options
from eqsat.rewrites.kernels import strip_get

PROGRESS = "explain-progress"
SYMBOLIC_HINT = (" (where the last dim is symbolic, only its example size can decide: Options.symbolic='guard' "
                 "decides on it and guards the compiled graph)")


@dataclass
class Site:
    kernel: str
    status: str  # "chosen" | "not chosen" | "constraint failed"
    failed_constraint: str = ""
    kernel_us: float | None = None
    chosen_us: float | None = None
    nodes: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)


@dataclass
class Chain:
    ops: list[str]
    cost_us: float
    fused_us: float
    nodes: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)

    @property
    def saving_us(self) -> float:
        return self.cost_us - self.fused_us


def diagnostic_rules(catalog: Catalog) -> str:
    """egglog text: per fused row and constraint prefix, record how many constraints hold at a site."""
    lines = [f"(function {PROGRESS} (String T) i64 :merge (max old new))", "(ruleset explain)"]
    for spec in catalog.fused():
        atoms = list(dict.fromkeys(strip_get(o) for o in spec.outputs or ()))
        query = [f"(= __s{i} {a})" for i, a in enumerate(atoms)]
        lines += [Rule(f"explain-{spec.name}-{k}", (*query, *spec.constraints[:k]),
                       (f'(set ({PROGRESS} "{spec.name}" __s0) {k})',)).egglog("explain")
                  for k in range(len(spec.constraints) + 1)]
    return "\n".join(lines)


def _is_aten(op: str, catalog: Catalog) -> bool:
    """A memory-bound ATen op: generic (``A0``..``A3``) or a typed Level-A catalog row."""
    if op[:1] == "A" and op[1:].isdigit():
        return True
    return op in catalog and catalog[op].calibration_key.startswith("aten:")


def _is_memory_bound(op: str, catalog: Catalog) -> bool:
    """An op a fused kernel of the region could absorb: ATen, a standalone semantic row, a projection."""
    return _is_aten(op, catalog) or op == "Get" or (op in catalog and not catalog[op].is_fused)


def _uncovered(catalog: Catalog) -> set[str]:
    """The semantic rows no fused row of ``catalog`` computes: a region holding one has no kernel."""
    covered = {c[0] for s in catalog.fused() for out in s.outputs or () for c in calls(parse(out))}
    return {s.name for s in catalog if not s.is_fused and s.name not in covered}


def _op_name(node: ENode) -> str:
    return str(node.args[0]) if node.op[1:].isdigit() else node.op


_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')


def _where(frame: str) -> str:
    """``path:line (function)`` of a stack-trace frame line, the path relative to the working
    directory when it lies under it (a model's own source, as a user runs ``explain`` from its repo)."""
    m = _FRAME.search(frame)
    if m is None:
        return frame
    path = Path(m["path"])
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        path = path.relative_to(Path.cwd())
    return f"{path}:{m['line']} ({m['fn']})"


def _source(nodes: list[fx.Node]) -> list[str]:
    """The innermost model-source frame of each node's stack trace, once each, in node order."""
    out = []
    for n in nodes:
        trace = n.meta.get("stack_trace") or ""
        lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().startswith("File ")]
        where = _where(lines[-1]) if lines else None
        if where is not None and where not in out:
            out.append(where)
    return out


class _Analysis:
    """The saturated, serialized and extracted e-graph of one graph, plus the diagnostic table."""

    def __init__(self, graph_module: fx.GraphModule | fx.Graph, options: Options) -> None:
        vocab = VocabIndex(options.vocabularies)
        self.im = fx_in.import_graph(graph_module, options.catalog, vocab)
        dims = SymbolicDims(self.im.shape_env, options.symbolic)
        dims.specialize(self.im.facts)  # as optimize does
        self.catalog = options.catalog
        engine = load.Engine(options.catalog, options.active_rules())
        engine.declare_constructors(engine.constructors)  # the diagnostic rules name every fused row's terms
        engine.egraph.run_program(*engine.egraph.parse_program(diagnostic_rules(options.catalog)))
        engine.declare_for(self.im)
        with engine.scope() as egraph:
            engine.load(self.im)
            saturate.saturate(egraph, options.budgets, ruleset=engine.ruleset)
            egraph.run_program(*egraph.parse_program("(run explain 1)"))
            ser = serialize.serialize(egraph, engine.extractable, self.im.terms, self.im.roots)
            self.progress = serialize.rows_of(egraph, PROGRESS, ser.ids)
        self.eg: EGraph = ser.egraph
        self.class_of_node = ser.class_of_node
        profile = load_profile(options.profile)
        read_by_op = frozenset(ser.class_of_node[j] for j in self.im.read_by_opaque() if j in ser.class_of_node)
        roofline = RooflineCost(self.eg, options.catalog, profile, options.sizes, hints=dims.named_hints(),
                                read_by_op=read_by_op)
        self.admissible = Admissible(roofline, self.eg, options.catalog, vocab, self.im.vocabularies,
                                     ser.enode_of_node.values(), self.im.shape_args, hypothetical=True,
                                     platform=profile.platform, standalone_lifts=options.standalone_lifts,
                                     measured=profile.kernels)
        self.cost = roofline
        self.selection: Selection = EXTRACTORS[options.extractor](self.eg, self.admissible) if self.im.roots else {}
        self.nodes_of: dict[int, list[fx.Node]] = {}
        for i, c in self.class_of_node.items():
            self.nodes_of.setdefault(c, []).append(self.im.nodes[i])
        self.projections: dict[int, list[int]] = {}
        for n in self.eg.nodes:
            if n.op == "Get":
                self.projections.setdefault(n.children[0], []).append(n.eclass)

    def fx_nodes(self, classes: list[int]) -> list[fx.Node]:
        return [n for c in classes for n in self.nodes_of.get(c, []) if n.op == "call_function"]

    def chosen_cost(self, outputs: list[int], stop: set[int]) -> float:
        """Cost of what the selection computes for ``outputs``, not counting what lies below ``stop``."""
        seen: set[int] = set()
        total, todo = 0.0, list(outputs)
        while todo:
            c = todo.pop()
            if c in seen or c in stop or c not in self.selection:
                continue
            seen.add(c)
            node = self.eg.nodes[self.selection[c]]
            total += self.cost(node)
            todo.extend(node.children)
        return total


def explain(graph_module: fx.GraphModule | fx.Graph, options: Options | None = None, **overrides: object) -> list[Site]:
    """Every site of every fused catalog row in the graph, with its verdict (see the module docstring)."""
    a = _Analysis(graph_module, replace(options or Options(), **overrides))
    sites = []
    for (kernel, cls), held in sorted(a.progress.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        spec = a.catalog[kernel]
        outputs = a.projections.get(cls, []) or [cls]
        fx_nodes = a.fx_nodes(outputs)
        site = Site(kernel, "constraint failed", nodes=[n.name for n in fx_nodes], source=_source(fx_nodes))
        if held < len(spec.constraints):
            site.failed_constraint = spec.constraints[held]
            if "(dim " in site.failed_constraint:
                site.failed_constraint += SYMBOLIC_HINT
            sites.append(site)
            continue
        knodes = [n for n in a.eg.nodes if n.op == kernel and set(a.projections.get(n.eclass, [n.eclass])) & set(outputs)]
        why = a.admissible.why_not(knodes[0]) if knodes else ()
        if why:  # the rule holds, but no op of this graph's vocabularies runs the kernel on these inputs
            site.failed_constraint = "; ".join(why)
            site.kernel_us = a.cost(knodes[0])
            sites.append(site)
            continue
        chosen = {a.eg.nodes[a.selection[c]].op for c in outputs if c in a.selection}
        below = {c for c in outputs if c in a.selection and a.eg.nodes[a.selection[c]].op == "Get"}
        picked = any(a.eg.nodes[a.selection[a.eg.nodes[a.selection[c]].children[0]]].op == kernel for c in below
                     if a.eg.nodes[a.selection[c]].children[0] in a.selection) or kernel in chosen
        site.status = "chosen" if picked else "not chosen"
        if knodes:
            site.kernel_us = a.cost(knodes[0])
            if not picked:
                site.chosen_us = a.chosen_cost(outputs, set(knodes[0].children))
        sites.append(site)
    return sites


def discover(graph_module: fx.GraphModule | fx.Graph, options: Options | None = None, **overrides: object) -> list[Chain]:
    """Chains of memory-bound ops in the extracted graph that one kernel would make faster, ranked by
    the saving of fusing each."""
    options = replace(options or Options(), **overrides)
    a = _Analysis(graph_module, options)
    generic = {c for c, i in a.selection.items() if _is_memory_bound(a.eg.nodes[i].op, a.catalog)}
    linked = UnionFind(generic)
    for c in generic:
        for k in a.eg.nodes[a.selection[c]].children:
            if k in generic:
                linked.union(c, k)
    users: dict[int, set[int]] = {}
    for c, i in a.selection.items():
        for k in a.eg.nodes[i].children:
            users.setdefault(k, set()).add(c)
    roots = set(a.eg.roots)
    profile = a.cost.profile
    uncovered = _uncovered(a.catalog)
    chains = []
    for members in linked.classes():
        ops_here = [a.eg.nodes[a.selection[c]].op for c in members]
        if len(members) < 2 or not any(_is_aten(op, a.catalog) or op in uncovered for op in ops_here):
            continue
        inside = set(members)
        ins = {k for c in members for k in a.eg.nodes[a.selection[c]].children if k not in inside}
        outs = {c for c in members if c in roots or users.get(c, set()) - inside}
        nbytes = sum(op.bytes for op in (a.cost.operand_at(c) for c in ins | outs) if op is not None)
        fused = profile.time_us(Traffic(nbytes, 0, 1), "")
        cost = sum(a.cost(a.eg.nodes[a.selection[c]]) for c in members)
        if cost <= fused:  # one kernel would save nothing (views and splits cost nothing apart)
            continue
        fx_nodes = a.fx_nodes(sorted(inside))
        ops = (_op_name(a.eg.nodes[a.selection[c]]) for c in members)
        chains.append(Chain(sorted(op for op in ops if op != "Get"), cost, fused,
                            [n.name for n in fx_nodes], _source(fx_nodes)))
    return sorted(chains, key=lambda ch: -ch.saving_us)


def table(sites: list[Site]) -> str:
    rows = [("kernel", "status", "kernel us", "chosen us", "why / where")]
    for s in sites:
        why = s.failed_constraint or (s.source[0] if s.source else ", ".join(s.nodes))
        rows.append((s.kernel, s.status, f"{s.kernel_us:.2f}" if s.kernel_us is not None else "-",
                     f"{s.chosen_us:.2f}" if s.chosen_us is not None else "-", why))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows)


def as_json(items: list[Site] | list[Chain]) -> str:
    return json.dumps([asdict(x) | ({"saving_us": x.saving_us} if isinstance(x, Chain) else {}) for x in items],
                      indent=2)
