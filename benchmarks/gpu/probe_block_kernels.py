"""Device probe: the kernels of one block's compiled forward, per variant (``e2e.py``'s), by the profiler.

One dynamic compile per variant (first run M = 8, as ``e2e.py`` compiles by default; ``--first M`` another,
e.g. the largest as ``e2e.py --first-dynamic largest`` and vLLM's profile run), then at each M of ``--M`` the
forward run ``--iters`` times under ``torch.profiler``: every GPU kernel's name, launches per forward and
mean µs, so two variants' forwards can be compared kernel by kernel (where a block-level difference comes from).

    export PYTHONPATH=$PWD/.device-site:$PWD:$PWD/benchmarks/gpu PYTHONUNBUFFERED=1
    python3 benchmarks/gpu/probe_block_kernels.py --block deepseek --M 8 4096
    python3 benchmarks/gpu/probe_block_kernels.py --block gptoss --variants inductor --compiles 8 \
        --M 1024 4096 8192 --chain 'triton_(red|per|poi)_fused'   # one chain's spread over fresh compiles

``--compiles K``: K fresh compiles per variant (each times its Triton configs anew, as each e2e round
does); ``--chain REGEX``: also the µs of the kernels whose names match, summed, per compile and M, and
their median over the compiles; ``--autotune``: each Triton kernel Inductor tunes at its first run, with
every config's time as Inductor measured it and the one it kept (a compile's kernels can differ there).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict

import e2e
import e2e_blocks
import torch
from torch.profiler import ProfilerActivity, profile


def kernels(fn, iters: int) -> list[tuple[str, float, float]]:  # noqa: ANN001
    """(kernel name, launches per call, mean µs per call) of ``fn``, slowest first."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            total[ev.name] += ev.device_time
            count[ev.name] += 1
    return sorted(((k, count[k] / iters, total[k] / iters) for k in total), key=lambda r: -r[2])


def print_autotuning() -> None:
    """Print each runtime autotuning of Inductor's Triton kernels: every config's time and the winner."""
    from torch._inductor.runtime import triton_heuristics as th

    measure = th.CachingAutotuner.benchmark_all_configs

    def printed(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        timings = measure(self, *args, **kwargs)
        rows = " | ".join(f"{ms * 1e3:.2f} µs {launcher.config}" for launcher, ms in sorted(timings.items(),
                                                                                             key=lambda kv: kv[1]))
        print(f"   autotune {self.fn.__name__[:80]}: {rows} -> {min(timings, key=timings.get).config}", flush=True)
        return timings

    th.CachingAutotuner.benchmark_all_configs = printed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--block", default="deepseek")
    ap.add_argument("--variants", nargs="+", default=["eqsat", "always_fuse"])
    ap.add_argument("--M", type=int, nargs="+", default=[8, 4096])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--compiles", type=int, default=1)
    ap.add_argument("--first", type=int, default=8, help="the M of the dynamic compile's first run")
    ap.add_argument("--chain", default=None, help="regex of kernel names to sum per compile and M")
    ap.add_argument("--autotune", action="store_true", help="print Inductor's runtime autotuning of each kernel")
    args = ap.parse_args(argv)
    e2e.configure_torch()
    if args.autotune:
        print_autotuning()
    import torch._inductor.config as ic

    block = e2e_blocks.build(args.block, "cuda")
    sizes = tuple(e2e.DEFAULT_M)
    chain: dict[tuple[str, int], list[float]] = defaultdict(list)
    for variant in args.variants:
        for c in range(args.compiles):
            torch._dynamo.reset()
            p = e2e.make_pass(variant, sizes, True)
            compiled = torch.compile(block)
            with ic.patch(post_grad_custom_post_pass=p):
                e2e.first_dynamic_call(compiled, block, m=args.first)
                for m in args.M:
                    x = block.example_inputs(m, "cuda", seed=m)
                    rows = kernels(lambda x=x, f=compiled: f(*x), args.iters)
                    label = f" / compile {c}" if args.compiles > 1 else ""
                    mine = sum(us for name, _, us in rows if args.chain and re.search(args.chain, name))
                    print(f"== {args.block} / {variant}{label} / M={m}: {sum(r[2] for r in rows):.1f} µs of kernels, "
                          f"{sum(r[1] for r in rows):.0f} launches" + (f"; chain {mine:.2f} µs" if args.chain else ""),
                          flush=True)
                    chain[(variant, m)].append(mine)
                    for name, n, us in rows:
                        print(f"   {us:9.2f} µs  x{n:4.1f}  {name[:150]}", flush=True)
    if args.chain:
        for (variant, m), got in chain.items():
            print(f"chain {variant} M={m}: median {statistics.median(got):.2f} µs of {len(got)} compiles: "
                  f"{' '.join(f'{u:.2f}' for u in got)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
