"""Device probe: the real fp8 GEMMs of ``e2e_blocks.GEMMS`` at the DeepSeek / Llama shapes: error against the
dequantised fp32 product and time (CUDA graphs). Prints one line per shape; exit 1 if AITER's failed."""

from __future__ import annotations

import sys

import e2e_blocks as B
import gpu_timing
import torch


def main() -> int:
    dev, bad = "cuda", 0
    cases = [("block", n, k) for n, k in [(2112, 7168), (3072, 1536), (7168, 2048), (4608, 7168), (7168, 2304)]]
    cases += [("channel", n, k) for n, k in [(6144, 4096), (28672, 4096), (4096, 14336)]]
    for layout, n, k in cases:
        wq, ws = B.quant_weight(torch.randn(n, k, device=dev) / k ** 0.5, layout == "channel")
        for m in (1, 8, 64, 1024, 8192):
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            xq, xs = B.group_quant(x) if layout == "block" else B.token_quant(x)
            ref = B.dequant(xq, xs) @ B.dequant(wq, ws).t()
            out = []
            for name in ("aiter", "scaled_mm"):
                try:
                    y = B.GEMMS[name](xq, xs, wq, ws)
                    err = ((y.float() - ref).norm() / ref.norm()).item()
                    us = gpu_timing.bench(lambda f=B.GEMMS[name], a=(xq, xs, wq, ws): f(*a), 20, 2)[0]
                    out.append(f"{name} {us:8.2f}us err {err:.1e}")
                    bad += name == "aiter" and not err < 1e-2
                except Exception as e:  # noqa: BLE001
                    out.append(f"{name} ERR {str(e).splitlines()[0][:100]}")
                    bad += name == "aiter"
            print(f"{layout} N={n} K={k} M={m}: " + " | ".join(out), flush=True)
    return int(bad > 0)


if __name__ == "__main__":
    sys.exit(main())
