"""``optimize``: the whole pipeline, one stage after another, each reached only through its value.

    fx graph --import--> terms --load--> e-graph --saturate--> --serialize--> EGraph value
             --extract (cost model)--> selection --emit--> same fx graph, rewritten; Report

Bad input raises :class:`~eqsat.core.errors.EqSatInputError` with a message saying what to fix. Any
other failure (an egglog panic among them) leaves the graph exactly as it was: with ``strict=False``
(default) it is logged as a warning naming the stage and recorded in ``Report.error``; with
``strict=True`` it raises :class:`~eqsat.core.errors.EqSatInternalError`. The graph is only rewritten
when the extraction is predicted to be faster than the graph as it is, and, for a range of sizes,
slower at none of them.
"""

from __future__ import annotations

import gc
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch
import torch.fx as fx

from eqsat import decision, dump
from eqsat.admissible import Admissible
from eqsat.core.egraph import EGraph
from eqsat.core.errors import BudgetExceeded, EqSatInputError, EqSatInternalError, described, guarded
from eqsat.core.ir import LEAF
from eqsat.core.spelling import VocabIndex
from eqsat.cost.roofline import RooflineCost, load_profile
from eqsat.engine import engine as load
from eqsat.engine import repeats, saturate, serialize
from eqsat.extract import EXTRACTORS
from eqsat.extract.base import check, dag_cost, reachable
from eqsat.fx import emitter as fx_out
from eqsat.fx import importer as fx_in
from eqsat.fx.symbolic import SymbolicDims, symbols_read
from eqsat.library import aiter
from eqsat.options import Options
from eqsat.report import Report

log = logging.getLogger("eqsat")
LOAD_SECONDS_PER_TERM = 1e-4  # conservative: well above the pace loading shows (eqsat.engine.engine)
MAX_DROPPED_SITES = 16  # sites emit may drop from one graph before the graph is left alone


class _Stages:
    """``with stage(name):`` times one stage into ``report.stage_ms``; ``current`` names the stage that
    runs (or last ran), so a failure can say where. Stages do not nest. A class, not a generator:
    a generator-based context manager costs more to enter and leave, seven times a pass."""

    def __init__(self, report: Report) -> None:
        self.report, self.current, self._start = report, "setup", 0.0

    def __call__(self, name: str) -> _Stages:
        self.current = name
        return self

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        ms = self.report.stage_ms
        ms[self.current] = ms.get(self.current, 0.0) + (time.perf_counter() - self._start) * 1e3


@contextmanager
def gc_paused(pause: bool = True) -> Iterator[None]:
    """Python's cyclic collector off inside (``Options.pause_gc``), as it was after."""
    was = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause and was:
            gc.enable()


def on_fresh_stack(f: Callable[..., None], *args: object) -> None:
    """``f(*args)``, from a frame too big for any frame-stack chunk CPython has in use (a 64 KiB chunk of
    its own, ~17 KiB of it free after the frame, even when this call nests). CPython keeps frames in
    chunks of 16 KiB and frees a chunk when the first frame in it returns, so every call made right at a
    chunk's end maps a chunk and unmaps it again (two system calls and page faults): at some stack
    depths, where Inductor calls a pass, that made the import, extraction and serialization three to
    five times slower. Only where frames live changes."""
    f(*args)


on_fresh_stack.__code__ = on_fresh_stack.__code__.replace(co_stacksize=6000)  # slots of 8 bytes; see above


def _validate(options: Options) -> None:
    if options.extractor not in EXTRACTORS:
        raise EqSatInputError(f"unknown extractor {options.extractor!r}; choose one of {sorted(EXTRACTORS)}")
    if options.emit not in ("if_faster", "always"):
        raise EqSatInputError(f"emit must be 'if_faster' or 'always', got {options.emit!r}")
    if options.symbolic not in ("guard", "prove"):
        raise EqSatInputError(f"symbolic must be 'guard' or 'prove', got {options.symbolic!r}")
    if options.numerics not in ("exact", "rounding"):
        raise EqSatInputError(f"numerics must be 'exact' or 'rounding', got {options.numerics!r}")
    if options.budgets.scheduler not in saturate.SCHEDULES:
        raise EqSatInputError(f"budgets.scheduler must be one of {sorted(saturate.SCHEDULES)}")
    try:
        load_profile(options.profile)
    except ValueError as exc:
        raise EqSatInputError(str(exc)) from None


