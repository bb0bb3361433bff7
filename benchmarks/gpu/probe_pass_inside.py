"""The pass's time inside GPU compiles against its time on the same graphs alone, in one process.

    export PYTHONPATH=$PWD/.device-site:$PWD:$PWD/benchmarks/gpu
    python3 benchmarks/gpu/probe_pass_inside.py OUT [e2e.py's arguments ...]

Wraps ``EqSatPass.__call__`` and runs ``e2e.main`` with the arguments given (its results under their
``--out``), then a fresh pass on the saved DeepSeek and Qwen3-Next graphs
(``benchmarks/fixtures/e2e_graphs_h200``) for three rounds, priced with the profile the e2e passes took. Printed per call (``PASS inside|alone``): the
label, nodes, the call's index for that label, its wall ms, the milliseconds collections took inside it by
generation, and its stages (``Report.stage_ms``). The third call of each label runs under cProfile;
``OUT/inside.prof`` and ``OUT/alone.prof`` hold them, and the 45 functions of most own time are printed.
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import glob
import io
import os
import pstats
import sys
import time

import eqsat
from eqsat import graphfile

GRAPHS = "benchmarks/fixtures/e2e_graphs_h200"


def main() -> None:
    out, e2e_args = sys.argv[1], sys.argv[2:]
    gc_ms, started = [0.0, 0.0, 0.0], [0.0]
    inside = [False]

    def on_gc(phase: str, info: dict) -> None:
        if inside[0]:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                gc_ms[info["generation"]] += (time.perf_counter() - started[0]) * 1e3

    gc.callbacks.append(on_gc)
    prof = {"inside": cProfile.Profile(), "alone": cProfile.Profile()}
    where, seen = ["inside"], {}
    call = eqsat.EqSatPass.__call__

    def timed(self: eqsat.EqSatPass, graph: object) -> None:
        key = (where[0], getattr(self, "label", ""), len(graph.nodes))
        seen[key] = seen.get(key, 0) + 1
        p = prof[where[0]] if seen[key] == 3 else None
        gc_ms[:] = [0.0, 0.0, 0.0]
        inside[0] = True
        t0 = time.perf_counter()
        if p:
            p.enable()
        try:
            call(self, graph)
        finally:
            if p:
                p.disable()
            ms = (time.perf_counter() - t0) * 1e3
            inside[0] = False
            rep = self.last_report
            stages = " ".join(f"{k} {v:.1f}" for k, v in rep.stage_ms.items()) if rep else "-"
            print(f"PASS {key[0]} {key[1]!s:30s} n{key[2]} call{seen[key]} {ms:7.1f} ms  gc ms "
                  f"{[round(x, 1) for x in gc_ms]}  [{stages}]", flush=True)

    eqsat.EqSatPass.__call__ = timed
    import e2e

    with contextlib.suppress(SystemExit):  # e2e.main's exit status: its checks, read from its own files
        e2e.main(e2e_args)
    where[0] = "alone"
    files = sorted(glob.glob(f"{GRAPHS}/deepseek.M*.json") + glob.glob(f"{GRAPHS}/qwen3next.M*.json"))
    p = eqsat.EqSatPass(profile=e2e.parse(e2e_args).profile, sizes=tuple(e2e.DEFAULT_M))  # the e2e passes' own
    for _ in range(3):
        for f in files:
            p.label = os.path.basename(f)
            p(graphfile.load(f).graph)
    for name, pr in prof.items():
        pr.dump_stats(f"{out}/{name}.prof")
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(45)
        print(f"===== {name}, the third call of each graph, by own time\n{s.getvalue()}")


if __name__ == "__main__":
    main()
