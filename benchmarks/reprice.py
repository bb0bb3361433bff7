"""An e2e run's predictions made again under other profiles, beside the speedups it measured.

    python -m benchmarks.reprice RUN.csv --profiles h200 h100 [--choice written|per-m] [--graphs DIR] [--hint N]

``RUN.csv`` is a table of ``benchmarks/gpu/e2e.py``. For each block it ran the eqsat variant on, the pass's
post-grad graphs saved in ``--graphs`` (``benchmarks/gpu/capture_graphs.py``: ``<block>.M1.json`` the M = 1
compile, ``<block>.M8.json`` the dynamic one, for every M >= 2) are optimized under each profile, as the run's
pass did: ``--choice written`` (the default) at sizes = the run's M list, the saving at M being what the pass
predicted at M for the graph it wrote (``Report.predicted_at``: one choice over the range, the graph that ran);
``per-m`` at sizes = M alone (the choice at M, as ``e2e.py`` predicted before 2026-12-05). The dynamic graph's
token symbol first takes the hint ``--hint`` (the M the run first ran that graph at: its largest M by default,
as ``e2e.py --first-dynamic largest``), since a twin's ``@dynamic`` line prices the sizes past it. The
predicted whole-forward speedup is ``t / (t - saving)``,
``t`` the round's Inductor-alone time at M, as ``e2e.py`` writes it; per block and M the median over the
run's rounds, beside the measured eqsat speedup (median over rounds) and the run's own prediction
(``pred_speedup_whole``: a check that the saved graphs stand for the run's). A point where a profile writes
other kernels than the run's pass did is marked ``other`` and left out of the errors: the run did not
measure that graph. Printed: a table per block and M
and, per profile, the errors' range and the points more than 10% off. Nothing runs on a GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

import eqsat
from eqsat import graphfile
from eqsat.kernels.torch_ops import register_vllm_standins

GRAPHS = Path("benchmarks/fixtures/e2e_graphs_h200")
MISS = 0.10  # the goal: predictions within 10% of measured


@dataclass(frozen=True)
class Point:
    """One block at one M: the run's Inductor-alone times and eqsat speedups (one per round), and its
    own predictions."""

    inductor_us: tuple[float, ...]
    measured: tuple[float, ...]
    run_predicted: tuple[float, ...]
    kernels: str  # the kernels the run's pass wrote into the graph that ran at M ("-": none)


def read_run(path: Path) -> dict[tuple[str, int], Point]:
    """The run's points: (block, M) -> its rounds' Inductor-alone times, eqsat speedups and predictions."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    base = {(r["block"], r["round"], int(r["M"])): float(r["us"]) for r in rows if r["variant"] == "inductor" and r["us"]}
    got: dict[tuple[str, int], list[tuple[float, float, float]]] = defaultdict(list)
    kernels: dict[tuple[str, int], str] = {}
    for r in rows:
        key = (r["block"], r["round"], int(r["M"]))
        if r["variant"] == "eqsat" and r["speedup"] and key in base:
            run = float(r["pred_speedup_whole"]) if r["pred_speedup_whole"] else float("nan")
            got[r["block"], int(r["M"])].append((base[key], float(r["speedup"]), run))
            kernels.setdefault((r["block"], int(r["M"])), r["kernels"] or "-")
    return {k: Point(*(tuple(v) for v in zip(*vals, strict=True)), kernels[k]) for k, vals in got.items()}


def kernel_names(counts: dict[str, int]) -> str:
    """Kernels as ``e2e.py`` writes them: ``<name>x<n>`` sorted, ``-`` for none."""
    return " ".join(f"{name}x{n}" for name, n in sorted(counts.items())) or "-"


def load_graph(path: Path, hint: int | None) -> torch.fx.GraphModule:
    """A saved graph, its symbols' hints set to ``hint`` where given."""
    data = json.loads(path.read_text())
    if hint is not None:
        data["symbols"] = {name: hint for name in data["symbols"]}
    return graphfile.loads(json.dumps(data))