def optimize(graph_module: fx.GraphModule | fx.Graph, options: Options | None = None, *,
             engine: load.Engine | None = None, recompile: bool = True, **overrides: object) -> Report:
    """Rewrite ``graph_module`` in place with the cheapest equivalent graph; return the report.

    ``engine`` (optional) is a prepared e-graph with the rules declared, reused across calls (an
    ``EqSatPass`` keeps one); it must have been made from the same catalog and rules. A changed
    graph's owning ``GraphModule`` is recompiled unless ``recompile=False`` (a compiler pass: Inductor
    recompiles the module after its post-grad passes)."""
    options = replace(options or Options(), **overrides) if overrides else options or Options()  # frozen: shared
    _validate(options)
    graph = fx_in.graph_of(graph_module)
    report = Report()
    stage = _Stages(report)
    root = dump.dump_root(options.dump_dir)
    dumper = dump.opened(root, graph) if root else None
    try:
        with gc_paused(options.pause_gc):
            guarded(on_fresh_stack, _pipeline, graph, options, engine, report, stage, dumper, recompile)
    except EqSatInputError:
        raise
    except Exception as exc:
        report.error = f"{stage.current}: {type(exc).__name__}: {exc}"
        if isinstance(exc, BudgetExceeded):
            report.stop_reason = "time_limit"
        if options.strict:
            if isinstance(exc, EqSatInternalError):
                raise
            raise EqSatInternalError(stage.current, exc) from exc
        log.warning("eqsat: %s failed (%s); graph left unchanged", stage.current, described(exc))
    if dumper is not None:
        dump.safely("the result", dumper.finish, graph, report)
    return report


def on_gpu(graph: fx.Graph) -> bool:
    """Whether the graph's inputs live on a GPU (CUDA or ROCm), by their fake values."""
    for node in graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.device.type == "cuda":
            return True
    return False


def runtime_floats(graph: fx.Graph) -> list[str]:
    """The graph's inputs that are a Python float made a 0-d float64 tensor (Dynamo's unspecialized
    floats, under ``torch.compile(dynamic=True)``): a value like an RMSNorm's eps is then known only at
    run time, and no rule that needs it as a constant matches."""
    return [n.name for n in graph.find_nodes(op="placeholder")
            if isinstance(v := n.meta.get("val"), torch.Tensor) and v.dim() == 0 and v.dtype == torch.float64]


