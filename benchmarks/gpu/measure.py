"""H200 calibration for the cost model: fused AITER Triton kernels vs their unfused parts vs Inductor.

Runs on the lent NVIDIA H200 (see /work/.library/device/README.md). It times, for a grid of shapes
M x N (silu: the input is (M, 2N)), group size G = 128, bf16 activations, fp8 = float8_e4m3fn (max 448),
eps 1e-6, with ``triton.testing.do_bench_cudagraph`` (CUDA-graph replay, median):

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
The Inductor rows count the op's minimum (as if Inductor emitted one kernel); ``launches`` says how many
kernels it really emitted. ``launches`` is counted with the PyTorch profiler (kernel events of one call);
if the profiler fails, the expected count is written instead (the detail file says which).

Outputs (under --out, default $OUT or benchmarks/results):
    h200_calibration.csv          key,M,N,G,dtype,device,us,bytes,launches,check
    h200_calibration_detail.csv   per row: both timing repeats, spread, check error, kernel names
    h200_calibration.log          the run's log (environment, patches, GPU clocks, copy bandwidth)

How to run it through the device tool (from the repo root here; the amd-aiter wheel must be in .whl/,
fetched with `python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
--platform manylinux_2_28_x86_64 -d .whl amd-aiter==0.1.7.post2.dev18`, and `/.whl/` in .git/info/exclude):

    run(kind="nvidia-h200", carry=[".whl"], timeout_s=600, command=
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
        ".whl/*.whl && export PYTHONPATH=/tmp/site || exit; export TORCHINDUCTOR_COMPILE_THREADS=2 "
        "PYTHONUNBUFFERED=1; set -o pipefail; python3 benchmarks/gpu/measure.py --out $OUT --warm-workers 7 "
        "--budget-s 480 2>&1 | tee $OUT/h200_calibration.log")

then copy $OUT/h200_calibration*.{csv,log} into benchmarks/results/. Subsets: --M 1 4096 --N 7168 --keys
rms_group_quant inductor:rms_group_quant. --warm-workers K first compiles every kernel (AITER JIT and
Inductor) in K parallel processes to fill the on-disk caches; the timing itself always runs in one process.
--dry-run runs the plumbing on the CPU (TRITON_INTERPRET=1, no timing) for a quick local check.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys
import time
import traceback
import types

KEYS = [
    "rms_group_quant",
    "add_rms_group_quant",
    "silu_group_quant",
    "rms_norm",
    "add_rms_norm",
    "group_quant",
    "silu_mul",
    "inductor:rms_group_quant",
    "inductor:add_rms_group_quant",
    "inductor:silu_group_quant",
]
EXPECTED_LAUNCHES = {k: 1 for k in KEYS} | {"silu_mul": 2}
DEFAULT_M = [1, 8, 64, 256, 1024, 4096, 8192]
DEFAULT_N = [1536, 2048, 4096, 7168]
FP8_MAX = 448.0
EPS = 1e-6

PATCHES: list[str] = []  # what load_aiter had to do, for the log and the .md


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------------------------------------
# bytes model (documented in the module docstring)
# ---------------------------------------------------------------------------------------------------------
def min_bytes(key: str, M: int, N: int, G: int) -> int:
    ng = N // G
    base = key.split(":")[-1]
    if base == "rms_group_quant":
        return M * N * 2 + N * 2 + M * N + M * ng * 4
    if base == "add_rms_group_quant":
        return 2 * M * N * 2 + N * 2 + M * N + M * ng * 4 + M * N * 2
    if base == "silu_group_quant":
        return 2 * M * N * 2 + M * N + M * ng * 4
    if base == "rms_norm":
        return M * N * 2 + N * 2 + M * N * 2 + M * 4
    if base == "add_rms_norm":
        return 2 * M * N * 2 + N * 2 + 2 * M * N * 2 + M * 4
    if base == "group_quant":
        return M * N * 2 + M * N + M * ng * 4
    if base == "silu_mul":
        return (M * N * 2 + M * N * 2) + (2 * M * N * 2 + M * N * 2)
    raise KeyError(key)


# ---------------------------------------------------------------------------------------------------------
# loading AITER's Triton kernels from the installed wheel without aiter/__init__.py
# ---------------------------------------------------------------------------------------------------------
def _find_aiter_dir() -> str:
    for p in sys.path:
        d = os.path.join(p or os.getcwd(), "aiter")
        if os.path.isfile(os.path.join(d, "ops", "triton", "fused_fp8_quant.py")):
            return d
    raise RuntimeError(
        "amd-aiter is not installed on sys.path (install the wheel with pip --target, PYTHONPATH)"
    )


def load_aiter(cpu: bool = False) -> dict:
    import importlib

    import torch

    d = _find_aiter_dir()
    pkg = types.ModuleType("aiter")
    pkg.__path__ = [d]  # a namespace stub: aiter/__init__.py (ROCm JIT setup) never runs
    pkg.__file__ = os.path.join(d, "__init__.py")
    sys.modules["aiter"] = pkg
    PATCHES.append(
        f"sys.modules['aiter'] = empty package stub with __path__=[{d}] (aiter/__init__.py not run)"
    )

    dt = types.ModuleType("aiter.dtypes")
    dt.fp8 = torch.float8_e4m3fn
    dt.bf16, dt.fp16, dt.fp32, dt.i8, dt.i32 = (
        torch.bfloat16,
        torch.float16,
        torch.float32,
        torch.int8,
        torch.int32,
    )
    sys.modules["aiter.dtypes"] = dt
    pkg.dtypes = dt
    PATCHES.append(
        "sys.modules['aiter.dtypes'] stub: fp8 = torch.float8_e4m3fn (default dtype_quant; also passed explicitly)"
    )

    ai = types.ModuleType("aiter.ops.triton.utils._triton.arch_info")
    ai.get_arch = lambda: "gfx950"
    ai.get_device = lambda: "MI350X"
    ai.is_fp4_avail = lambda: False
    ai.is_fp8_avail = lambda: True
    sys.modules["aiter.ops.triton.utils._triton.arch_info"] = ai
    PATCHES.append(
        "sys.modules['aiter.ops.triton.utils._triton.arch_info'] stub: get_arch() -> 'gfx950' "
        "(on CUDA the real one returns the int 90 and utils/types.py raises TypeError at import; "
        "'gfx950' selects float8_e4m3fn there)"
    )
    if cpu:
        di = types.ModuleType("aiter.ops.triton.utils.device_info")
        di.get_num_sms = lambda: 4
        di.get_num_xcds = lambda: 1
        sys.modules["aiter.ops.triton.utils.device_info"] = di

    mods = {}
    for name in ("fused_fp8_quant", "activation", "rmsnorm"):
        mods[name] = importlib.import_module(f"aiter.ops.triton.{name}")
    assert "aiter.jit" not in sys.modules, "aiter.jit was imported: the stub leaked"

    # Hopper port checks (aiter-kernels.md section 5): no waves_per_eu launch kwargs and no tl.assume in the
    # kernels used here; verify instead of assuming, and report.
    import inspect

    from aiter.ops.triton._triton_kernels import activation as k_act
    from aiter.ops.triton._triton_kernels import fused_fp8_quant as k_fq
    from aiter.ops.triton._triton_kernels import rmsnorm as k_rms

    used = [
        k_fq._fused_rms_fp8_group_quant_kernel,
        k_fq._fused_flatten_fp8_group_quant_kernel,
        k_act._act_mul_and_dynamic_fp8_group_quant_kernel,
        k_rms._rms_norm_kernel,
        k_rms._fused_add_rmsnorm_kernel,
    ]
    for k in used:
        fn = getattr(k, "fn", k)
        while hasattr(fn, "fn"):
            fn = fn.fn
        src = inspect.getsource(fn)
        if "tl.assume" in src:
            PATCHES.append(f"WARNING: {fn.__name__} contains tl.assume (not patched)")
    for name, m in mods.items():
        src = inspect.getsource(m)
        for fname in (
            "fused_rms_fp8_group_quant",
            "fused_flatten_fp8_group_quant",
            "act_mul_and_fp8_group_quant",
            "rms_norm",
            "rmsnorm2d_fwd_with_add",
        ):
            f = getattr(m, fname, None)
            if f is not None and "waves_per_eu=" in "".join(
                ln for ln in inspect.getsource(f).splitlines() if not ln.strip().startswith("#")
            ):
                PATCHES.append(f"WARNING: {name}.{fname} passes waves_per_eu (not patched)")
        del src
    PATCHES.append(
        "no kernel source patches were needed: the 5 kernels used have no tl.assume, and the wrappers "
        "used pass no waves_per_eu (act_mul_and_fp8_group_quant has it commented out)"
    )
    return {
        "fused_rms_fp8_group_quant": mods["fused_fp8_quant"].fused_rms_fp8_group_quant,
        "fused_flatten_fp8_group_quant": mods["fused_fp8_quant"].fused_flatten_fp8_group_quant,
        "act_mul_and_fp8_group_quant": mods["activation"].act_mul_and_fp8_group_quant,
        "rms_norm": mods["rmsnorm"].rms_norm,
        "rmsnorm2d_fwd_with_add": mods["rmsnorm"].rmsnorm2d_fwd_with_add,
    }


# ---------------------------------------------------------------------------------------------------------
# vLLM's native decomposition (what Inductor sees when no custom kernel is chosen); also the check reference
# ---------------------------------------------------------------------------------------------------------
def native_group_quant(y, g: int = 128):
    import torch

    M, N = y.shape
    yg = y.view(-1, N // g, g)
    amax = yg.abs().amax(dim=-1, keepdim=True).float()
    s = (amax / FP8_MAX).clamp_min(1.0 / (FP8_MAX * 512.0))
    q = (yg / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(M, N), s.view(M, N // g)


def native_rms(x, w, eps: float = EPS):
    xf = x.float()
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    return (xf * (var + eps).rsqrt()).to(x.dtype) * w


def native_rms_group_quant(x, w):
    return native_group_quant(native_rms(x, w))


def native_add_rms_group_quant(x, r, w):
    xf = x.float() + r.float()
    res = xf.to(x.dtype)
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    y = (xf * (var + EPS).rsqrt()).to(x.dtype) * w
    q, s = native_group_quant(y)
    return q, s, res


def native_silu_group_quant(x):
    import torch.nn.functional as F

    n = x.shape[1] // 2
    y = (F.silu(x[:, :n].float()) * x[:, n:].float()).to(x.dtype)
    return native_group_quant(y)


# ---------------------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------------------
def _dequant(q, s, g):
    M, N = q.shape
    return (q.float().view(M, N // g, g) * s.float().view(M, N // g, 1)).view(M, N)


def check_quant(q, s, q_ref, s_ref, g, tol_steps=1.5):
    """Max error of dequantised q*s against the reference, in fp8 steps at the reference's magnitude."""
    import torch

    d = _dequant(q, s, g)
    r = _dequant(q_ref, s_ref, g)
    if not torch.isfinite(d).all():
        return False, float("inf"), 1.0
    M, N = q.shape
    sr = s_ref.float().view(M, N // g, 1).expand(M, N // g, g).reshape(M, N)
    mag = torch.maximum(d.abs(), r.abs()) / sr  # in reference q units
    e = torch.floor(torch.log2(mag.clamp(min=2.0**-6))).clamp(max=8.0)
    step = torch.exp2(e - 3.0) * sr
    err = ((d - r).abs() / step).max().item()
    mism = (q.view(torch.uint8) != q_ref.view(torch.uint8)).float().mean().item()
    return err <= tol_steps, err, mism


def check_bf16(y, ref, tol_ulps):
    import torch

    if not torch.isfinite(y.float()).all():
        return False, float("inf"), 1.0
    yf, rf = y.float(), ref.float()
    ulp = torch.exp2(torch.floor(torch.log2(rf.abs().clamp(min=1e-30))) - 7.0)
    err = ((yf - rf).abs() / ulp).max().item()
    mism = (yf != rf).float().mean().item()
    return err <= tol_ulps, err, mism


def poison_like(outs):
    """Fill the previous call's outputs with 0xFF bytes (NaN in bf16, fp32 and fp8 e4m3fn) before they are freed:
    the next call's outputs reuse those allocator blocks (or, for preallocated outputs, those very buffers), so an
    element the kernel fails to write shows up as NaN in the check."""
    import torch

    for o in outs:
        if isinstance(o, torch.Tensor):
            try:
                o.view(torch.uint8).fill_(0xFF)
            except RuntimeError:
                o.fill_(float("nan"))


# ---------------------------------------------------------------------------------------------------------
# per-shape cases
# ---------------------------------------------------------------------------------------------------------
def make_case(key, M, N, G, A, dev, inp):
    """Return (fn, outputs_of(result) -> list of tensors, checker(result) -> (ok, err, mism))."""
    import torch
    import torch.nn.functional as F

    x, r, w, xs = inp["x"], inp["r"], inp["w"], inp["xs"]
    ref = inp["ref"]
    fp8 = torch.float8_e4m3fn

    if key == "rms_group_quant":

        def fn():
            return A["fused_rms_fp8_group_quant"](x, w, EPS, group_size=G, dtype_quant=fp8)

        def outs(res):
            return [res[0][0], res[0][1]]

        def chk(res):
            return check_quant(res[0][0], res[0][1], *ref["rms_q"], G)
    elif key == "add_rms_group_quant":

        def fn():
            return A["fused_rms_fp8_group_quant"](x, w, EPS, group_size=G, dtype_quant=fp8, res1=r)

        def outs(res):
            return [res[0][0], res[0][1], res[3]]

        def chk(res):
            ok, err, mism = check_quant(res[0][0], res[0][1], *ref["add_q"][:2], G)
            same_res = torch.equal(res[3], ref["add_q"][2])
            return ok and same_res, err, mism
    elif key == "silu_group_quant":

        def fn():
            return A["act_mul_and_fp8_group_quant"](xs, "silu", G, dtype_quant=fp8)

        def outs(res):
            return list(res)

        def chk(res):
            return check_quant(res[0], res[1], *ref["silu_q"], G)
    elif key == "rms_norm":

        def fn():
            return A["rms_norm"](x, w, EPS)

        def outs(res):
            return [res]

        def chk(res):
            return check_bf16(res, ref["rms_y"], 2.0)
    elif key == "add_rms_norm":
        out = torch.empty_like(x)
        res_out = torch.empty_like(x)

        def fn():
            A["rmsnorm2d_fwd_with_add"](out, x, r, res_out, w, EPS)
            return out, res_out

        def outs(res):
            return list(res)

        def chk(res):
            ok, err, mism = check_bf16(res[0], ref["add_y"], 3.0)
            return ok and torch.equal(res[1], ref["add_q"][2]), err, mism
    elif key == "group_quant":
        y = ref["rms_y"]
        y3 = y.view(M, 1, N)

        def fn():
            return A["fused_flatten_fp8_group_quant"](y3, G, dtype_quant=fp8)

        def outs(res):
            return list(res)

        def chk(res):
            return check_quant(res[0], res[1], *ref["rms_q"], G)
    elif key == "silu_mul":

        def fn():
            return F.silu(xs[:, :N]) * xs[:, N:]

        def outs(res):
            return [res]

        def chk(res):
            return check_bf16(res, ref["silu_y"], 2.0)
    elif key.startswith("inductor:"):
        base = key.split(":", 1)[1]
        torch._dynamo.reset()
        if base == "rms_group_quant":
            c = torch.compile(native_rms_group_quant, dynamic=False)

            def fn():
                return c(x, w)

            def chk(res):
                return check_quant(res[0], res[1], *ref["rms_q"], G)
        elif base == "add_rms_group_quant":
            c = torch.compile(native_add_rms_group_quant, dynamic=False)

            def fn():
                return c(x, r, w)

            def chk(res):
                ok, err, mism = check_quant(res[0], res[1], *ref["add_q"][:2], G)
                return ok and torch.equal(res[2], ref["add_q"][2]), err, mism
        elif base == "silu_group_quant":
            c = torch.compile(native_silu_group_quant, dynamic=False)

            def fn():
                return c(xs)

            def chk(res):
                return check_quant(res[0], res[1], *ref["silu_q"], G)
        else:
            raise KeyError(key)

        def outs(res):
            return list(res)
    else:
        raise KeyError(key)
    return fn, outs, chk


def make_inputs(M, N, G, dev, seed):
    import torch
    import torch.nn.functional as F

    gen = torch.Generator(device=dev).manual_seed(seed)
    bf = torch.bfloat16
    x = torch.randn(M, N, device=dev, dtype=torch.float32, generator=gen).to(bf)
    r = torch.randn(M, N, device=dev, dtype=torch.float32, generator=gen).to(bf)
    w = (1.0 + 0.2 * torch.randn(N, device=dev, dtype=torch.float32, generator=gen)).to(bf)
    xs = (2.0 * torch.randn(M, 2 * N, device=dev, dtype=torch.float32, generator=gen)).to(bf)
    ref = {}
    ref["rms_y"] = native_rms(x, w)
    ref["rms_q"] = native_group_quant(ref["rms_y"])
    ref["add_q"] = native_add_rms_group_quant(x, r, w)
    xf = x.float() + r.float()
    ref["add_y"] = (xf * (xf.pow(2).mean(-1, keepdim=True) + EPS).rsqrt()).to(bf) * w
    ref["silu_y"] = (F.silu(xs[:, :N].float()) * xs[:, N:].float()).to(bf)
    ref["silu_q"] = native_group_quant(ref["silu_y"])
    return {"x": x, "r": r, "w": w, "xs": xs, "ref": ref}


def count_launches(fn):
    """Kernel launches of one call, from the profiler's device events. Returns (count, names) or (None, err)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    names = []
    for e in p.events():
        dt = str(getattr(e, "device_type", ""))
        if "CUDA" not in dt:
            continue
        if e.name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")):
            continue
        names.append(e.name)
    return len(names), names


def bench(fn, rep_ms, repeats):
    import triton.testing

    runs = []
    for _ in range(repeats):
        runs.append(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="all"))
    meds = [statistics.median(r) * 1e3 for r in runs]
    allv = [v for r in runs for v in r]
    return statistics.median(allv) * 1e3, meds


# ---------------------------------------------------------------------------------------------------------
def shapes_of(args):
    return [(M, N) for N in args.N for M in args.M]


def env_report():
    import torch
    import triton

    lines = [
        f"date_utc: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}",
        f"python: {sys.version.split()[0]}",
        f"torch: {torch.__version__}",
        f"triton: {triton.__version__}",
    ]
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        lines.append(f"gpu: {p.name}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB")
    try:
        d = _find_aiter_dir()
        import glob

        di = glob.glob(os.path.join(os.path.dirname(d), "amd_aiter-*.dist-info"))
        lines.append(f"aiter: {os.path.basename(di[0]) if di else d}")
    except Exception as e:  # noqa: BLE001
        lines.append(f"aiter: not found ({e})")
    return lines


def gpu_state(tag):
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,"
                "utilization.gpu",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
        log(f"[gpu {tag}] {out}")
    except Exception as e:  # noqa: BLE001
        log(f"[gpu {tag}] nvidia-smi failed: {e}")


def copy_bandwidth():
    import torch
    import triton.testing

    n = 1 << 30  # 1 GiB each way
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), warmup=50, rep=300, return_mode="median")
    return 2 * n / (ms * 1e-3) / 1e12


def setup_torch():
    import torch

    for k, v in (
        ("recompile_limit", 100000),
        ("cache_size_limit", 100000),
        ("accumulated_recompile_limit", 100000),
        ("accumulated_cache_size_limit", 100000),
    ):
        if hasattr(torch._dynamo.config, k):
            setattr(torch._dynamo.config, k, v)
    import torch._inductor.config as ic

    # Autotune each reduction afresh in the (serial) timing process rather than reuse a choice made while the
    # warm-up workers shared the GPU.
    ic.autotune_local_cache = False
    torch.set_grad_enabled(False)


def run_warm(args):
    """Compile/JIT every (key, shape) of this shard once: fills the Triton and Inductor on-disk caches."""
    import torch

    setup_torch()
    dev = "cpu" if args.dry_run else "cuda"
    A = load_aiter(cpu=args.dry_run)
    i, k = (int(v) for v in args.shard.split("/"))
    shapes = shapes_of(args)[i::k]
    for M, N in shapes:
        inp = make_inputs(M, N, args.G, dev, seed=1000 + M * 7 + N)
        for key in args.keys:
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
        "--N",
        *map(str, args.N),
        "--keys",
        *args.keys,
    ] + (["--dry-run"] if args.dry_run else [])
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")
    procs = [subprocess.Popen(base + ["--shard", f"{i}/{k}"], env=env) for i in range(k)]
    wait_workers(procs, args.warm_timeout_s, t0)


def wait_workers(procs, timeout_s, t0):
    """Wait for the compile-warming worker processes; kill any that outlive ``timeout_s``."""
    for p in procs:
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            log(f"[warm] worker pid {p.pid} timed out and was killed")
    log(f"[warm] {len(procs)} workers finished in {time.time() - t0:.1f} s (rc {[p.returncode for p in procs]})")


def run_main(args):
    import torch

    t_start = time.time()
    out_dir = args.out
    os.makedirs(out_dir, exist_ok=True)
    log("\n".join(env_report()))
    log(f"args: {vars(args)}")
    setup_torch()
    dev = "cpu" if args.dry_run else "cuda"
    A = load_aiter(cpu=args.dry_run)
    for p in PATCHES:
        log(f"[patch] {p}")
    if not args.dry_run:
        gpu_state("start")
        try:
            log(f"[copy] device-to-device copy, 1 GiB, read+write counted: {copy_bandwidth():.2f} TB/s")
        except Exception as e:  # noqa: BLE001
            log(f"[copy] failed: {e}")
    if args.warm_workers > 0:
        spawn_warm(args)

    csv_path = os.path.join(out_dir, "h200_calibration.csv")
    det_path = os.path.join(out_dir, "h200_calibration_detail.csv")
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
    for M, N in shapes_of(args):
        if stopped:
            break
        inp = make_inputs(M, N, args.G, dev, seed=M * 7 + N)
        for key in args.keys:
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
                        "h200",
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
    # short table last: fused vs unfused vs inductor at the largest shape measured
    log("\nsummary (us): key M N")
    for (key, M, N), us in summary.items():
        if M in (1, 4096) and N in (1536, 7168):
            log(f"  {key:30s} {M:5d} {N:5d} {us:9.3f}")
    log(f"total wall {time.time() - t_start:.1f} s; csv rows {len(summary)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--M", type=int, nargs="+", default=DEFAULT_M)
    ap.add_argument("--N", type=int, nargs="+", default=DEFAULT_N)
    ap.add_argument("--G", type=int, default=128, help="quant group size")
    ap.add_argument("--keys", nargs="+", default=KEYS, choices=KEYS)
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
    if any(n % args.G for n in args.N):
        ap.error("every N must be a multiple of G")
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.warm_only:
        run_warm(args)
    else:
        run_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
