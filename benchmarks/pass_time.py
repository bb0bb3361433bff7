"""Pass time and fusions found on model-shaped graphs: eqsat against Inductor's pattern matcher.

    python -m benchmarks.pass_time            # full run, writes results/pass_time.md, the plots, profile_61.txt
    python -m benchmarks.pass_time --quick    # 3 runs, L = 1, 4, 8, prints only (add --write to write)

Per graph of ``benchmarks.graphs.models``:
- **fusions**: where each fp8 activation read by an opaque consumer (a GEMM, attention, the graph
  output) comes from after the pass (``fusion_sites``): a fused AITER op, Inductor's native chain
  (eqsat's "leave it to Inductor" rows), or still the unfused quant. Sites fused by one optimizer
  and not by the other are listed by name.
- **pass time**: eqsat is ``eqsat.optimize(copy, options, engine=engine, recompile=False)`` with the
  engine an ``EqSatPass`` keeps, one per graph here (a process compiles one model's graphs: the engine
  has declared the rules that model's graphs can fire; no recompile, as in the pass: Inductor
  recompiles after its post-grad passes, and the baseline does not either); the baseline is
  ``PatternMatcherBaseline.apply(copy)`` (patterns registered once per process). Each timed run gets
  a fresh copy of the graph, made and garbage-collected outside the timed region (inside it, both
  run with Python's cyclic GC paused: eqsat's ``Options.pause_gc``, the baseline wrapped alike), after untimed
  warm-up runs; the two optimizers' runs alternate; the median of at least 10 runs (3 with
  ``--quick``) is reported.
- the one-off costs: eqsat's first ``Engine`` declaring the schema and the rules the graph can fire
  (``Engine.declare_for``), and the baseline registering its 33 patterns (what vLLM registers for this
  family on an MI300); "incl. one-off" speedups add each to its optimizer's per-graph time.
- e-graph size and predicted time before / after (eqsat's report; profile mi300x, sizes 256).
- where eqsat's time goes beyond its own code (``benchmarks.time_split``): egglog's calls, and torch
  computing the fake values of the nodes each pass writes.

Scaling: DeepSeek-V3 with L = 1, 4, 16, 61 layers, both optimizers, a least-squares line through
eqsat's times, the work of one run of each size counted as its Python calls (``counted_work``: the
same in every run, where the times of the biggest graph move with the machine's cache state), the
per-stage split (``Report.stage_ms``) and a cProfile of one 61-layer run.
Budgets are raised to 120 s so every run finishes and its time is the time it takes; how the
default 5 s budget fares on 61 layers is run and reported separately.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch.fx as fx
from eqsat.rewrites.schedule import default_rules

import eqsat
from benchmarks.baseline.pattern_matcher import PatternMatcherBaseline
from benchmarks.graphs import models
from benchmarks.pass_time_report import Row, Timing, plot, plot_graphs, render
from benchmarks.sites import fused_op, fusion_sites
from benchmarks.time_split import split
from eqsat.api import gc_paused
from eqsat.core.spelling import VocabIndex
from eqsat.engine.engine import Engine
from eqsat.fx.capture import copy_graph
from eqsat.fx.importer import Imported, import_graph

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
OPTIONS = eqsat.Options(profile="mi300x", sizes=256, budgets=eqsat.Budgets(seconds=120.0))
LAYERS = (1, 4, 16, 61)
QUICK_LAYERS = (1, 4, 8)


# -- timing -------------------------------------------------------------------------------------------


def timed_runs(gm: fx.GraphModule, runners: Sequence[Callable[[fx.GraphModule], object]],
               runs: int) -> list[tuple[Timing, object, fx.GraphModule]]:
    """Times of each runner on fresh copies of ``gm``, interleaved (a, b, a, b, ...: a burst of noise
    on a shared machine hits both alike), after warm-up runs (3, or 1 for a graph that takes over
    0.5 s): ``runs`` rounds, or more (up to 5x) while a round (two runs of each) fits in ~2 s (steadier medians for
    small graphs). A round times each runner twice: *cold*, right after a full ``gc.collect()`` (the
    collector walks the whole heap and leaves the CPU caches cold: every eqsat stage, egglog's
    included, ran ~1.4x slower after one on a small graph), and *warm*, after the other runner's
    run with no collection in between (as a pass runs after the compiler's other passes; the
    collector then runs when its thresholds say, outside the timed region or at its end). Per
    runner: its timing, the result of its median warm run, and its last copy."""
    warm = []
    for run in runners:
        start = time.perf_counter()
        run(copy_graph(gm))
        warm.append((time.perf_counter() - start) * 1e3)
        for _ in range(2 if warm[-1] < 500 else 0):
            run(copy_graph(gm))
    timings = [Timing([], []) for _ in runners]
    results: list[list[object]] = [[] for _ in runners]
    outs = [gm for _ in runners]
    for _ in range(max(runs, min(5 * runs, int(1000 / max(max(warm), 1e-3))))):
        for cold in (True, False):
            for k, run in enumerate(runners):
                outs[k] = copy_graph(gm)
                if cold:
                    gc.collect()
                wall, cpu = time.perf_counter(), time.process_time()
                result = run(outs[k])
                cpu_ms, wall_ms = (time.process_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3
                if cold:
                    timings[k].cold_ms.append(wall_ms)
                else:
                    timings[k].cpu_ms.append(cpu_ms)
                    timings[k].wall_ms.append(wall_ms)
                    results[k].append(result)
    out = []
    for timing, res, last in zip(timings, results, outs, strict=True):
        median_run = sorted(range(len(res)), key=timing.wall_ms.__getitem__)[len(res) // 2]
        timing.kept_ms = timing.wall_ms[median_run]
        out.append((timing, res[median_run], last))
    return out


def _declared(imported: Imported) -> Engine:
    engine = Engine(OPTIONS.catalog, default_rules(OPTIONS.catalog, OPTIONS.numerics))
    engine.declare_for(imported)
    return engine


class BaselineRaised(RuntimeError):
    """The baseline raised on a graph (a fused op's fake refusing a match vLLM's pattern makes)."""


class Bench:
    def __init__(self, runs: int) -> None:
        self.runs = runs
        self.rules = default_rules(OPTIONS.catalog, OPTIONS.numerics)
        times = []
        for _ in range(3):  # for reference: a fresh engine declaring every rule of every family
            start = time.perf_counter()
            engine = Engine(OPTIONS.catalog, self.rules)
            engine.declare(engine.rules)
            times.append((time.perf_counter() - start) * 1e3)
        self.declare_all_ms = statistics.median(times)
        self.pass_ = eqsat.EqSatPass(OPTIONS)  # the engine a pass keeps is made the same way
        self.baseline = PatternMatcherBaseline()
        self.register_ms = self.baseline.registration_s * 1e3

    @staticmethod
    def engine_for(gm: fx.GraphModule) -> Engine:
        """A fresh engine that has declared what ``gm`` can fire."""
        return _declared(import_graph(copy_graph(gm), OPTIONS.catalog, VocabIndex(OPTIONS.vocabularies)))

    @staticmethod
    def one_offs(gm: fx.GraphModule, tries: int = 3) -> tuple[Engine, list[float], list[float]]:
        """The ms each of ``tries`` fresh engines took to declare what ``gm`` can fire (the import that
        tells it what the graph holds is per-graph work, outside the timer), and the ms each of as many
        fresh baselines took to register, interleaved with them (a slow spell hits both); the last engine."""
        imported = import_graph(copy_graph(gm), OPTIONS.catalog, VocabIndex(OPTIONS.vocabularies))
        declare, register = [], []
        for _ in range(tries):
            gc.collect()
            start = time.perf_counter()
            engine = _declared(imported)
            declare.append((time.perf_counter() - start) * 1e3)
            gc.collect()
            register.append(PatternMatcherBaseline().registration_s * 1e3)
        return engine, declare, register

    def baseline_run(self, gm: fx.GraphModule) -> int:
        """The baseline with Python's cyclic GC paused, as eqsat's ``Options.pause_gc`` runs (fair to both);
        :class:`BaselineRaised` where vLLM's passes would break the compile."""
        with gc_paused():
            try:
                return self.baseline.apply(gm)
            except Exception as exc:
                raise BaselineRaised(f"{type(exc).__name__}: {exc}") from exc

    def eqsat(self, engine: Engine) -> Callable[[fx.GraphModule], eqsat.Report]:
        return lambda gm: eqsat.optimize(gm, self.pass_.options, engine=engine, recompile=False)  # as the pass runs

    def row(self, name: str, build: Callable[[], fx.GraphModule], runs: int | None = None,
            time_split: bool = True) -> Row:
        """One graph's row; ``time_split=False`` skips ``benchmarks.time_split`` (the report shows it for
        the per-graph rows only: on 61 layers it would re-run the baseline and re-time its ~1,300 nodes)."""
        runs = runs or self.runs
        start = time.perf_counter()
        gm = build()
        build_ms = (time.perf_counter() - start) * 1e3
        engine, declare, register = self.one_offs(gm)
        (eq_t, report, eq_gm), (pm_t, count, pm_gm) = timed_runs(gm, (self.eqsat(engine), self.baseline_run), runs)
        kernels = Counter(k for k in map(fused_op, pm_gm.graph.nodes) if k)
        parts = split(gm, engine, self.eqsat(engine), self.baseline_run, runs=max(runs, 15)) if time_split else None
        return Row(name, len(gm.graph.nodes), build_ms, eq_t, pm_t, report, fusion_sites(eq_gm),
                   fusion_sites(pm_gm), count, statistics.median(declare), statistics.median(register), kernels,
                   parts)