def priced(block: str, m: int, profile: str, graphs: Path, hint: int,
           sizes: tuple[int, ...] | None) -> tuple[float, str]:
    """The pass's predicted saving (µs) on ``block``'s graph for M = ``m`` under ``profile`` and the kernels
    it writes: costed at ``sizes``, what it predicted at ``m`` for the graph it wrote; None: the choice at
    ``m`` alone."""
    path = graphs / f"{block}.M1.json" if m == 1 else graphs / f"{block}.M8.json"
    rep = eqsat.optimize(load_graph(path, None if m == 1 else hint), profile=profile, sizes=sizes or m,
                         recompile=False)
    if rep.error:
        raise RuntimeError(f"{path} under {profile}: {rep.error}")
    before, after = rep.predicted_at[m]
    return before - after, kernel_names(rep.kernels_chosen if rep.changed else {})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="an e2e.py results table (e2e_<tag>.csv)")
    ap.add_argument("--profiles", nargs="+", default=["h200"])
    ap.add_argument("--graphs", type=Path, default=GRAPHS)
    ap.add_argument("--hint", type=int, default=None, help="the dynamic graph's first M (default: the run's largest)")
    ap.add_argument("--fp8", choices=("e4m3fn", "e4m3fnuz"), default="e4m3fn")
    ap.add_argument("--choice", choices=("written", "per-m"), default="written",
                    help="written: the one graph the pass writes over the run's M list; per-m: the choice at each M")
    args = ap.parse_args(argv)
    if not args.run.is_file():
        ap.error(f"no run table {args.run}")
    points = read_run(args.run)
    if not points:
        ap.error(f"{args.run} has no eqsat row with a measured speedup")
    missing = sorted({b for b, _ in points if not (args.graphs / f"{b}.M1.json").is_file()})
    if missing:
        ap.error(f"no saved graphs in {args.graphs} for {missing}")
    register_vllm_standins(getattr(torch, f"float8_{args.fp8}"))
    hint = args.hint or max(m for _, m in points)
    sizes = tuple(sorted({m for _, m in points})) if args.choice == "written" else None
    errors: dict[str, list[tuple[float, str]]] = defaultdict(list)
    others: dict[str, list[str]] = defaultdict(list)  # points where the profile writes another graph than the run
    print(f"{args.run}: the dynamic graphs' hint {hint}; the choice {args.choice}; predicted whole-forward speedup "
          f"(error against measured)")
    print(f"{'block':14s} {'M':>5s} {'measured':>9s} {'run':>7s} " + " ".join(f"{p:>16s}" for p in args.profiles))
    for (block, m), pt in sorted(points.items()):
        measured = statistics.median(pt.measured)
        cells = []
        for profile in args.profiles:
            saving, kernels = priced(block, m, profile, args.graphs, hint, sizes)
            pred = statistics.median(t / (t - saving) for t in pt.inductor_us)
            err = pred / measured - 1
            if kernels == pt.kernels:
                errors[profile].append((err, f"{block} M={m}"))
                cells.append(f"{pred:7.3f} ({err:+6.1%})")
            else:  # another graph than the one measured: no error to state
                others[profile].append(f"{block} M={m}: {kernels} where the run wrote {pt.kernels}")
                cells.append(f"{pred:7.3f} (other) ")
        run = statistics.median(pt.run_predicted)
        print(f"{block:14s} {m:5d} {measured:9.3f} {run:7.3f} " + " ".join(f"{c:>16s}" for c in cells))
    for profile in args.profiles:
        errs = errors[profile]
        misses = [f"{where} {e:+.1%}" for e, where in errs if abs(e) > MISS]
        span = f"errors {min(e for e, _ in errs):+.1%} … {max(e for e, _ in errs):+.1%}; " if errs else ""
        print(f"{profile}: {span}{len(misses)} of {len(errs)} more than {MISS:.0%} off"
              + (f": {', '.join(misses)}" if misses else ""))
        if others[profile]:
            print(f"  another graph than the run's (its measured speedup is not this graph's), at "
                  f"{len(others[profile])} point(s): " + "; ".join(others[profile]))


if __name__ == "__main__":
    main()
