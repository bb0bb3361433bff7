"""Device tuner: AITER's Triton block-scale W8A8 GEMM (``gemm_a8w8_blockscale``) configs for this GPU at the
e2e blocks' block-wise shapes from M = 1 to 8192, beside cuBLAS's block-wise ``torch._scaled_mm``
(``e2e_blocks.scaled_mm``).

AITER ships configs tuned for MI300 / MI350; on the H200 they run the DeepSeek layer's GEMMs 2-10x slower
than the weights' bytes allow (``benchmarks/results/gemm_h200.md``). This sweeps the kernel's own options
(tile M x N, split-K, stages, warps; BLOCK_SIZE_K stays the scale group, 128) at each (N, K, M), keeps the
fastest whose result is right (relative error against the fp32 product of the dequantised operands under
1e-2), and writes ``e2e_blocks.TUNED``: per GPU name, per "N,K", per M, the config (null: AITER's own) and its time, and cuBLAS's
time and error at that shape. ``e2e_blocks.dispatch_gemm`` reads it: the faster of the two where both are right.

Compiles first in worker processes (``--workers``; Triton's disk cache then serves the timing process),
then times every candidate serially in CUDA graphs. Device command (repo root, ``.device-site`` carried;
about 4 min):

    export PYTHONPATH=$PWD/.device-site:$PWD:$PWD/benchmarks/gpu PYTHONUNBUFFERED=1
    python3 benchmarks/gpu/tune_gemm.py --out $OUT/gemm_tuned.json 2>&1 | tee $OUT/tune_gemm.log
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import time

import e2e_blocks as B
import gpu_timing
import torch
from gpu_timing import log

SHAPES = [(2112, 7168), (3072, 1536), (7168, 2048), (4608, 7168), (7168, 2304), (2048, 4096)]
"""(N, K) of the block-wise projections: DeepSeek-V3 TP 8's fused q_a/kv_a, q_b, o, gate_up, down;
Qwen3-Next's out projection."""
MS = (1, 8, 64)
LARGE_MS = (256, 1024, 8192)
"""Larger M, where cuBLAS usually wins (AITER's own large-M configs are 30-150x slower on the H200): AITER is
tuned there over large tiles only (``candidates``), and cuBLAS's entry says whether its block-wise result is
right (at K = 2304 it is not, on the H200 and the H100)."""


