"""The pass's share of a whole model's compile: a block's layers stacked, compiled as one graph.

    export PYTHONPATH=$PWD/.device-site:$PWD:$PWD/benchmarks/gpu PYTHONUNBUFFERED=1
    python3 benchmarks/gpu/probe_model_compile.py --block deepseek --layers 8 [--rounds 2] [--first 8192]

A model as ``torch.compile(model)`` sees it: ``--layers`` decoder layers of ``e2e_blocks`` (``deepseek`` or
``llama``, full widths; ``e2e_blocks.Stack``) in one graph. Compiled as
``e2e.py`` compiles a block (fresh compiles, no caches; one dynamic compile, the token dim marked, first run
at ``--first``), by Inductor alone and with ``EqSatPass(profile="auto")``, in turn, ``--rounds`` times with
the same pass object, as a process compiling a model would; the compiler is warmed up first (``e2e``).
Printed per round and variant: Inductor's compile seconds (``e2e.Backend``), the pass's seconds, its share of
Inductor alone's compile in the same round, the first call's seconds (Dynamo's trace, AOT, Inductor and the
first run) alone and with the pass, the fused kernels it wrote, the graphs' nodes and the pass's stages
(``Report.stage_ms``, to set beside ``benchmarks.pass_profile`` on the same graphs). Run one layer count per
process: a process's first graphs pay the pass's one-off set-up (round 1). ``--cold inductor|eqsat``: one compile
of that variant as the process's first, no warm-up: the whole wait of a caller's first call, one-offs of torch
and of the pass included (one process a variant).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import e2e
import torch
from e2e_blocks import DECODER_LAYERS, Stack

from eqsat import graphfile


def compile_once(model: Stack, first: int, p: e2e.TimedEqSatPass | None,
                 save: Path | None = None) -> tuple[float, float, str, float]:
    """One fresh dynamic compile of ``model``, first run at ``first`` tokens: Inductor's seconds, the pass's
    seconds, the kernels it wrote and the pass's stages (ms, summed over its graphs), and the first call's
    seconds (Dynamo's trace, AOT, Inductor and the first run: the compile as the caller waits for it)."""
    import torch._inductor.config as ic

    torch._dynamo.reset()
    backend = e2e.Backend()
    compiled = torch.compile(model, backend=backend)
    x = model.example_inputs(first, "cuda")
    for t in x:
        torch._dynamo.mark_dynamic(t, 0)
    calls = len(p.calls) if p is not None else 0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with ic.patch(post_grad_custom_post_pass=p):
        compiled(*x)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    torch._dynamo.reset()
    if p is None:
        return backend.seconds, 0.0, "-", wall
    mine = p.calls[calls:]
    if save is not None:  # the graphs the pass saw, for ``benchmarks.pass_profile`` on a CPU
        save.mkdir(parents=True, exist_ok=True)
        for k, c in enumerate(mine):
            if c.before is not None:
                graphfile.save(c.before.graph, save / f"graph{k}.json")
    stages: dict[str, float] = {}
    for c in mine:
        for k, v in (c.report.stage_ms if c.report is not None else {}).items():
            stages[k] = stages.get(k, 0.0) + v
    nodes = "+".join(str(c.nodes_before) for c in mine)
    parts = " ".join(f"{k} {v:.1f}" for k, v in stages.items())
    return backend.seconds, sum(c.seconds for c in mine), f"{e2e.fmt_kernels(e2e.kernels_of(mine))} | {nodes} nodes [{parts}]", wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--block", choices=DECODER_LAYERS, default="deepseek")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--first", type=int, default=8192, help="the dynamic compile's first run (tokens)")
    ap.add_argument("--save", type=Path, default=None, help="a folder to save the graphs the pass saw in the last round")
    ap.add_argument("--no-repeats", action="store_true", help="saturate every copy of a repeated component (Options.repeats)")
    ap.add_argument("--cold", choices=("inductor", "eqsat"), default=None,
                    help="one compile of that variant as the process's first (no warm-up): the caller's whole wait")
    args = ap.parse_args()
    e2e.configure_torch()
    t0 = time.perf_counter()
    if args.cold:
        model = Stack(args.block, args.layers, "cuda").eval()
        p = e2e.TimedEqSatPass(profile="auto", sizes=e2e.DEFAULT_M, repeats=not args.no_repeats) \
            if args.cold == "eqsat" else None
        ind, pass_s, kernels, wall = compile_once(model, args.first, p)
        print(f"cold {args.block} x {args.layers} layers, {args.cold}: first call {wall:6.2f} s (Inductor {ind:6.2f} s), "
              f"pass {pass_s * 1e3:7.1f} ms | {kernels}", flush=True)
        return
    e2e.warm_up_compiler(torch.device("cuda"), exec_fx=False)
    model = Stack(args.block, args.layers, "cuda").eval()
    p = e2e.TimedEqSatPass(profile="auto", sizes=e2e.DEFAULT_M, repeats=not args.no_repeats)
    print(f"{args.block} x {args.layers} layers, first run {args.first} tokens, profile {p.options.profile}, "
          f"repeats {'off' if args.no_repeats else 'on'}", flush=True)
    for rnd in range(1, args.rounds + 1):
        alone, _, _, alone_wall = compile_once(model, args.first, None)
        own, pass_s, kernels, own_wall = compile_once(model, args.first, p, args.save if rnd == args.rounds else None)
        print(f"round {rnd}: Inductor alone {alone:6.2f} s | with the pass {own:6.2f} s, pass {pass_s * 1e3:7.1f} ms "
              f"= {pass_s / alone:.2%} of Inductor alone's compile | first call {alone_wall:.2f} / {own_wall:.2f} s "
              f"| {kernels}", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
