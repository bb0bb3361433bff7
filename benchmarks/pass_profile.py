"""The pass's time on saved graph files, as a process compiling them would spend it, on a CPU.

    python -m benchmarks.pass_profile GRAPH.json ... [--rounds 2] [--profile h200] [--sizes 1 8 ...]
                                      [--fp8 e4m3fn] [--cprofile 25]

Graph files come from ``benchmarks/gpu/capture_graphs.py`` (the post-grad graphs a GPU compile hands
the pass) or ``eqsat.graphfile.save``. One ``EqSatPass`` serves every graph in every round, in the
order given, as a process compiling a model: round 1 pays what the process's first graphs declare
(rules, loaders, kernel fakes), later rounds what every compile pays. Each run gets its graph freshly
loaded (a new fake mode and shape env, as a new compile). Printed per graph and round: nodes, the
pass's wall time and its stages (``Report.stage_ms``); per round, the sum; with 3 rounds or more, per
graph the least of the later rounds (each stage's least on its own: a steady state less noisy than one
round's). ``--cprofile N``: the N functions with the most cumulative time in round
``--cprofile-round`` (1: the process's first graphs). vLLM's ops load as the real ones where vLLM is
installed, else as the stand-ins, whose fp8 is ``--fp8`` (the dtype the graphs' blocks were built with).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

import torch

import eqsat
from eqsat import graphfile
from eqsat.kernels.torch_ops import register_vllm_standins

DEFAULT_SIZES = (1, 8, 64, 256, 1024, 4096, 8192)  # e2e.py's M


def run_once(p: eqsat.EqSatPass, path: Path, prof: cProfile.Profile | None = None) -> tuple[int, float, dict[str, float]]:
    """One pass over a fresh load of ``path`` (under ``prof``, if given): its nodes, wall ms and stage ms."""
    gm = graphfile.load(path)
    if prof is not None:
        prof.enable()
    t0 = time.perf_counter()
    p(gm.graph)
    ms = (time.perf_counter() - t0) * 1e3
    if prof is not None:
        prof.disable()
    rep = p.last_report
    return len(gm.graph.nodes), ms, dict(rep.stage_ms) if rep else {}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graphs", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--sizes", nargs="+", type=int, default=list(DEFAULT_SIZES))
    ap.add_argument("--fp8", choices=("e4m3fn", "e4m3fnuz"), default="e4m3fn")
    ap.add_argument("--cprofile", type=int, default=0, metavar="N")
    ap.add_argument("--cprofile-round", type=int, default=1, metavar="R")
    ap.add_argument("--no-repeats", action="store_true", help="saturate every copy of a repeated component (Options.repeats)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    for g in args.graphs:
        if not g.is_file():
            ap.error(f"no graph file {g}")
    register_vllm_standins(getattr(torch, f"float8_{args.fp8}"))
    t0 = time.perf_counter()
    p = eqsat.EqSatPass(profile=args.profile, sizes=tuple(args.sizes), repeats=not args.no_repeats)
    print(f"pass made in {(time.perf_counter() - t0) * 1e3:.1f} ms", flush=True)
    later: dict[Path, list[tuple[float, dict[str, float]]]] = {g: [] for g in args.graphs}
    for rnd in range(args.rounds):
        prof = cProfile.Profile() if args.cprofile and rnd + 1 == args.cprofile_round else None
        total = 0.0
        print(f"== round {rnd + 1}", flush=True)
        for g in args.graphs:
            nodes, ms, stages = run_once(p, g, prof)
            total += ms
            if rnd:
                later[g].append((ms, stages))
            parts = " ".join(f"{k} {v:.1f}" for k, v in stages.items())
            print(f"   {g.stem:24s} {nodes:4d} nodes  pass {ms:7.1f} ms  [{parts}]", flush=True)
        print(f"   {'round total':24s}             {total:7.1f} ms", flush=True)
        if prof is not None:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(args.cprofile)
            print(out.getvalue())
    if args.rounds >= 3:
        print(f"== least of rounds 2-{args.rounds}", flush=True)
        for g, runs in later.items():
            stages = {k: min(st.get(k, 0.0) for _, st in runs) for k in runs[0][1]}
            parts = " ".join(f"{k} {v:.1f}" for k, v in stages.items())
            print(f"   {g.stem:24s}             pass {min(ms for ms, _ in runs):7.1f} ms  [{parts}]", flush=True)
        print(f"   {'sum':24s}             {sum(min(ms for ms, _ in r) for r in later.values()):7.1f} ms", flush=True)


if __name__ == "__main__":
    main()