def candidates(m: int, k: int) -> list[dict[str, object]]:
    """The configs tried at M = ``m``: up to 64, tile M no larger than needed; above, tiles of 64 or 128 and
    split-K of at most 2. Split-K always divides K's 128-blocks evenly (a split boundary inside a scale group
    would read the wrong scales)."""
    blocks = -(-k // B.G)
    splits = [s for s in (1, 2, 3, 4, 6, 8) if blocks % s == 0 and blocks // s >= 2]
    if m > max(MS):  # large M: big tiles, little split-K
        grid = itertools.product((64, 128), (64, 128), [s for s in splits if s <= 2], (3,), (4, 8))
    else:
        tiles_m = [16] if m <= 16 else [16, 32, 64]
        grid = itertools.product(tiles_m, (32, 64, 128), splits, (3, 4), (4,))
    out = []
    for bm, bn, split, stages, warps in grid:
        out.append({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": B.G, "GROUP_SIZE_M": 1,
                    "NUM_KSPLIT": split, "num_warps": warps, "num_stages": stages, "cache_modifier": None})
    return out


def operands(n: int, k: int, m: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5
    wq, ws = B.quant_weight(w, per_channel=False)
    xq, xs = B.group_quant(torch.randn(m, k, device="cuda", generator=gen).to(B.BF16))
    return xq, xs, wq, ws


def cases() -> list[tuple[int, int, int]]:
    return [(n, k, m) for n, k in SHAPES for m in (*MS, *LARGE_MS)]


def compile_part(part: int, parts: int) -> None:
    """Run each candidate of every ``parts``-th case once (Triton compiles it into its disk cache)."""
    for i, (n, k, m) in enumerate(cases()):
        if i % parts != part:
            continue
        args = operands(n, k, m)
        for cfg in candidates(m, k):
            try:
                B.aiter_gemm(*args, config=cfg)
            except Exception as e:  # noqa: BLE001
                log(f"[compile] N={n} K={k} M={m} {cfg}: {type(e).__name__}: {str(e)[:120]}")
        torch.cuda.synchronize()


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.float() - ref).norm() / ref.norm()).item()


def cublas(args: tuple[torch.Tensor, ...], rep_ms: int, ref: torch.Tensor | None = None) -> tuple[float, float]:
    """cuBLAS's block-wise GEMM on ``args``: (relative error, µs); NaN for both where it has no kernel."""
    if ref is None:
        ref = B.dequant(args[0], args[1]) @ B.dequant(args[2], args[3]).t()
    try:
        err = rel_err(B.scaled_mm(*args), ref)
        return err, gpu_timing.bench(lambda: B.scaled_mm(*args), rep_ms, 1)[0]
    except Exception as e:  # noqa: BLE001
        log(f"[cublas] M={args[0].shape[0]} N={args[2].shape[0]} K={args[0].shape[1]}: {str(e).splitlines()[0][:100]}")
        return float("nan"), float("nan")


def tune(rep_ms: int) -> dict[str, dict[str, dict[str, object]]]:
    table: dict[str, dict[str, dict[str, object]]] = {}
    for n, k, m in cases():
        args = operands(n, k, m)
        ref = B.dequant(args[0], args[1]) @ B.dequant(args[2], args[3]).t()
        best: tuple[float, dict[str, object] | None] | None = None
        tried = 0
        for cfg in candidates(m, k):
            try:
                err = rel_err(B.aiter_gemm(*args, config=cfg), ref)
                if not err < 1e-2:
                    log(f"[wrong] N={n} K={k} M={m} {cfg}: err {err:.1e}")
                    continue
                us = gpu_timing.bench(lambda a=args, c=cfg: B.aiter_gemm(*a, config=c), rep_ms, 1)[0]
            except Exception as e:  # noqa: BLE001
                log(f"[fail] N={n} K={k} M={m} {cfg}: {type(e).__name__}: {str(e)[:120]}")
                continue
            tried += 1
            if best is None or us < best[0]:
                best = (us, cfg)
        default_us = math.nan
        if m in MS:  # AITER's own large-M configs take milliseconds (gemm_h200.md): not timed there
            default_us = gpu_timing.bench(lambda a=args: B.aiter_gemm(*a), rep_ms, 1)[0]
            if best is None or default_us < best[0]:  # AITER's own config (null: the wrapper's choice) won
                best = (default_us, None)
        cublas_err, cublas_us = cublas(args, rep_ms, ref)
        entry: dict[str, object] = {"aiter_default_us": round(default_us, 2), "scaled_mm_us": round(cublas_us, 2),
                                    "scaled_mm_err": cublas_err, "tried": tried}
        if best is not None:
            entry.update(us=round(best[0], 2), config=best[1])
        table.setdefault(f"{n},{k}", {})[str(m)] = entry
        log(f"N={n} K={k} M={m}: tuned {entry.get('us', 'none')} us (of {tried}) | AITER's config "
            f"{default_us:.2f} us | cuBLAS {cublas_us:.2f} us err {cublas_err:.1e} | {entry.get('config')}")
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=B.TUNED)
    ap.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--rep-ms", type=int, default=5)
    ap.add_argument("--compile-part", default=None, help="(internal) i/n: compile that share of the cases")
    args = ap.parse_args()
    if args.compile_part:
        part, parts = map(int, args.compile_part.split("/"))
        compile_part(part, parts)
        return 0
    t0 = time.time()
    log("\n".join(gpu_timing.env_report()))
    procs = [subprocess.Popen([sys.executable, __file__, "--compile-part", f"{i}/{args.workers}"])
             for i in range(args.workers)]
    gpu_timing.wait_workers(procs, 400, t0)
    table = tune(args.rep_ms)
    name = torch.cuda.get_device_properties(0).name
    known = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            known = json.load(f)
    known[name] = table
    with open(args.out, "w") as f:
        json.dump(known, f, indent=1, sort_keys=True)
    log(f"wrote {args.out} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
