"""Device probe: AITER's Triton kernels of the DeepSeek layer's fusions launched with the warp count their
wrappers pick (for AMD's 64-thread waves) against other counts, CUDA-graph medians interleaved. The
wrapper runs unchanged; only the ``num_warps`` it passes to the kernel's launch is replaced, for the probe.
Prints one line per kernel, shape and M."""

from __future__ import annotations

import argparse
import statistics
import sys

import gpu_timing
import torch

from eqsat.library.aiter import triton_module


class Warps:
    """A stand-in for a module's jitted kernel: launches it with ``num_warps`` set to ``self.n`` (None: as given)."""

    def __init__(self, kernel):
        self.kernel, self.n = kernel, None

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*a, **kw):
            if self.n is not None:
                kw["num_warps"] = self.n
            return launch(*a, **kw)

        return run


def cases(m: int, dev: str):
    fp8, bf = torch.float8_e4m3fn, torch.bfloat16
    fq = triton_module("fused_fp8_quant")
    act = triton_module("activation")
    x = torch.randn(m, 7168, device=dev, dtype=bf)
    res = torch.randn(m, 7168, device=dev, dtype=bf)
    w = torch.rand(7168, device=dev, dtype=bf) + 0.5
    q, kv = torch.randn(m, 1536, device=dev, dtype=bf), torch.randn(m, 512, device=dev, dtype=bf)
    qw, kvw = torch.rand(1536, device=dev, dtype=bf) + 0.5, torch.rand(512, device=dev, dtype=bf) + 0.5
    h = torch.randn(m, 4608, device=dev, dtype=bf)
    yield ("add_rms_group_quant N=7168", fq, "_fused_rms_fp8_group_quant_kernel", (None, 4, 8, 16, 32),
           lambda: fq.fused_rms_fp8_group_quant(x, w, 1e-6, group_size=128, dtype_quant=fp8, res1=res))
    yield ("rms_group_quant N=7168", fq, "_fused_rms_fp8_group_quant_kernel", (None, 4, 8, 16, 32),
           lambda: fq.fused_rms_fp8_group_quant(x, w, 1e-6, group_size=128, dtype_quant=fp8))
    yield ("mla_dual 1536+512", fq, "_fused_rms_fp8_group_quant_kernel", (None, 1, 2, 4, 8, 16),
           lambda: fq.fused_rms_fp8_group_quant(q, qw, 1e-6, kv, kvw, 1e-6, group_size=128, dtype_quant=fp8))
    yield ("silu_mul_group_quant N=4608", act, "_act_mul_and_dynamic_fp8_group_quant_kernel", (None, 1, 2, 4, 8),
           lambda: act.act_mul_and_fp8_group_quant(h, "silu", 128, fp8))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--M", type=int, nargs="+", default=[1, 8, 64, 256, 1024])
    ap.add_argument("--samples", type=int, default=40)
    args = ap.parse_args()
    gpu_timing.setup_torch()
    print("\n".join(gpu_timing.env_report()), flush=True)
    for m in args.M:
        for name, mod, kname, counts, fn in cases(m, "cuda"):
            proxy = Warps(getattr(mod, kname))
            setattr(mod, kname, proxy)
            try:
                timers = {}
                for n in counts:
                    proxy.n = n
                    timers[n] = gpu_timing.GraphTimer(fn, target_ms=0.5)
                out = gpu_timing.interleave(timers, args.samples)
            finally:
                setattr(mod, kname, proxy.kernel)
            meds = {n: statistics.median(v) for n, v in out.items()}
            best = min(meds, key=meds.get)
            cols = "  ".join(f"{'wrapper' if n is None else n}:{meds[n]:6.2f}" for n in counts)
            print(f"M={m:5d} {name:30s} {cols}  best {best} ({meds[None] - meds[best]:+.2f} us)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