def interleaved(bench: Bench, layers: Sequence[int], rounds: int) -> dict[int, float]:
    """eqsat's median ms on DeepSeek-V3 with each of ``layers`` layers, from ``rounds`` rounds that each
    time every size once (warm engines, fresh copies, the order reversed every other round): the
    machine's slow spells, which last seconds to minutes, then hit every size alike, so the shape of
    the curve (is it linear?) is not the shape of the noise."""
    graphs = {n: models.deepseek_v3(n) for n in layers}
    runs = {n: bench.eqsat(bench.engine_for(gm)) for n, gm in graphs.items()}
    for n, gm in graphs.items():
        runs[n](copy_graph(gm))
    times: dict[int, list[float]] = {n: [] for n in layers}
    for k in range(rounds):
        for n in (layers if k % 2 else reversed(layers)):
            g = copy_graph(graphs[n])
            start = time.perf_counter()
            runs[n](g)
            times[n].append((time.perf_counter() - start) * 1e3)
    return {n: statistics.median(t) for n, t in times.items()}


def _profiled(bench: Bench, gm: fx.GraphModule, stream: io.StringIO | None = None) -> tuple[eqsat.Report, pstats.Stats]:
    """One eqsat run on a fresh copy of ``gm`` under cProfile, with a warm engine (made and run once
    before): its report and its profile (printing to ``stream``)."""
    run = bench.eqsat(bench.engine_for(gm))
    run(copy_graph(gm))
    c = copy_graph(gm)
    gc.collect()
    prof = cProfile.Profile()
    prof.enable()
    report = run(c)
    prof.disable()
    return report, pstats.Stats(prof, stream=stream)


