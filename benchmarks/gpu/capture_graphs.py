"""The post-grad graphs the e2e blocks hand the pass, saved as graph files, and the pass's time on each.

    export PYTHONPATH=$PWD/.device-site:$PWD:$PWD/benchmarks/gpu
    python3 benchmarks/gpu/capture_graphs.py --out $OUT/graphs [--blocks deepseek gptoss] [--rounds 2] [--layers 8]

Each block of ``e2e_blocks`` is compiled as ``e2e.py`` compiles it (fresh compiles, the token dim marked
dynamic from M = 8 on, so two graphs: M = 1 and every M >= 2) with Inductor's post-grad passes only (the
graph is then run by FX: no code generation). The pass set as ``post_grad_custom_post_pass`` saves the
graph it is handed (``eqsat.graphfile.save``: ``<block>.M<m>.json``, symbolic dims with their hints) and
runs ``EqSatPass(profile="h200", sizes=M list)`` on it, timed; ``--rounds`` compiles every block again,
each round with the same pass objects, as a process compiling a model would. Printed per graph: nodes,
the pass's wall time and its stages (``Report.stage_ms``). The files let the pass be profiled on a CPU
against the graphs a GPU compile makes (``python -m benchmarks.pass_profile``). ``--layers N``: a model of N
layers of each decoder-layer block in one graph instead (``e2e_blocks.Stack``; files ``<block>x<N>.M<m>.json``),
to see how the pass's time grows with a model. Without a GPU the blocks have tiny widths (the same graphs'
structure): ``PYTHONPATH=benchmarks/gpu .venv/bin/python benchmarks/gpu/capture_graphs.py --out DIR --blocks
deepseek --M 8 --rounds 1 --layers 8`` takes seconds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import e2e
import e2e_blocks
import torch
import torch.fx as fx

import eqsat
from eqsat import graphfile


class CapturingPass(eqsat.EqSatPass):
    """``EqSatPass`` that saves the graph it is handed (first round) and prints its own time and stages."""

    def __init__(self, out: Path, sizes: tuple[int, ...]) -> None:
        super().__init__(profile="h200", sizes=sizes)
        self.out = out
        self.label = ""
        self.save = True

    def __call__(self, graph: fx.Graph) -> None:
        if self.save:
            graphfile.save(graph, self.out / f"{self.label}.json")
        t0 = time.perf_counter()
        super().__call__(graph)
        ms = (time.perf_counter() - t0) * 1e3
        rep = self.last_report
        stages = " ".join(f"{k} {v:.1f}" for k, v in rep.stage_ms.items()) if rep else "no report"
        print(f"   {self.label:24s} {len(graph.nodes):4d} nodes  pass {ms:6.1f} ms  [{stages}]", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--blocks", nargs="+", default=list(e2e_blocks.BLOCKS))
    ap.add_argument("--M", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--sizes", nargs="+", type=int, default=list(e2e.DEFAULT_M))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--layers", type=int, default=0, help="N >= 1: models of N layers of each decoder-layer block")
    args = ap.parse_args()
    if args.layers and not set(args.blocks) <= set(e2e_blocks.DECODER_LAYERS):
        ap.error(f"--layers stacks only the decoder-layer blocks {e2e_blocks.DECODER_LAYERS}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    e2e.configure_torch()
    import torch._inductor.config as ic

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    p = CapturingPass(out, tuple(args.sizes))
    with ic.patch(post_grad_custom_post_pass=p):
        p.label = "warm-up"
        p.save = False
        e2e.warm_up_compiler(device, exec_fx=True)
    for rnd in range(args.rounds):
        p.save = rnd == 0
        print(f"== round {rnd + 1}", flush=True)
        for name in args.blocks:
            tiny = device.type == "cpu"
            block = e2e_blocks.Stack(name, args.layers, device, tiny).eval() if args.layers else \
                e2e_blocks.build(name, device, tiny=tiny)
            stem = f"{name}x{args.layers}" if args.layers else name
            torch._dynamo.reset()
            compiled = torch.compile(block, backend=e2e.Backend(exec_fx=True))
            with ic.patch(post_grad_custom_post_pass=p):
                for m in args.M:
                    x = block.example_inputs(m, device)
                    if m >= 2:
                        for t in x:
                            torch._dynamo.mark_dynamic(t, 0)
                    p.label = f"{stem}.M{m}"
                    compiled(*x)
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
