"""Paired A/B of eqsat's pass time between two checkouts, side by side in one run.

    python -m benchmarks.paired_ab OLD_CHECKOUT [NEW_CHECKOUT] [--rounds N] [--one-off | --after-baseline]
                                   [--graph NAME | --file GRAPH.json]

On a shared VM the machine's speed drifts by up to 2x over minutes, so two benchmark runs made one
after the other cannot show a 5% change. Here two worker processes, one per checkout (each imports
its own ``eqsat``), stay alive side by side; the driver asks them in turn, alternating which goes
first, to time one ``eqsat.optimize`` of a fresh copy of each graph of ``benchmarks.graphs.models``
(a warm engine per graph, as ``benchmarks.pass_time`` runs it), or with ``--one-off`` one fresh
engine declaring what the graph can fire; with ``--after-baseline`` each worker first runs the baseline
(``benchmarks.baseline``) on another copy, untimed, as ``benchmarks.pass_time``'s warm runs follow it
(the caches then hold the baseline's code and data, not eqsat's). A slow spell then hits both alike:
the median of the paired differences is the change. Make OLD_CHECKOUT with ``git worktree add /tmp/old <commit>``.
``--file``: saved graphs instead (``eqsat.graphfile``, e.g. the stacked layers ``capture_graphs.py --layers N``
writes), each run on a fresh load. Each worker imports its checkout's own ``extract/`` and ``rewrites/`` as
``eqsat.extract`` and ``eqsat.rewrites`` (an editable install would otherwise hand both the installed tree's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORKER = """
import importlib.util, pathlib, sys, time

class CheckoutTree:  # this checkout's eqsat.extract and eqsat.rewrites (pyproject's package-dir), before an installed copy's
    @staticmethod
    def find_spec(name, path=None, target=None):
        sub = {"eqsat.extract": "extract", "eqsat.rewrites": "rewrites"}.get(name)
        if sub is None:
            return None
        folder = pathlib.Path.cwd() / sub
        return importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])

sys.meta_path.insert(0, CheckoutTree)
import eqsat
from eqsat import graphfile
from benchmarks.graphs import models
from benchmarks.pass_time import OPTIONS, Bench, _declared
from eqsat.fx.capture import copy_graph
from eqsat.fx.importer import import_graph
from eqsat.core.spelling import VocabIndex
one_off, after_baseline = sys.argv[1] == "one-off", sys.argv[1] == "after-baseline"
models.register_ops()
ready = {}
bench = Bench(runs=1) if after_baseline else None  # its baseline, run as pass_time runs it
for line in sys.stdin:
    name = line.strip()
    is_file = name.endswith(".json")  # a saved graph (eqsat.graphfile), loaded afresh for each run
    if name not in ready:
        gm = graphfile.load(name) if is_file else models.GRAPHS[name]()
        fresh = (lambda: graphfile.load(name)) if is_file else (lambda gm=gm: copy_graph(gm))
        if one_off:
            ready[name] = (gm, fresh, import_graph(copy_graph(gm), OPTIONS.catalog, VocabIndex(OPTIONS.vocabularies)))
        else:
            engine = Bench.engine_for(gm)
            for _ in range(3):
                eqsat.optimize(fresh(), OPTIONS, engine=engine, recompile=False)
            ready[name] = (gm, fresh, engine)
    gm, fresh, prepared = ready[name]
    g = fresh()
    if bench is not None:
        bench.baseline_run(copy_graph(gm))
    start = time.perf_counter()
    _declared(prepared) if one_off else eqsat.optimize(g, OPTIONS, engine=prepared, recompile=False)
    print((time.perf_counter() - start) * 1e3, flush=True)
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path, nargs="?", default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rounds", type=int, default=60)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--one-off", action="store_true", help="time a fresh engine's declarations instead")
    mode.add_argument("--after-baseline", action="store_true",
                      help="run the baseline (untimed) right before each timed pass, as pass_time's warm runs")
    parser.add_argument("--graph", action="append", help="only this graph of benchmarks.graphs.models (repeatable)")
    parser.add_argument("--file", action="append", type=Path,
                        help="a saved graph (eqsat.graphfile, e.g. from benchmarks/gpu/capture_graphs.py) to time "
                             "instead (repeatable)")
    args = parser.parse_args(argv)
    from benchmarks.graphs import models

    workers = {}
    for label, root in (("old", args.old.resolve()), ("new", args.new.resolve())):
        kind = "one-off" if args.one_off else "after-baseline" if args.after_baseline else "pass"
        workers[label] = subprocess.Popen(
            [sys.executable, "-c", WORKER, kind], cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
    print(f"{'graph':28s} {'old ms':>8s} {'new ms':>8s}  paired old - new")
    try:
        for name in [str(f.resolve()) for f in args.file or ()] or args.graph or models.GRAPHS:
            times: dict[str, list[float]] = {"old": [], "new": []}
            for k in range(args.rounds):
                for label in ("old", "new") if k % 2 else ("new", "old"):
                    worker = workers[label]
                    assert worker.stdin is not None and worker.stdout is not None
                    worker.stdin.write(name + "\n")
                    worker.stdin.flush()
                    reply = worker.stdout.readline()
                    if not reply:
                        raise RuntimeError(f"the {label} worker died on {name!r} (run it by hand to see why)")
                    times[label].append(float(reply))
            old, new = times["old"][2:], times["new"][2:]  # the first rounds warm caches up
            diff = statistics.median(a - b for a, b in zip(old, new, strict=True))
            print(f"{Path(name).stem if args.file else name:28s} {statistics.median(old):8.2f} {statistics.median(new):8.2f}  "
                  f"{diff:+.2f} ms ({diff / statistics.median(old):+.0%})", flush=True)
    finally:
        for worker in workers.values():
            if worker.stdin is not None:
                worker.stdin.close()
            worker.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