def counted_work(bench: Bench, layers: Sequence[int]) -> dict[int, int]:
    """The Python function calls (cProfile's count, builtins included) of one eqsat run on DeepSeek-V3
    with each of ``layers`` layers, after a warm-up run: a measure of the work done that, unlike a
    time, no other process and no cache state changes (two runs of one graph count the same calls)."""
    return {n: _profiled(bench, models.deepseek_v3(n))[1].total_calls for n in layers}  # type: ignore[attr-defined]


# -- the report ---------------------------------------------------------------------------------------


def profile_run(bench: Bench, gm: fx.GraphModule, layers: int, path: Path | None) -> tuple[eqsat.Report,
                                                                                            list[str]]:
    """One eqsat run (after a warm-up run) under cProfile: its report and the top functions by own
    time (markdown rows); writes the top 25 by cumulative and by own time to ``path``."""
    out = io.StringIO()
    report, stats = _profiled(bench, gm, out)
    stats.sort_stats("cumulative").print_stats(25)
    stats.sort_stats("tottime").print_stats(25)
    if path is not None:
        path.write_text(f"# cProfile of one eqsat.optimize on DeepSeek-V3, {layers} layers (warm engine); "
                        f"written by python -m benchmarks.pass_time\n# {report.summary()}\n# stage_ms: "
                        f"{ {k: round(v, 1) for k, v in report.stage_ms.items()} }\n\n{out.getvalue()}")
    rows = []
    entries = stats.stats  # type: ignore[attr-defined]
    for (file, line, func), (_, calls, own, cum, _) in sorted(entries.items(), key=lambda kv: -kv[1][2])[:12]:
        where = "/".join(Path(file).parts[-2:]) if file != "~" else "builtin"
        rows.append(f"| `{func}` ({where}:{line}) | {calls} | {own * 1e3:.0f} | {cum * 1e3:.0f} |")
    return report, rows


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pass_time", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 timed runs a graph, L = 1, 4, 8 (a smoke run); writes nothing unless --write")
    parser.add_argument("--write", action="store_true", help="write the results with --quick too")
    args = parser.parse_args(list(argv))
    quick = args.quick
    write = args.write or not quick
    layers = QUICK_LAYERS if quick else LAYERS
    command = "python -m benchmarks.pass_time" + (" --quick" if quick else "")
    load = os.getloadavg()
    bench = Bench(runs=3 if quick else 10)
    rows, raised = [], []
    for name, build in models.GRAPHS.items():
        try:
            rows.append(bench.row(name, build))
        except BaselineRaised as exc:  # vLLM's pattern matches, its fused op's fake refuses the match
            raised.append((name, str(exc)))
    scaling = [rows[0] if n == 1 else bench.row(f"deepseek_v3 ({n} layers)", lambda n=n: models.deepseek_v3(n),
                                                  time_split=False)
               for n in layers]
    big = models.deepseek_v3(max(layers))
    profiled = profile_run(bench, big, max(layers), RESULTS / "profile_61.txt" if write and 61 in layers else None)
    default_budget = eqsat.optimize(copy_graph(big), replace(OPTIONS, budgets=eqsat.Budgets()),
                                    engine=bench.engine_for(big))
    curve = interleaved(bench, layers, rounds=5 if quick else 15)
    work = counted_work(bench, layers)
    text = render(bench, rows, scaling, layers, command, profiled, default_budget, load, curve, work, raised) + "\n"
    print(text)
    if write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "pass_time.md").write_text(text)
        plot(scaling, layers, RESULTS / "pass_time.png", curve)
        plot_graphs(rows, RESULTS / "pass_time_graphs.png")
        print(f"written to {RESULTS}/pass_time.md, pass_time.png, pass_time_graphs.png"
              + (", profile_61.txt" if 61 in layers else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