def _pipeline(graph: fx.Graph, options: Options, engine: load.Engine | None, report: Report, stage: _Stages,
              dumper: dump.Dump | None, recompile: bool) -> None:
    report.runtime_floats = runtime_floats(graph)
    vocab = engine.vocab_index(options.vocabularies) if engine is not None else VocabIndex(options.vocabularies)
    deadline = saturate.Deadline.after(options.budgets.seconds)
    with stage("import"):
        imported = fx_in.import_graph(graph, options.catalog, vocab, lambda: deadline.check("import"))
    dims = SymbolicDims(imported.shape_env, options.symbolic)
    dims.specialize(imported.facts)
    imported.facts_exact = imported.facts_exact and not dims.specialized
    report.imported_terms = sum(op != LEAF for op, _ in imported.terms.values())
    report.opaque_nodes = len(imported.opaque)
    if not imported.roots:
        return
    with stage("prepare"):
        rules = options.active_rules()
        if engine is None:
            engine = load.Engine(options.catalog, rules)
        elif not engine.serves(options.catalog, rules):
            raise ValueError("the engine was prepared for other rules or another catalog")
        copies = repeats.find(imported) if options.repeats and engine.separable else repeats.NONE
        loaded = copies.reduced(imported)  # the graph less the copies of a repeated component
        report.copied_nodes = copies.copied_nodes
        deadline.require("load", len(loaded.terms) * LOAD_SECONDS_PER_TERM)
        report.rules_reachable = len(engine.declare_for(loaded, on_demand=True))
    with engine.scope() as egraph:
        with stage("load"):
            engine.load(loaded)
        with stage("saturate"):
            sat = saturate.saturate(egraph, options.budgets, deadline, engine.size_bound(loaded), engine.parsed,
                                    engine.grow, ruleset=engine.ruleset, chains=engine.chains)
        report.rules_fired, report.stop_reason, report.iterations = sat.matches, sat.stop_reason, sat.iterations
        deadline.check("saturate")
        with stage("serialize"):
            ser = serialize.serialize(egraph, engine.extractable, loaded.terms, loaded.roots, engine.facts)
            ser, copied = copies.expand(ser, imported.roots)
        if dumper is not None:
            dump.safely("the e-graph", dumper.egglog_dot, egraph, len(ser.egraph.nodes))
    if options.strict:  # tests: a table the clear ruleset missed would leak rows into the next graph
        engine.check_empty()
    eg: EGraph = ser.egraph
    report.egraph_nodes, report.egraph_classes = len(eg.nodes), len(eg.classes)
    deadline.check("serialize")
    with stage("extract"):  # the cost model's set-up, its weights and the range's totals count as extraction's
        profile = load_profile(options.profile)
        fixed, read_by_op = (frozenset(ser.class_of_node[j] for j in values if j in ser.class_of_node)
                             for values in (imported.fixed_layout, imported.read_by_opaque()))
        hinted = dims.named_hints()
        cost = RooflineCost(eg, options.catalog, profile, options.sizes, engine.cost_memo(profile, options.sizes),
                            fixed, hinted, read_by_op)
        before = decision.before_selection(ser)
        if len(cost.points) > 1:  # a compile range: each size counts by its ratio to the unchanged graph's time
            cost.weigh(cost.point_totals(eg.nodes[before[c]] for c in reachable(eg, before)))
    gpu_kernels = not (on_gpu(graph) and torch.cuda.is_available()) or aiter.installed()
    banned: list[int] = []

    def admissible_now() -> Admissible:  # the cost at its weights now, with the sites dropped so far
        return Admissible(cost, eg, options.catalog, vocab, imported.vocabularies, ser.enode_of_node.values(),
                          imported.shape_args, banned, engine.admissible, dims, platform=profile.platform,
                          gpu_kernels=gpu_kernels, standalone_lifts=options.standalone_lifts,
                          measured=profile.kernels)

    extractor = EXTRACTORS[options.extractor]
    while True:  # each site emit cannot write is dropped, and the rest extracted again without it
        with stage("extract"):
            admissible = admissible_now()
            # a site dropped in one copy of a component is not dropped in the others: extract on every copy
            extract = copied.on_models(extractor) if not banned else extractor
            selection = extract(eg, admissible)
            reached = check(eg, selection)
            if not banned:
                before = decision.inductor_alone(eg, ser, imported, admissible, before, options.catalog, extract)
                before_reached = reachable(eg, before)
            report.predicted_before_us = dag_cost(eg, before, admissible, before_reached)
            report.predicted_after_us = dag_cost(eg, selection, admissible, reached)
        if dumper is not None and not banned:
            dump.safely("the fusions", dumper.fusions, eg, selection, options.catalog)
        native = set(imported.vocabularies) <= {"aten"}
        margin = decision.margin_us(native, report.predicted_before_us)
        faster = report.predicted_after_us < report.predicted_before_us - margin
        with stage("extract"):
            was = cost.point_totals(eg.nodes[before[c]] for c in before_reached)
            after = cost.point_totals(eg.nodes[selection[c]] for c in reached)
        slower = decision.slower_at(cost.points, was, after) if faster and len(cost.points) > 1 else None
        if slower is not None and options.emit != "always":  # "always" writes the range's own extraction
            with stage("extract"):
                found, tries = decision.no_slower(cost, eg, was, after, margin, admissible_now, extract)
            report.range_search = "the range's extraction was slower at size {} ({:.2f} against {:.2f} us); ".format(
                *slower) + (f"{tries} more, the sizes each lost at weighed {decision.REWEIGHT:g}x up, found "
                            + (decision.RANGE_FOUND if found is not None else "none both slower at none and faster"))
            if found is not None:
                selection, reached, after, admissible = found
                report.predicted_after_us = decision.weighted(cost.weights, after)
                slower = None
        if slower is not None:
            faster = False  # one graph runs at every size of the range: it must not lose at any
            report.declined = "predicted slower at size {} ({:.2f} against {:.2f} us)".format(*slower)
        elif faster and native and decision.only_twins(eg, selection, ser, options.catalog):
            faster = False  # in a native graph a twin is Inductor's code for the chain the graph already holds
            report.declined = "its only new kernels are Inductor's own code for the chains (twins)"
        elif not faster and report.predicted_after_us < report.predicted_before_us - decision.IMPROVEMENT_EPS_US:
            report.declined = (f"predicted saving {report.predicted_saving_us:.2f} us is below the native graph's "
                               f"margin {margin:.2f} us (the cost model's error)")
        written = faster or options.emit == "always"
        report.predicted_at = {decision.point_key(p): (b, a if written else b)
                               for p, b, a in zip(cost.points, was, after, strict=True)}
        if not written:
            report.predicted_after_us = report.predicted_before_us
            return
        report.declined = ""
        if len(cost.points) > 1:
            report.within_error = decision.within_error(cost.points, was, after)
        deadline.check("extract")
        with stage("emit"):
            try:
                result = fx_out.emit(imported, eg, selection, ser.class_of_node, ser.enode_of_node, options.catalog,
                                     vocab, lambda: deadline.check("emit"), engine.layouts, admissible.spelling,
                                     engine.traces)
            except fx_out.SiteError as exc:
                if options.strict or exc.enode in banned or len(banned) >= MAX_DROPPED_SITES:
                    raise
                banned.append(exc.enode)
                report.dropped.append(str(exc))
                log.warning("eqsat: dropped the site %s; extracting the rest again", exc)
                continue
            owner = imported.graph.owning_module
            if recompile and result.changed and isinstance(owner, fx.GraphModule):
                owner.recompile()
        break
    if result.changed:  # the shape guards the written rewrites rely on (eqsat.fx.symbolic)
        new = set(selection.values()) - set(ser.enode_of_node.values())
        guards = {g for i in new for g in admissible.guards(eg.nodes[i])}
        if dims.specialized:
            guards |= dims.guards_for(symbols_read(result.created + result.adopted))
        dims.commit(guards)
        report.guards = list(dims.committed)
    report.changed = result.changed
    report.kernels_chosen = Counter(result.kernels)
