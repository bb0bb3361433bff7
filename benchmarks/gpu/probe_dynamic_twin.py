"""Device probe: Inductor's code for a native chain compiled per M (``dynamic=False``, as the H200 twin lines
were fitted) against one dynamic compile serving every M (first run at M = 8, as the e2e blocks compile),
beside the fused kernel (the ``eqsat::`` op, AITER's Triton kernel on CUDA). The DeepSeek layer's chains:
silu + group quant (input [M, 2 x 2304]) and add + RMSNorm + group quant (N = 7168). CUDA-graph medians, µs.

    export PYTHONPATH=$PWD/.device-site:$PWD:$PWD/benchmarks/gpu PYTHONUNBUFFERED=1
    python3 benchmarks/gpu/probe_dynamic_twin.py
"""

from __future__ import annotations

import sys

import gpu_timing
import native
import torch

import eqsat  # noqa: F401  (registers the eqsat:: ops and their CUDA implementations)

MS = (1, 8, 64, 256, 1024, 4096, 8192)
FN = torch.float8_e4m3fn


def chains() -> dict[str, tuple]:
    own = torch.ops.eqsat
    return {
        "silu_group_quant": (native.native_silu_group_quant,
                             lambda x: own.silu_mul_fp8_group_quant(x, 128, FN),
                             lambda m, g: (torch.randn(m, 2 * 2304, device="cuda", generator=g).to(torch.bfloat16),)),
        "add_rms_group_quant": (native.native_add_rms_group_quant,
                                lambda x, r, w: own.rmsnorm_add_fp8_group_quant(x, r, w, native.EPS, 128, FN),
                                lambda m, g: (torch.randn(m, 7168, device="cuda", generator=g).to(torch.bfloat16),
                                              torch.randn(m, 7168, device="cuda", generator=g).to(torch.bfloat16),
                                              torch.randn(7168, device="cuda", generator=g).to(torch.bfloat16))),
    }


def main() -> int:
    gpu_timing.setup_torch()
    print("\n".join(gpu_timing.env_report()), flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, (chain, fused, make) in chains().items():
        inputs = {m: make(m, gen) for m in MS}
        torch._dynamo.reset()
        dyn = torch.compile(chain, dynamic=None)
        first = make(8, gen)
        for t in first:
            if t.shape[0] == 8:  # the activations (not the norm weight)
                torch._dynamo.mark_dynamic(t, 0)
        dyn(*first)
        t_dyn = {m: gpu_timing.bench(lambda a=inputs[m], f=dyn: f(*a), 10, 2)[0] for m in MS}
        t_static = {}
        for m in MS:  # one fresh static compile per M
            torch._dynamo.reset()
            static = torch.compile(chain, dynamic=False)
            t_static[m] = gpu_timing.bench(lambda a=inputs[m], f=static: f(*a), 10, 2)[0]
        t_fused = {m: gpu_timing.bench(lambda a=inputs[m], f=fused: f(*a), 10, 2)[0] for m in MS}
        print(f"{name}: M | static Inductor | dynamic Inductor (first run M = 8) | fused kernel", flush=True)
        for m in MS:
            print(f"  {m:5d} | {t_static[m]:8.2f} | {t_dyn[m]:8.2f} | {t_fused[m]:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
