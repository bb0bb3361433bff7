"""DeepSeek-V3 decoder layer, norm/quant part, on an H200: before vs after the eqsat pass, measured.

The graph is ``benchmarks.graphs.models.deepseek_v3(layers=1)`` (hidden 7168, q_lora 1536, kv_lora
512 + rope 64, TP 8: attention output 16 x 128 = 2048, MLP intermediate 18432 / 8 = 2304; fp8 =
float8_e4m3fn, group 128, bf16 activations, eps 1e-6). Its norm/quant part has five sites; GEMMs and
attention are opaque stand-ins and are NOT timed: their outputs are fresh random bf16 tensors.

    site   graph (vLLM spelling)                                         input(s)
    add1   fused_add_rms_norm(x, residual, w_in) -> group quant          x, residual   (M, 7168)
    qkv    rms_norm(q_c, w_qa) -> group quant; rms_norm(kv_c, w_kva)     q_c = qkv[:, :1536], kv_c = qkv[:, 1536:2048]
                                                                         (split views of the (M, 2112) qkv_a output)
    attnq  group quant(attn)                                             attn (M, 2048)
    add2   fused_add_rms_norm(o, residual', w_post) -> group quant       o (M, 7168), residual' = add1's residual out
    silu   silu_and_mul(gate_up) -> group quant                          gate_up (M, 4608)

Variants (each a Python callable over CUDA tensors; the whole part is timed as one CUDA graph):

  before_aiter     the unfused graph on AITER's portable Triton kernels, exactly the kernels the h200
                   cost profile prices as "before": rmsnorm2d_fwd_with_add (add1, add2), rms_norm
                   (q_c, kv_c), fused_flatten_fp8_group_quant on y.view(M, 1, N) (every group quant),
                   eager F.silu(a) * b (silu_and_mul, 2 kernels).
  before_inductor  the unfused graph with vLLM's native decompositions compiled by Inductor, one
                   torch.compile region per vLLM op (the custom quant op is a graph break in vLLM, so
                   Inductor cannot fuse across it): native fused_add_rms_norm (fp32 add), native
                   rms_norm, native silu_and_mul (bf16, SiluAndMul.forward_native); every group quant
                   is still AITER's Triton fused_flatten_fp8_group_quant.
  after            exactly the kernels ``eqsat.optimize(deepseek_v3(1), profile="h200", sizes=M)``
                   chooses (PLAN below), each mapped to its AITER Triton kernel:
                     K_rmsnorm_add_fp8_group_quant    fused_rms_fp8_group_quant(x, w, eps, res1=r)
                     K_rmsnorm_fp8_group_quant        fused_rms_fp8_group_quant(x, w, eps)
                     K_mla_dual_rms_norm_group_quant  fused_rms_fp8_group_quant(q_c, w_qa, eps, inp2=kv_c,
                                                      inp2_weight=w_kva, inp2_epsilon=eps)
                     K_silu_mul_fp8_group_quant       act_mul_and_fp8_group_quant(gate_up, "silu", 128)
                     I_*                              the native chain eqsat's emitter inlines, compiled by
                                                      torch.compile(dynamic=False)
                   sites with no chosen kernel stay as in before_aiter (attnq: nothing fuses a bare quant).

PLAN is hard-coded (the device image has no egglog): it was produced on the CPU by ``--plan``, which runs
eqsat on the graph at each M and fails if the result differs from PLAN (so the mapping cannot go stale
silently). Run ``PYTHONPATH=. .venv/bin/python benchmarks/gpu/layer_speedup.py --plan`` here.

Checks (fresh random inputs, outputs poisoned with 0xFF before the checked call): every variant against
the eager fp32 reference of vLLM's native ops (fp8 outputs: dequantised q*s within 1.5 fp8 steps at the
reference magnitude, as benchmarks/gpu/measure.py; bf16 kv_c norm within 3 ulps; bf16 residuals
bit-equal for the fp32-add variants), and AFTER against each BEFORE directly (same 1.5-step rule, kv
within 3 ulps, residual bit-equal).

Timing: ``triton.testing.do_bench_cudagraph(fn, rep=10, return_mode="all")`` twice per row, median of
the 20 per-call times (as measure.py; the L2 is not flushed). Rows: each variant's whole part, and
each site alone (add2 alone reads the reference residual).

Device command (from the repo root here; .whl/ holds the amd-aiter wheel, see measure.py):

    run(kind="nvidia-h200", carry=[".whl"], timeout_s=600, command=
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
        ".whl/*.whl && export PYTHONPATH=/tmp/site || exit; export TORCHINDUCTOR_COMPILE_THREADS=2 "
        "PYTHONUNBUFFERED=1; set -o pipefail; python3 benchmarks/gpu/layer_speedup.py --out $OUT "
        "--warm-workers 6 --budget-s 470 2>&1 | tee $OUT/h200_layer_speedup.log")

Outputs under --out: h200_layer_speedup.csv (M,variant,scope,us,rep_medians_us,launches,check,detail).
``--dry-run`` runs the plumbing on the CPU (AITER under TRITON_INTERPRET=1, torch.compile replaced by
eager, no timing; needs triton on the path). Its checks mean nothing: under the interpreter AITER's
rms_norm / rmsnorm2d_fwd_with_add fail (tl.range with a tensor bound) and fp8/bf16 rounding is off.
Results: benchmarks/results/h200_layer_speedup.md.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import gpu_timing  # noqa: E402  (this folder: timing and the run's record)
import native  # noqa: E402  (this folder: vLLM's native ops, the checks)
from aiter_triton import load_aiter  # noqa: E402
from gpu_timing import log  # noqa: E402
from layer_variants import (  # noqa: E402
    SITES,
    VARIANTS,
    build_variant,
    compare,
    flat_tensors,
    make_compile,
    make_inputs,
    reference,
    site_fn,
    whole_fn,
)

DEFAULT_M = [1, 8, 64, 256, 1024, 4096]

# eqsat.optimize(deepseek_v3(layers=1), profile="h200", sizes=M).kernels_chosen, and the report's
# predicted_before_us / predicted_after_us (produced by --plan; --plan re-checks the kernels). From M = 1024 the
# silu + quant site stays two kernels (silu_and_mul, AITER's group quant): Inductor's chain, its quant split
# off where a GEMM reads it (Twin.quant_epilogue), is dearer there than both.
_SMALL = {"K_rmsnorm_add_fp8_group_quant": 2, "K_mla_dual_rms_norm_group_quant": 1, "K_silu_mul_fp8_group_quant": 1}
_LARGE = {"K_rmsnorm_add_fp8_group_quant": 2, "K_mla_dual_rms_norm_group_quant": 1}
PLAN: dict[int, dict[str, int]] = {1: _SMALL, 8: _SMALL, 64: _SMALL, 256: _SMALL, 1024: _LARGE, 4096: _LARGE}
PREDICTED_US: dict[int, tuple[float, float]] = {
    1: (18.66, 10.41), 8: (19.09, 10.68), 64: (22.55, 12.82),
    256: (34.41, 20.16), 1024: (81.86, 49.00), 4096: (271.65, 158.96),
}


# ---------------------------------------------------------------------------------------------------------
# --plan: run eqsat here (CPU) and compare with PLAN
# ---------------------------------------------------------------------------------------------------------
def run_plan(Ms) -> int:
    sys.path.insert(0, ROOT)
    import torch

    from eqsat.kernels.torch_ops import register_vllm_standins

    register_vllm_standins(torch.float8_e4m3fn)  # the H200's fp8 (first definition wins)
    import eqsat
    from benchmarks.graphs import models

    bad = 0
    for M in Ms:
        gm = models.deepseek_v3(layers=1)
        r = eqsat.optimize(gm, profile="h200", sizes=M)
        got = dict(sorted(r.kernels_chosen.items()))
        want = dict(sorted(PLAN.get(M, {}).items()))
        same = got == want
        bad += not same
        log(f"M={M:5d} {'OK ' if same else 'DIFF'} chosen={got} predicted {r.predicted_before_us:.2f} -> "
            f"{r.predicted_after_us:.2f} us (x{r.predicted_before_us / max(r.predicted_after_us, 1e-9):.2f})"
            + ("" if same else f"  PLAN={want}") + (f" error={r.error}" if r.error else ""))
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------------------------
# the run: compile-warming workers, timing, the tables
# ---------------------------------------------------------------------------------------------------------
def run_warm(args):
    import torch

    gpu_timing.setup_torch()
    A, _ = load_aiter(cpu=args.dry_run)
    dev = "cpu" if args.dry_run else "cuda"
    for M in args.M:
        inp = make_inputs(M, dev, seed=4242 + M)
        ref = reference(inp)
        for v in VARIANTS:
            try:
                sites, _ = build_variant(v, M, A, make_compile(args.dry_run), PLAN[M])
                fn = whole_fn(sites, inp)
                fn()
                fn()
                for s in SITES:
                    site_fn(sites, s, inp, ref)()
            except Exception as e:  # noqa: BLE001
                log(f"[warm M={M}] {v}: {type(e).__name__}: {e}")
        if dev == "cuda":
            torch.cuda.synchronize()
    log(f"[warm] done M={args.M}")


def spawn_warm(args):
    t0 = time.time()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")
    k = min(args.warm_workers, len(args.M))
    shards = [args.M[i::k] for i in range(k)]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--warm-only", "--M", *map(str, sh)]
                              + (["--dry-run"] if args.dry_run else []), env=env) for sh in shards]
    gpu_timing.wait_workers(procs, args.warm_timeout_s, t0)


def run_main(args):
    import torch

    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    log("\n".join(gpu_timing.env_report()))
    log(f"args: {vars(args)}")
    gpu_timing.setup_torch()
    dev = "cpu" if args.dry_run else "cuda"
    A, patches = load_aiter(cpu=args.dry_run)
    for p in patches:
        log(f"[patch] {p}")
    if not args.dry_run:
        gpu_timing.gpu_state("start")
    if args.warm_workers > 0:
        spawn_warm(args)

    fcsv = open(os.path.join(args.out, "h200_layer_speedup.csv"), "w", newline="")  # noqa: SIM115
    wc = csv.writer(fcsv)
    wc.writerow(["M", "variant", "scope", "us", "rep_medians_us", "launches", "check", "detail"])
    table = {}
    for M in args.M:
        if time.time() - t_start > args.budget_s:
            log(f"[budget] {args.budget_s} s spent: stopping before M={M}")
            break
        inp = make_inputs(M, dev, seed=M * 7 + 1)
        ref = reference(inp)
        outs_whole = {}
        for v in VARIANTS:
            t0 = time.time()
            try:
                sites, labels = build_variant(v, M, A, make_compile(args.dry_run), PLAN[M])
                fn = whole_fn(sites, inp)
                res = fn()  # compile / JIT
                if dev == "cuda":
                    torch.cuda.synchronize()
                native.poison_like(flat_tensors(res))
                del res
                res = fn()
                if dev == "cuda":
                    torch.cuda.synchronize()
                ok, worst, detail = compare(res, ref, exact_res=(v != "before_aiter"))
                outs_whole[v] = res
                launches = ""
                us, meds = "", []
                if dev == "cuda":
                    try:
                        launches, names = gpu_timing.count_launches(fn)
                        detail += f" | kernels: {';'.join(names)}"
                    except Exception as e:  # noqa: BLE001
                        launches = f"? ({type(e).__name__})"
                    us, meds = gpu_timing.bench(fn, args.rep_ms, args.repeats)
                table[(M, v)] = (us, ok, worst, launches, labels)
                wc.writerow([M, v, "whole", f"{us:.3f}" if us != "" else "", ";".join(f"{m:.3f}" for m in meds),
                             launches, "ok" if ok else "FAIL", detail[:2000]])
                log(f"M={M:5d} {v:16s} whole us={us if us == '' else f'{us:8.2f}'} launches={launches} "
                    f"check={'ok' if ok else 'FAIL'} worst={worst:.2f} steps ({time.time() - t0:.1f} s) "
                    f"{detail.split(' | ')[0]}")
                if args.sites:
                    for s in SITES:
                        sf = site_fn(sites, s, inp, ref)
                        r = sf()
                        sok, sworst, sdet = compare(r, ref, exact_res=(v != "before_aiter"))
                        del r
                        sus, smeds = ("", [])
                        if dev == "cuda":
                            sus, smeds = gpu_timing.bench(sf, args.rep_ms, args.repeats)
                        table[(M, v, s)] = sus
                        wc.writerow([M, v, s, f"{sus:.3f}" if sus != "" else "", ";".join(f"{m:.3f}" for m in smeds),
                                     "", "ok" if sok else "FAIL", f"{labels[s]} | {sdet}"])
                        log(f"         {v:16s} {s:5s} us={sus if sus == '' else f'{sus:8.2f}'} "
                            f"{'ok' if sok else 'FAIL'} {labels[s]}")
            except Exception as e:  # noqa: BLE001
                err = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                log(f"[error] M={M} {v}: {err}")
                traceback.print_exc()
                wc.writerow([M, v, "whole", "", "", "", "ERROR", err])
            fcsv.flush()
        # AFTER against each BEFORE directly
        if "after" in outs_whole:
            for b in ("before_aiter", "before_inductor"):
                if b in outs_whole:
                    ok, worst, detail = compare(outs_whole["after"], outs_whole[b], exact_res=(b != "before_aiter"))
                    table[(M, f"after_vs_{b}")] = (ok, worst)
                    wc.writerow([M, f"after_vs_{b}", "check", "", "", "", "ok" if ok else "FAIL", detail])
                    log(f"M={M:5d} after vs {b}: {'ok' if ok else 'FAIL'} worst={worst:.2f} steps {detail}")
        fcsv.flush()
        del inp, ref, outs_whole
        if dev == "cuda":
            torch.cuda.empty_cache()
    fcsv.close()
    if not args.dry_run:
        gpu_timing.gpu_state("end")

    log("\n| M | before_aiter µs | before_inductor µs | after µs | speedup vs aiter | speedup vs inductor | "
        "predicted (model) | after kernels |")
    log("|---|---|---|---|---|---|---|---|")
    for M in args.M:
        row = [table.get((M, v)) for v in VARIANTS]
        if not all(row):
            continue
        (ba, *_), (bi, *_), (af, _, _, _, labels) = row

        def f(a, b):
            return f"{a / b:.2f}x" if a != "" and b else "-"

        pb, pa = PREDICTED_US[M]
        kern = ", ".join(f"{k} x{n}" for k, n in sorted(PLAN[M].items()))
        log(f"| {M} | {ba if ba == '' else f'{ba:.2f}'} | {bi if bi == '' else f'{bi:.2f}'} | "
            f"{af if af == '' else f'{af:.2f}'} | {f(ba, af)} | {f(bi, af)} | {pb:.2f} -> {pa:.2f} "
            f"({pb / pa:.2f}x) | {kern} |")
    if args.sites:
        log("\nper site (µs): before_aiter / before_inductor / after")
        for M in args.M:
            cells = []
            for s in SITES:
                vals = [table.get((M, v, s), "") for v in VARIANTS]
                cells.append(f"{s} " + "/".join("-" if x == "" else f"{x:.2f}" for x in vals))
            log(f"  M={M:5d}  " + "  ".join(cells))
    log(f"total wall {time.time() - t_start:.1f} s")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--M", type=int, nargs="+", default=DEFAULT_M)
    ap.add_argument("--plan", action="store_true", help="run eqsat here (CPU) and check PLAN")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(HERE, "..", "results"))
    ap.add_argument("--rep-ms", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-sites", dest="sites", action="store_false", help="time only the whole part")
    ap.add_argument("--warm-workers", type=int, default=0)
    ap.add_argument("--warm-timeout-s", type=float, default=300.0)
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dry-run", action="store_true", help="CPU plumbing check, TRITON_INTERPRET=1, no timing")
    args = ap.parse_args(argv)
    if args.plan:
        return run_plan(args.M)
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.warm_only:
        run_warm(args)
    else:
        run_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
