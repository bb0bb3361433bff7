"""The pass-time report: the markdown tables, the verdicts on the targets and the plot, from the rows
``benchmarks.pass_time`` measured (its module docstring says how). Nothing here times anything.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

import eqsat
from benchmarks.sites import fused

if TYPE_CHECKING:
    from benchmarks.pass_time import Bench
    from benchmarks.time_split import Split

HERE = Path(__file__).resolve().parent
TARGET_LAYER_MS, TARGET_61_S, TARGET_SPEEDUP = 30.0, 2.0, 10.0


@dataclass
class Timing:
    wall_ms: list[float]  # warm: no collection right before the run
    cpu_ms: list[float]  # this process's CPU time over the warm runs: less sensitive to other processes
    cold_ms: list[float] = field(default_factory=list)  # wall, right after a full gc.collect()
    kept_ms: float = 0.0  # wall of the median warm run, whose result (report) is kept

    @property
    def warm(self) -> float:
        return statistics.median(self.wall_ms)

    @property
    def cold(self) -> float:
        return statistics.median(self.cold_ms)


@dataclass
class Row:
    name: str
    nodes: int
    build_ms: float
    eq_t: Timing
    pm_t: Timing
    report: eqsat.Report
    eq_sites: dict[str, str]
    pm_sites: dict[str, str]
    pm_replacements: int
    declare_ms: float  # eqsat's one-off: a fresh engine declaring what this graph can fire
    register_ms: float  # the baseline's one-off: a fresh instance registering its patterns
    pm_kernels: Counter[str] = field(default_factory=Counter)
    split: Split | None = None  # where the time goes beyond eqsat's own code (benchmarks.time_split)

    @property
    def eq(self) -> float:
        return self.eq_t.warm

    @property
    def pm(self) -> float:
        return self.pm_t.warm

    def round_speedups(self) -> list[float]:
        """The baseline's warm ms over eqsat's in each round (the two warm runs of a round ran back to
        back, so a slow spell of the machine hits both)."""
        return [p / e for p, e in zip(self.pm_t.wall_ms, self.eq_t.wall_ms, strict=True)]


def spread(speedups: Sequence[float], target: float = TARGET_SPEEDUP) -> str:
    """The quartiles of per-round speedups and the share of rounds at ``target`` or more: how far a
    median speedup near the target is from it, on a noisy machine."""
    if len(speedups) < 2:
        return f"{len(speedups)} round(s)"
    q1, _, q3 = statistics.quantiles(speedups, n=4)
    share = sum(x >= target for x in speedups) / len(speedups)
    return f"per round {q1:.2f}–{q3:.2f}x between quartiles, {share:.0%} of {len(speedups)} rounds at {target:g}x or more"


def _kernels(c: Counter[str]) -> str:
    return ", ".join(f"{k} x{n}" for k, n in sorted(c.items())) or "—"


def _cpu(t: Timing) -> str:
    return f"{statistics.median(t.cpu_ms):.1f}"


def _sites(sites: dict[str, str]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in sorted(sites.items())) or "—"


def _eqsat_kernels(report: eqsat.Report) -> str:
    if report.kernels_chosen:
        return _kernels(report.kernels_chosen)
    if any(rule.startswith("fuse-") for rule in report.rules_fired):
        return "none (fuse rules matched; the extraction kept the graph)"
    return "none (no fuse rule matched: no catalog kernel applies)"


def graph_table(rows: Sequence[Row], bench: Bench) -> list[str]:
    lines = [
        "| graph | FX nodes | fp8 quant sites fused: eqsat / baseline / all | eqsat kernels | baseline replacements: "
        "fused ops after | eqsat ms: warm (cold) | baseline ms: warm (cold) | speedup: warm (cold) "
        "| eqsat one-off ms (rules) "
        "| baseline one-off ms "
        "| speedup incl. one-off | e-graph nodes / classes | predicted µs before → after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        incl = (r.register_ms + r.pm) / (r.declare_ms + r.eq)
        lines.append(
            f"| {r.name} | {r.nodes} | {len(fused(r.eq_sites))} / {len(fused(r.pm_sites))} / {len(r.eq_sites)} "
            f"| {_eqsat_kernels(r.report)} | {r.pm_replacements}: {_kernels(r.pm_kernels)} "
            f"| {r.eq:.1f} ({r.eq_t.cold:.1f}) | {r.pm:.1f} ({r.pm_t.cold:.1f}) "
            f"| {r.pm / r.eq:.2f}x ({r.pm_t.cold / r.eq_t.cold:.2f}x) "
            f"| {r.declare_ms:.1f} ({r.report.rules_reachable}) | {r.register_ms:.0f} | {incl:.2f}x "
            f"| {r.report.egraph_nodes} / {r.report.egraph_classes} "
            f"| {r.report.predicted_before_us:.1f} → {r.report.predicted_after_us:.1f} |")
    return lines


def split_table(rows: Sequence[Row]) -> list[str]:
    """eqsat's time split into egglog, torch's fake values and its own Python, beside the baseline's
    fake values and the time a 10x speedup leaves eqsat; then, for each graph over that time, the
    shares of egglog and torch, and of eqsat's own code, in the split's own runs (the split and the
    timed runs are different runs: on a noisy machine they can differ by a third)."""
    lines = ["| graph | eqsat ms | egglog | torch fake values (nodes) | eqsat's Python | baseline ms "
             "| baseline's torch fake values (nodes) | eqsat ms for 10x |", "|---|---|---|---|---|---|---|---|"]
    short = []
    for r in rows:
        s = r.split
        if s is None:
            continue
        budget = r.pm / TARGET_SPEEDUP
        lines.append(f"| {r.name} | {s.eqsat_ms:.2f} | {s.egglog_ms:.2f} | {s.eqsat_fake_ms:.2f} ({s.eqsat_written}) "
                     f"| {s.python_ms:.2f} | {r.pm:.1f} | {s.baseline_fake_ms:.2f} ({s.baseline_written}) "
                     f"| {budget:.2f} |")
        if r.pm_replacements and r.eq > budget:
            floor = s.egglog_ms + s.eqsat_fake_ms
            short.append(f"- **{r.name}**: {r.eq:.2f} ms (timed runs) against the {budget:.2f} ms a 10x speedup "
                         f"allows; of the split's median run ({s.eqsat_ms:.2f} ms, back to back), egglog and torch's "
                         f"fake values took {floor:.2f} ms ({floor / s.eqsat_ms:.0%}) and eqsat's own code "
                         f"{s.python_ms:.2f} ms ({s.python_ms / s.eqsat_ms:.0%}).")
    return [*lines, *([""] + short if short else [])]


def stage_table(rows: Sequence[Row]) -> list[str]:
    stages = list(dict.fromkeys(k for r in rows for k in r.report.stage_ms))
    lines = ["| graph | " + " | ".join(stages) + " | other | total |", "|---" * (len(stages) + 3) + "|"]
    for r in rows:
        other = r.eq_t.kept_ms - r.report.total_ms
        lines.append(f"| {r.name} | " + " | ".join(f"{r.report.stage_ms.get(k, 0.0):.2f}" for k in stages)
                     + f" | {other:.2f} | {r.eq_t.kept_ms:.2f} |")
    return lines


def differences(rows: Sequence[Row]) -> list[str]:
    lines = []
    for r in rows:
        eq, pm = fused(r.eq_sites), fused(r.pm_sites)
        missed_pm = {k: v for k, v in eq.items() if k not in pm}
        missed_eq = {k: v for k, v in pm.items() if k not in eq}
        other = {k: f"eqsat {eq[k]}, baseline {pm[k]}" for k in eq.keys() & pm.keys() if eq[k] != pm[k]}
        if missed_pm or missed_eq or other:
            lines.append(f"- **{r.name}**: baseline misses {_sites(missed_pm)}; eqsat misses {_sites(missed_eq)}"
                         + (f"; different kernel: {_sites(other)}" if other else ""))
    return lines or ["- none: both fuse exactly the same sites on every graph"]


def fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares ``y = a + b x``: (a, b, R²)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return a, b, 1 - ss_res / ss_tot if ss_tot else 1.0


def marginals(xs: Sequence[int], ys: Sequence[float], mid: int) -> tuple[float, float]:
    """The slope of ``ys`` from the first point to point ``mid``, and from ``mid`` to the last."""
    return (ys[mid] - ys[0]) / (xs[mid] - xs[0]), (ys[-1] - ys[mid]) / (xs[-1] - xs[mid])


def plot(scaling: Sequence[Row], layers: Sequence[int], path: Path, curve: dict[int, float]) -> None:
    """eqsat's interleaved medians and the baseline's, against L, with their least-squares lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, ys, color in (("eqsat", [curve[n] for n in layers], "C0"),
                             ("pattern matcher", [r.pm for r in scaling], "C3")):
        secs = [y / 1e3 for y in ys]
        a, b, r2 = fit(layers, secs)
        ax.plot(layers, secs, "o", color=color, label=f"{label}: {b * 1e3:.1f} ms/layer {a * 1e3:+.0f} ms, R²={r2:.3f}")
        ax.plot([0, max(layers)], [a, a + b * max(layers)], "-", color=color, alpha=0.5)
        ax.plot(layers, secs, ":", color=color, alpha=0.6, lw=1)
    ax.axhline(TARGET_61_S, color="grey", ls="--", lw=1, label=f"target: {TARGET_61_S:g} s at 61 layers")
    ax.set_xlabel("DeepSeek-V3 decoder layers in the graph (L)")
    ax.set_ylabel("pass time, median (s)")
    ax.set_title("Pass time against graph size (post-grad graph, one CPU process)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_graphs(rows: Sequence[Row], path: Path) -> None:
    """Per graph, eqsat's time split (egglog, torch's fake values, its own Python; the split's median
    run) beside the time a 10x speedup over the baseline allows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.split is not None]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(shown) + 2.2))
    ys = range(len(shown))
    left = [0.0] * len(shown)
    for label, part, color in (("egglog", "egglog_ms", "C2"), ("torch fake values", "eqsat_fake_ms", "C1"),
                               ("eqsat's Python", "python_ms", "C0")):
        widths = [getattr(r.split, part) for r in shown]
        ax.barh(ys, widths, left=left, color=color, label=label, height=0.6)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.plot([r.pm / TARGET_SPEEDUP for r in shown], ys, "k|", markersize=18, mew=2,
            label=f"baseline / {TARGET_SPEEDUP:g} (the time a {TARGET_SPEEDUP:g}x speedup allows)")
    ax.set_yticks(list(ys), [r.name for r in shown], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per graph")
    ax.set_title("Where eqsat's time goes on each graph")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if os.environ.get("BENCH_REVISION"):  # a run from an export of a commit (no .git there)
        rev, dirty = os.environ["BENCH_REVISION"], ""
    else:
        rev, dirty = _git_revision()
    from importlib import metadata
    return (f"{cpu}, {os.cpu_count()} CPUs; Python {platform.python_version()}, torch {torch.__version__}, "
            f"egglog {metadata.version('egglog')}; commit {rev}{' + uncommitted changes' if dirty else ''}")


def _git_revision() -> tuple[str, str]:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=HERE, check=False).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                text=True, cwd=HERE, check=False).stdout.splitlines()
        dirty = "\n".join(line for line in status if "benchmarks/results/" not in line)  # this run's output
    except OSError:
        rev, dirty = "", ""
    return rev or "?", dirty


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def render(bench: Bench, rows: Sequence[Row], scaling: Sequence[Row], layers: Sequence[int], command: str,
           profiled: tuple[eqsat.Report, list[str]], default_budget: eqsat.Report, load: tuple[float, ...],
           curve: dict[int, float], work: dict[int, int], raised: Sequence[tuple[str, str]] = ()) -> str:
    layer, top, big = rows[0], scaling[-1], max(layers)
    ys = [curve[n] for n in layers]  # the interleaved run: one slow spell does not bend the curve
    a, b, r2 = fit(layers, ys)
    pa, pb, pr2 = fit(layers, [r.pm for r in scaling])
    mid = layers.index(16) if 16 in layers[:-1] else len(layers) // 2
    low, high = marginals(layers, ys, mid)  # ms per layer
    calls_low, calls_high = marginals(layers, [work[n] for n in layers], mid)  # calls per layer
    missed = [r.name for r in rows if set(fused(r.pm_sites)) - set(fused(r.eq_sites))]
    fusing = [r for r in rows if r.pm_replacements]  # any fusion, norm + pad included
    slowest = min(fusing, key=lambda r: r.pm / r.eq)
    speedup = slowest.pm / slowest.eq
    slowest_cold = min(fusing, key=lambda r: r.pm_t.cold / r.eq_t.cold)
    speedup_cold = slowest_cold.pm_t.cold / slowest_cold.eq_t.cold
    incl = min((r.register_ms + r.pm) / (r.declare_ms + r.eq) for r in fusing)
    incl_all = min((r.register_ms + r.pm) / (bench.declare_all_ms + r.eq) for r in fusing)
    stages = list(top.report.stage_ms)
    prof_report, prof_rows = profiled
    return "\n".join([
        "# Pass time on model-shaped graphs: eqsat against Inductor's pattern matcher", "",
        f"Command: `{command}`. Machine: {machine()}. 1-minute load average {load[0]:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end (a load above 0 means other processes shared the CPUs).", "",
        "Graphs: `benchmarks/graphs/models.py`, each the graph `torch.compile(dynamic=True)` hands a post-grad "
        "pass on CPU (`benchmarks/graphs/compiled.py`: vLLM ops, weights a module's parameters, the token dim the "
        "one symbol, GEMM / attention / MoE as opaque stand-ins; the L-layer graphs copy one captured layer). "
        "Baseline: `benchmarks/baseline/pattern_matcher.py` "
        f"({bench.baseline.registrations} `register_replacement`s, what vLLM 0.33.0 registers for this family on an "
        "MI300 with the AITER fusions on and `quant_fp8` enabled, in its order, passes and tracing, each replacement "
        "the fused op eqsat would pick; vllm-facts §1.2 pattern numbers: "
        f"{bench.baseline.describe()}). eqsat: "
        "`eqsat.optimize(copy, options, engine=engine, recompile=False)` (as `EqSatPass` runs it: Inductor "
        "recompiles after its post-grad passes; the baseline does not recompile either) with a warm engine "
        "per graph (made and warmed before timing: a process compiles one model's graphs), "
        "profile mi300x, sizes 256. "
        f"Times: medians of {bench.runs} to {5 * bench.runs} runs of each kind (more for small graphs), each on a "
        "fresh copy of the graph made outside the timed region, after 3 warm-up runs (1 above 0.5 s), eqsat's and "
        "the baseline's runs alternating (a slow spell of the machine hits both); inside the timed region both "
        "run with Python's cyclic GC paused (eqsat through `Options.pause_gc`, the baseline wrapped the same "
        "way). *Warm* runs follow the other optimizer's run with no collection in between, as a pass follows "
        "the compiler's other passes; *cold* runs follow a full `gc.collect()`, which walks the whole heap "
        "(~400k objects here) and leaves the CPU caches cold: on the small graphs every eqsat stage, egglog's "
        "included, runs ~1.4x slower after one, while the baseline's time barely moves. CPU ms is the "
        "median CPU time of this process over the warm runs (less disturbed by other processes on a shared "
        "machine). A *site* is an fp8 activation read by a GEMM / attention / the "
        "graph output; it is fused when a fused kernel produces it (an AITER op, or eqsat's Inductor-native "
        "chain).", "",
        "## Targets", "",
        "| target | measured | |", "|---|---|---|",
        f"| ≤ {TARGET_LAYER_MS:g} ms per DeepSeek decoder-layer graph | {layer.eq:.1f} ms (CPU {_cpu(layer.eq_t)} ms) "
        f"| {verdict(layer.eq <= TARGET_LAYER_MS)} |",
        f"| linear in L, in wall-clock time | interleaved run ({', '.join(f'L={n}: {curve[n]:.1f} ms' for n in layers)}): "
        f"fit {b:.1f} ms/layer {a:+.1f} ms, R² {r2:.4f}; "
        f"marginal {low:.1f} ms/layer from L = {layers[0]} to {layers[mid]}, {high:.1f} from {layers[mid]} to {big} "
        f"| {verdict(high <= 1.25 * low)} (marginal cost grows ≤ 1.25x) |",
        f"| linear in L, in work done (Python calls, counted: no noise) | one run each "
        f"({', '.join(f'L={n}: {work[n]:,}' for n in layers)}): marginal {calls_low:,.0f} calls/layer from "
        f"L = {layers[0]} to {layers[mid]}, {calls_high:,.0f} from {layers[mid]} to {big} "
        f"| {verdict(calls_high <= 1.25 * calls_low)} (marginal work grows ≤ 1.25x) |",
        f"| ≤ {TARGET_61_S:g} s at 61 layers | {top.eq / 1e3:.2f} s (CPU {statistics.median(top.eq_t.cpu_ms) / 1e3:.2f} s) at {big} layers "
        f"| {verdict(top.eq / 1e3 <= TARGET_61_S) if big == 61 else 'not run'} |",
        f"| ≥ {TARGET_SPEEDUP:g}x faster than the baseline, per graph the baseline rewrites (warm runs) "
        f"| min {speedup:.2f}x ({slowest.name}; {spread(slowest.round_speedups())}) "
        f"| {verdict(speedup >= TARGET_SPEEDUP)} |",
        f"| the same, cold runs (after a full collection) | min {speedup_cold:.2f}x ({slowest_cold.name}) "
        f"| {verdict(speedup_cold >= TARGET_SPEEDUP)} |",
        f"| ≥ {TARGET_SPEEDUP:g}x with each one's one-off cost included | min {incl:.2f}x (declaring every rule "
        f"up front instead: min {incl_all:.2f}x) "
        f"| {verdict(incl >= TARGET_SPEEDUP)} |",
        f"| every fusion the baseline finds, eqsat finds | {'all' if not missed else 'missed on ' + ', '.join(missed)} "
        f"| {verdict(not missed)} |", "",
        "## Per graph", "",
        "One-off per process: eqsat's first `Engine` declares the schema and the rules the graph can fire "
        f"(column *eqsat one-off*, `Engine.declare_for`, median of 3 fresh engines; a fresh engine declaring all {len(bench.rules)} rules of every family takes "
        f"{bench.declare_all_ms:.0f} ms); the baseline registers its "
        f"{bench.baseline.registrations} patterns (vLLM's AITER passes for this family; with its CUDA-side "
        "RMSNormQuantFusionPass, which also runs on ROCm, vLLM registers about 100, vllm-facts §7) in "
        f"{bench.register_ms:.0f} ms the first time in this process (column *baseline one-off*: the median of 3 "
        "fresh registrations, interleaved with eqsat's). Fusions other than norm / activation + quant (e.g. norm + pad) show in "
        "the kernel columns only.", "",
        *graph_table(rows, bench), "",
        "Sites fused by one optimizer only, or by different kernels:", "", *differences(rows), "",
        *(["Graphs left out: the baseline raises on them (so would vLLM's passes, whose fused ops' fakes it "
           "uses), so nothing is timed against it:", "", *(f"- **{n}**: {e[:300]}" for n, e in raised), ""]
          if raised else []),
        "eqsat's time per stage on each graph (ms, `Report.stage_ms` of the median warm run; *other* is the "
        "rest of `optimize`: setting up, emptying the engine's tables after the graph, the collector's run "
        "when the pass ends):", "", *stage_table(rows), "",
        "Where eqsat's time goes beyond its own code (`benchmarks/time_split.py`, outside the timed runs): *egglog* "
        "is the time inside egglog's calls over the median of 15 or more runs with the engine's e-graph behind a "
        "stopwatch; *torch fake values* is the time torch takes to make the fake value (shape propagation with "
        "the token dim symbolic) of each node a pass wrote whose value is new, which either pass pays for the "
        "nodes it writes: for eqsat, timed in the same runs as it makes them (`eqsat/fx/fake_value.py`; it reuses "
        "an original node's value where a new node computes an old value and is no view, and makes a kernel's "
        "outputs from the layouts the kernel gave on inputs of the same layouts before, which the engine keeps "
        "across graphs as it keeps the declared rules); for the baseline, "
        "each such node's op dispatched again under the graph's fake mode (it then hits torch's fake-tensor "
        "cache: the least it costs); *eqsat's Python* is the rest. *eqsat ms for 10x* is the baseline's warm "
        "time over 10.", "", *split_table(rows), "",
        "![where the time goes](pass_time_graphs.png)", "",
        "## Scaling: DeepSeek-V3, L layers", "",
        "| L | FX nodes | build ms | eqsat ms: warm (cold) | CPU ms | ms / layer | baseline ms: warm (cold) "
        "| speedup: warm (cold) | eqsat fusions | baseline fusions | e-graph nodes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(f"| {n} | {r.nodes} | {r.build_ms:.0f} | {r.eq:.1f} ({r.eq_t.cold:.1f}) | {_cpu(r.eq_t)} "
          f"| {r.eq / n:.1f} | {r.pm:.1f} ({r.pm_t.cold:.1f}) | {r.pm / r.eq:.2f}x ({r.pm_t.cold / r.eq_t.cold:.2f}x) "
          f"| {len(fused(r.eq_sites))} | {len(fused(r.pm_sites))} | {r.report.egraph_nodes} |"
          for n, r in zip(layers, scaling, strict=True)), "",
        f"Least squares: eqsat {b:.1f} ms/layer {a:+.1f} ms (R² {r2:.4f}), on the medians of a separate run "
        "that interleaves the sizes (each round times every L once, so a slow spell of the machine hits all "
        "sizes alike; the rows above time each size in its own stretch of the run); baseline "
        f"{pb:.1f} ms/layer {pa:+.1f} ms (R² {pr2:.4f}), on the rows' warm wall-clock medians.", "",
        "![pass time against L](pass_time.png)", "",
        "eqsat's time per stage (ms, `Report.stage_ms` of the median run of each size):", "",
        "| L | " + " | ".join(stages) + " | total |", "|---" * (len(stages) + 2) + "|",
        *(f"| {n} | " + " | ".join(f"{r.report.stage_ms.get(k, 0.0):.1f}" for k in stages)
          + f" | {r.report.total_ms:.1f} |" for n, r in zip(layers, scaling, strict=True)), "",
        f"Share of the {big}-layer run: " + ", ".join(
            f"{k} {v / top.report.total_ms:.0%}" for k, v in sorted(top.report.stage_ms.items(), key=lambda kv: -kv[1])
            if v >= 0.01 * top.report.total_ms) + ".", "",
        f"## Where the time goes: one {big}-layer run under cProfile", "",
        f"{prof_report.summary()} (cProfile slows it down). Stages (ms): "
        + ", ".join(f"{k} {v:.0f}" for k, v in prof_report.stage_ms.items())
        + ". Functions by own time (top 25 by cumulative and by own time: `profile_61.txt`):", "",
        "| function | calls | own ms | cumulative ms |", "|---|---|---|---|", *prof_rows, "",
        f"With the default budget (`Budgets()`, {eqsat.Budgets().seconds:g} s) the {big}-layer graph gives: "
        f"{default_budget.summary()}.", "",
        "## Notes", "",
        "- On the small graphs no stage dominates (the per-graph stage table), and part of the time is not eqsat's "
        "code (the split table): egglog charges for every row inserted, matched and deleted and for every call, "
        "about 1 ms a graph even on the smallest; and where eqsat writes a node whose value no original node "
        "has (a view of a kernel's output, a kernel with no original of its shape), its fake value must be made "
        "with the token dim symbolic. `eqsat/fx/fake_value.py` makes a view that is a window of its base (a "
        "reshape of a contiguous tensor, a slice of step 1) as `as_strided` through a dispatch mode that runs "
        "only the meta kernel (~0.1 ms, where torch's fake mode takes 0.25-0.45 ms), runs other views "
        "through the fake mode with its cache off (its hits cost twice that), and makes a kernel's outputs "
        "from the layouts the kernel gave before on inputs of the same layouts (~0.35 ms an output; the first "
        "time, torch's dispatch: about 1.5 ms for a two-output kernel).",
        "- Load was the largest stage at f0df88b (egglog compiling one rule of a `let` per term: 47% of the "
        "61-layer run). Terms now enter as rows egglog reads with `input` (eqsat.engine.engine), and an engine "
        "declares a rule the first time a graph can fire it (eqsat.engine.reach) and empties its tables after "
        "each graph with delete rules instead of egglog push/pop, which cloned the whole e-graph (1-3 ms a "
        "graph, growing with the process's age).",
        "- Extract is the largest stage of the 61-layer run since then (about a third). Of its ~50 ms (medians "
        "of 15 runs outside this report): greedy's fixpoint over the 4,576 e-nodes ~11 ms (its cycle check "
        "ANDs two bitsets since 95b9697, where it shifted one per class member: 14.5 ms before), "
        "`eqsat.extract.improve`'s whole-kernel switches ~13 ms (a take and a leave try for each of the 1,159 "
        "tuple-valued classes; 61 takes are kept), the e-nodes' own costs ~6 ms (hits of the engine's cost "
        "memo), the validity check and the DAG costs before and after ~4 ms.",
        "- egglog keeps a little memory per graph for the life of an engine: the resident size grew 10-12 KB "
        "a graph over 4,000 loads, saturations and clears of the gpt-oss and DeepSeek-layer graphs (6 and 2.5 "
        "KB without saturating; `tests/test_engine.py` checks the tables are empty between graphs), so graphs "
        "timed late in this run may pay a little more than early ones.",
        "- vLLM splits its graph at attention (piecewise compilation), so a post-grad pass sees pieces of a "
        "layer; these graphs keep attention as an opaque op, as a full-graph compile would hand it over. The "
        "L-layer graphs are a scaling test, not a graph vLLM produces.",
        "- The MoE layer's post-attention norm output has three consumers (the shared expert's quant, the "
        "router GEMM and the routed experts in bf16); Inductor's matcher requires the pattern's intermediates "
        "to have no other users, so vLLM's fused-add pattern cannot match there.",
        "- silu_and_mul is spelled `torch.ops.eqsat.silu_and_mul` in the graphs and in the baseline's pattern "
        "(vLLM matches whichever form its graphs hold: `_C.silu_and_mul` or native).",
        "- The gated-norm graphs are vLLM pattern #7, registered for the (heads, head_dim) = (32, 128) vLLM "
        "would read from Qwen3-Next's GDN layers at TP 1, in the flat layout only (vLLM registers the 3-D one "
        "only when the quant is native); as vLLM's comment says, it matches op structure, not rank, so it "
        "matches the 3-D graph too. The MLA dual-norm patterns #13/#14 match the output "
        "of the rms + quant pass, as in vLLM, so the baseline's q-latent norm site is a dual-norm kernel.",
        "- Both quant forms of #1/#2 vLLM registers with `quant_fp8` enabled (AITER and `_C`) are registered; "
        "the graphs use the AITER form, so the `_C` ones only cost registration and failed match attempts, "
        "as they do in vLLM.", "",
    ])
