"""Device probe: how far apart fresh compiles of one block land (``e2e.py``'s dynamic compile, first run
M = 8), with and without a pass, alternating: whether a variant's difference on a graph the pass left
unchanged is the compile's own spread. CUDA-graph medians at each ``--M``, µs. ``--autotune-cache shared``:
every compile reads and writes one Inductor autotune cache (a kernel's source compiled again takes the
config its first compile chose), so what is left is the spread of everything but those choices.

    export PYTHONPATH=$PWD/.device-site:$PWD:$PWD/benchmarks/gpu PYTHONUNBUFFERED=1
    python3 benchmarks/gpu/probe_compile_spread.py --block qwen3next --compiles 4 --M 1024 8192
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import e2e
import e2e_blocks
import gpu_timing
import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--block", default="qwen3next")
    ap.add_argument("--variants", nargs="+", default=["inductor", "eqsat"])
    ap.add_argument("--compiles", type=int, default=4)
    ap.add_argument("--M", type=int, nargs="+", default=[1024, 8192])
    ap.add_argument("--autotune-cache", choices=["off", "shared"], default="off")
    args = ap.parse_args(argv)
    e2e.configure_torch()
    import torch._inductor.config as ic

    if args.autotune_cache == "shared":
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-shared-")
        ic.autotune_local_cache = True

    block = e2e_blocks.build(args.block, "cuda")
    inputs = {m: block.example_inputs(m, "cuda", seed=m) for m in args.M}
    passes = {v: e2e.make_pass(v, tuple(e2e.DEFAULT_M), True) for v in args.variants}
    for k in range(args.compiles):
        for variant in args.variants:
            torch._dynamo.reset()
            compiled = torch.compile(block)
            with ic.patch(post_grad_custom_post_pass=passes[variant]):
                e2e.first_dynamic_call(compiled, block)
                us = {m: gpu_timing.bench(lambda x=inputs[m], f=compiled: f(*x), 10, 2)[0] for m in args.M}
            print(f"{args.autotune_cache:6s} compile {k} {variant:12s} " + "  ".join(f"M={m}: {u:8.2f}" for m, u in us.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
