"""H200 calibration for the cost model: fused AITER Triton kernels vs their unfused parts vs Inductor.

Runs on the lent NVIDIA H200 (see /work/.library/device/README.md). It times, for M in a list and N
a grid (set ``grid``; silu: the input is (M, 2N)) or each model's own width (set ``models``), group
size G = 128, bf16 activations, fp8 = float8_e4m3fn (max 448), eps 1e-6, with
``triton.testing.do_bench_cudagraph`` (CUDA-graph replay, median):

  fused (AITER Triton, loaded from the installed amd-aiter wheel, aiter/__init__.py never runs)
    rms_group_quant        fused_rms_fp8_group_quant(x, w, eps, group_size=128)
    add_rms_group_quant    fused_rms_fp8_group_quant(x, w, eps, res1=r, group_size=128)
    silu_group_quant       act_mul_and_fp8_group_quant(x, "silu", 128)
  unfused parts
    rms_norm               AITER Triton rms_norm (writes y and rsigma)
    add_rms_norm           AITER Triton rmsnorm2d_fwd_with_add (bf16 add; writes out, res_out, rsigma)
    group_quant            AITER Triton fused_flatten_fp8_group_quant on x.view(M, 1, N) (plain 1x128 quant)
    silu_mul               eager F.silu(x[:, :N]) * x[:, N:] (2 kernels)
  Inductor: torch.compile(dynamic=False) of vLLM's native decomposition (see native_* below)
    inductor:rms_group_quant, inductor:add_rms_group_quant, inductor:silu_group_quant
  set ``models`` (calibration_cases.WIDTHS), each with its Inductor twin inductor:<key>
    add_rms_pad            fused_add_rmsnorm_pad(x, w, eps, r, 256), gpt-oss N = 2880 (padded to 3072)
    rms_static_quant       fused_rms_fp8_per_tensor_static_quant(x, w, eps, s), Llama N = 4096
    add_rms_static_quant   the same with res1=r
    rms_token_quant        rmsnorm2d_fwd_with_dynamicquant(q, x, s, w, eps), Llama N = 4096 (per-token scale)
    add_rms_token_quant    rmsnorm2d_fwd_with_add_dynamicquant(q, x, r, r_out, s, w, eps)
    mla_dual_rms_norm_group_quant  fused_rms_fp8_group_quant(q_c, qw, eps, kv_c, kvw, eps): DeepSeek's
                           q latent (N = 1536) normed and group-quantized, its kv latent (512) normed, both
                           split views of one (M, 1536 + 512 + 64) projection

Every kernel that produces fp8 is checked against the eager native decomposition on fresh random inputs:
the dequantised q*s must lie within 1.5 fp8 steps (step taken at the reference magnitude) of the
reference's q*s, no NaN, and (add variant) the bf16 residual output must be bit-equal. The bf16 outputs of
rms_norm / add_rms_norm / silu_mul must lie within 2 / 3 / 2 bf16 ulps of the reference. Outputs are
poisoned (all-ones bytes = NaN) before the checked call.

``bytes`` (minimum DRAM traffic of the implementation: every input read once, every output written once;
a = 2 bytes bf16, w = 2 bytes weight, q = 1 byte fp8, s = 4 bytes fp32 scale, G = N / 128 groups):
    rms_group_quant, inductor:rms_group_quant          R = M*N*2 + N*2        W = M*N + M*G*4
    add_rms_group_quant, inductor:add_rms_group_quant  R = 2*M*N*2 + N*2      W = M*N + M*G*4 + M*N*2
    silu_group_quant, inductor:silu_group_quant        R = 2*M*N*2            W = M*N + M*G*4
    rms_norm                                           R = M*N*2 + N*2        W = M*N*2 + M*4 (rsigma)
    add_rms_norm                                       R = 2*M*N*2 + N*2      W = 2*M*N*2 + M*4 (rsigma)
    group_quant                                        R = M*N*2              W = M*N + M*G*4
    silu_mul (eager, two kernels)                      silu: R = M*N*2, W = M*N*2; mul: R = 2*M*N*2, W = M*N*2
                                                       total 10*M*N
    add_rms_pad (P = N rounded up to 256)              R = 2*M*N*2 + N*2      W = M*P*2 + M*N*2
    rms_static_quant (s: 4 bytes)                      R = M*N*2 + N*2 + 4    W = M*N
    add_rms_static_quant                               R = 2*M*N*2 + N*2 + 4  W = M*N + M*N*2
    rms_token_quant                                    R = M*N*2 + N*2        W = M*N + M*4
    add_rms_token_quant                                R = 2*M*N*2 + N*2      W = M*N + M*4 + M*N*2
    mla_dual_rms_norm_group_quant (K = 512)            R = M*(N+K)*2 + (N+K)*2  W = M*N + M*G*4 + M*K*2
The Inductor rows count the op's minimum (as if Inductor emitted one kernel); ``launches`` says how many
kernels it really emitted. ``launches`` is counted with the PyTorch profiler (kernel events of one call);
if the profiler fails, the expected count is written instead (the detail file says which).

Outputs (under --out, default $OUT or benchmarks/results):
    <tag>_calibration.csv         key,M,N,G,dtype,device,us,bytes,launches,check (tag, and the device column:
                                  the card's profile name, h200 / h100, from gpu_timing.gpu_tag; dry run: dryrun)
    <tag>_calibration_detail.csv  per row: both timing repeats, spread, check error, kernel names
    h200_calibration.log          the run's log, by the tee below (environment, patches, GPU clocks, copy bandwidth)

How to run it through the device tool (from the repo root here; the amd-aiter wheel must be in .whl/,
fetched with `python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
--platform manylinux_2_28_x86_64 -d .whl amd-aiter==0.1.7.post2.dev18`, and `/.whl/` in .git/info/exclude):

    run(kind="nvidia-h200", carry=[".whl"], timeout_s=600, command=
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
        ".whl/*.whl && export PYTHONPATH=/tmp/site || exit; export TORCHINDUCTOR_COMPILE_THREADS=2 "
        "PYTHONUNBUFFERED=1; set -o pipefail; python3 benchmarks/gpu/measure.py --out $OUT --warm-workers 7 "
        "--budget-s 480 2>&1 | tee $OUT/h200_calibration.log")

then copy $OUT/h200_calibration*.{csv,log} into benchmarks/results/. Subsets: --M 1 4096 --N 7168 --keys
rms_group_quant inductor:rms_group_quant; --set models: only the models' keys, at their own widths
(--N overrides the widths of every key measured). --warm-workers K first compiles every kernel (AITER JIT and
Inductor) in K parallel processes to fill the on-disk caches; the timing itself always runs in one process.
--dry-run runs the plumbing on the CPU (TRITON_INTERPRET=1, no timing) for a quick local check.

The parts, beside this file: aiter_triton.py (loading the kernels), native.py (the reference and the
checks), calibration_cases.py (each key's call and bytes), gpu_timing.py (timing and the run's record).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
import traceback

from aiter_triton import load_aiter
from calibration_cases import (
    EXPECTED_LAUNCHES,
    GROUPED,
    KEYS,
    SETS,
    make_case,
    make_inputs,
    min_bytes,
    widths,
)
from gpu_timing import (
    bench,
    copy_bandwidth,
    count_launches,
    env_report,
    gpu_state,
    gpu_tag,
    log,
    setup_torch,
    wait_workers,
)
from native import poison_like

DEFAULT_M = [1, 8, 64, 256, 1024, 4096, 8192]
DEFAULT_N = [1536, 2048, 4096, 7168]


def plan(args):
    """(M, N, keys) to measure: each key at every M and at --N, else at its widths (its model's or the grid's)."""
    by_n: dict[int, list[str]] = {}
    for key in args.keys:
        for n in args.N or widths(key, DEFAULT_N):
            by_n.setdefault(n, []).append(key)
    return [(M, N, keys) for N, keys in by_n.items() for M in args.M]


def run_warm(args):
    """Compile/JIT every (key, shape) of this shard once: fills the Triton and Inductor on-disk caches."""
    import torch

    setup_torch()
    dev = "cpu" if args.dry_run else "cuda"
    A, _ = load_aiter(cpu=args.dry_run)
    i, k = (int(v) for v in args.shard.split("/"))
    shapes = plan(args)[i::k]
    for M, N, keys in shapes:
        inp = make_inputs(M, N, args.G, dev, seed=1000 + M * 7 + N)
        for key in keys:
            try:
                fn, _, _ = make_case(key, M, N, args.G, A, dev, inp)
                fn()
                fn()
            except Exception as e:  # noqa: BLE001
                log(f"[warm {i}/{k}] {key} M={M} N={N}: {type(e).__name__}: {e}")
        if dev == "cuda":
            torch.cuda.synchronize()
        del inp
    log(f"[warm {i}/{k}] done {len(shapes)} shapes")


def spawn_warm(args):
    k = args.warm_workers
    t0 = time.time()
    base = [
        sys.executable,
        os.path.abspath(__file__),
        "--warm-only",
        "--G",
        str(args.G),
        "--M",
        *map(str, args.M),
        *(["--N", *map(str, args.N)] if args.N else []),
        "--keys",
        *args.keys,
    ] + (["--dry-run"] if args.dry_run else [])
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")
    procs = [subprocess.Popen(base + ["--shard", f"{i}/{k}"], env=env) for i in range(k)]
    wait_workers(procs, args.warm_timeout_s, t0)


def run_main(args):
    import torch

    t_start = time.time()
    out_dir = args.out
    os.makedirs(out_dir, exist_ok=True)
    log("\n".join(env_report()))
    log(f"args: {vars(args)}")
    setup_torch()
    dev = "cpu" if args.dry_run else "cuda"
    A, patches = load_aiter(cpu=args.dry_run)
    for p in patches:
        log(f"[patch] {p}")
    if not args.dry_run:
        gpu_state("start")
        try:
            log(f"[copy] device-to-device copy, 1 GiB, read+write counted: {copy_bandwidth():.2f} TB/s")
        except Exception as e:  # noqa: BLE001
            log(f"[copy] failed: {e}")
    if args.warm_workers > 0:
        spawn_warm(args)

    tag = "dryrun" if args.dry_run else gpu_tag()  # the card's profile name (h200, h100, ...)
    csv_path = os.path.join(out_dir, f"{tag}_calibration.csv")
    det_path = os.path.join(out_dir, f"{tag}_calibration_detail.csv")
    fcsv = open(csv_path, "w", newline="")  # noqa: SIM115
    fdet = open(det_path, "w", newline="")  # noqa: SIM115
    wc, wd = csv.writer(fcsv), csv.writer(fdet)
    wc.writerow(["key", "M", "N", "G", "dtype", "device", "us", "bytes", "launches", "check"])
    wd.writerow(
        [
            "key",
            "M",
            "N",
            "us",
            "rep_medians_us",
            "spread_pct",
            "check_err",
            "q_or_bf16_mismatch_frac",
            "launches_src",
            "kernels",
            "error",
        ]
    )
    summary = {}
    stopped = False
    for M, N, keys in plan(args):
        if stopped:
            break
        inp = make_inputs(M, N, args.G, dev, seed=M * 7 + N)
        for key in keys:
            if time.time() - t_start > args.budget_s:
                log(f"[budget] {args.budget_s} s spent: stopping before {key} M={M} N={N}")
                stopped = True
                break
            t0 = time.time()
            us, meds, launches, lsrc, names, check, err, mism, error = "", [], "", "", [], "", "", "", ""
            try:
                fn, outs, chk = make_case(key, M, N, args.G, A, dev, inp)
                res = fn()  # compile / JIT
                if dev == "cuda":
                    torch.cuda.synchronize()
                poison_like(outs(res))
                del res
                res = fn()
                if dev == "cuda":
                    torch.cuda.synchronize()
                ok, err, mism = chk(res)
                check = "ok" if ok else "fail"
                del res
                if dev == "cuda":
                    try:
                        launches, names = count_launches(fn)
                        lsrc = "profiler"
                        if launches != EXPECTED_LAUNCHES[key]:  # a twin's: the Twin(launches) its row prices
                            log(f"[launches] {key} M={M} N={N}: {launches}, expected {EXPECTED_LAUNCHES[key]}")
                    except Exception as e:  # noqa: BLE001
                        launches, lsrc = EXPECTED_LAUNCHES[key], f"assumed ({type(e).__name__})"
                    us, meds = bench(fn, args.rep_ms, args.repeats)
                else:
                    launches, lsrc = EXPECTED_LAUNCHES[key], "assumed (dry run)"
            except Exception as e:  # noqa: BLE001
                error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                log(f"[error] {key} M={M} N={N}: {error}")
                traceback.print_exc()
            if us != "":
                spread = 100.0 * (max(meds) - min(meds)) / us if us else 0.0
                wc.writerow(
                    [
                        key,
                        M,
                        N,
                        args.G,
                        "bf16",
                        tag,
                        f"{us:.3f}",
                        min_bytes(key, M, N, args.G),
                        launches,
                        check,
                    ]
                )
                summary[(key, M, N)] = us
            else:
                spread = ""
            if us != "" or error or args.dry_run:
                wd.writerow(
                    [
                        key,
                        M,
                        N,
                        f"{us:.3f}" if us != "" else "",
                        ";".join(f"{m:.3f}" for m in meds),
                        f"{spread:.1f}" if spread != "" else "",
                        f"{err:.3f}" if err != "" else "",
                        f"{mism:.5f}" if mism != "" else "",
                        lsrc,
                        ";".join(names)[:400],
                        error,
                    ]
                )
            fcsv.flush()
            fdet.flush()
            log(
                f"{key:30s} M={M:5d} N={N:5d} us={us if us == '' else f'{us:9.3f}'} launches={launches} "
                f"check={check} err={err if err == '' else f'{err:.2f}'} ({time.time() - t0:.1f} s)"
            )
        del inp
        if dev == "cuda":
            torch.cuda.empty_cache()
    fcsv.close()
    fdet.close()
    if not args.dry_run:
        gpu_state("end")
    # short table last: fused vs unfused vs inductor at M = 1 and 4096, at the grid's ends and the models' widths
    log("\nsummary (us): key M N")
    for (key, M, N), us in summary.items():
        if M in (1, 4096) and N in (1536, 7168, *(n for k in SETS["models"] for n in widths(k, []))):
            log(f"  {key:40s} {M:5d} {N:5d} {us:9.3f}")
    log(f"total wall {time.time() - t_start:.1f} s; csv rows {len(summary)}")


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="sets of keys (--set):\n" + "\n".join(f"  {n}: {' '.join(k)}" for n, k in SETS.items())
        + "\nonly the models' keys (gpt-oss pad, Llama static quant, DeepSeek MLA, and their Inductor twins):"
        "\n  measure.py --set models --out $OUT --warm-workers 7",
    )
    ap.add_argument("--M", type=int, nargs="+", default=DEFAULT_M)
    ap.add_argument("--N", type=int, nargs="+", default=None,
                    help=f"widths for every key (default: a models key's own, else {' '.join(map(str, DEFAULT_N))})")
    ap.add_argument("--G", type=int, default=128, help="quant group size")
    keys = ap.add_mutually_exclusive_group()
    keys.add_argument("--keys", nargs="+", default=KEYS, choices=KEYS)
    keys.add_argument("--set", choices=sorted(SETS), help="measure only this set of keys (see below)")
    ap.add_argument(
        "--out", default=os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "..", "results")
    )
    ap.add_argument(
        "--rep-ms", type=float, default=10.0, help="do_bench_cudagraph rep (ms of kernel time per graph)"
    )
    ap.add_argument(
        "--repeats", type=int, default=2, help="independent do_bench_cudagraph runs per row (10 replays each)"
    )
    ap.add_argument("--warm-workers", type=int, default=0, help="parallel compile processes before timing")
    ap.add_argument("--warm-timeout-s", type=float, default=300.0)
    ap.add_argument(
        "--budget-s", type=float, default=1e9, help="stop starting new rows after this many seconds"
    )
    ap.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    ap.add_argument(
        "--dry-run", action="store_true", help="CPU plumbing check under TRITON_INTERPRET=1, no timing"
    )
    args = ap.parse_args(argv)
    if args.set:
        args.keys = SETS[args.set]
    if any(n % args.G for M, n, ks in plan(args) if set(k.split(":")[-1] for k in ks) & GROUPED):
        ap.error("the N of every group-quant key must be a multiple of G")
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.warm_only:
        run_warm(args)
    else:
        run_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
