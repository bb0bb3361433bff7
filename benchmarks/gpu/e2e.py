"""End-to-end benchmark inside ``torch.compile`` (issue 29, part 3): whole compiled forwards of the model
blocks in ``e2e_blocks.py`` (DeepSeek-V3 layer, Llama-3.1-8B FP8 layer, Qwen3-Next gated-norm output,
gpt-oss norm + pad + router), each compiled three ways:

  inductor      ``torch.compile`` with Inductor alone
  eqsat         the same with ``post_grad_custom_post_pass = EqSatPass(profile=..., sizes=...)``, the profile
                ``--profile`` (default ``auto``: the one measured on the GPU the run has; the dry run's: h200)
  always_fuse   the same pass with that profile in which every fused ``K_*`` kernel available on the
                device (platform ``triton`` / ``any`` on CUDA) costs ~0 (0.01 µs a launch, 1e12 GB/s) and
                ``emit="always"``: a fused kernel wherever one applies (a vLLM-style always-fuse pass)

Each variant is a fresh compile (``torch._dynamo.reset()``, FX-graph and AOT caches off), once per block
with the token dim marked dynamic (``--compile dynamic``, the default: one graph for M >= 2, and Dynamo's
0/1 specialisation compiles M = 1 on its own) or once per M (``--compile static``). The eqsat pass costs a
dynamic graph at ``--eqsat-sizes`` (default: the M list, a compile range as vLLM's passes see one). Inductor
picks and times a dynamic graph's Triton configs at its first run (``--first-dynamic largest``, the default: at
the largest M, as vLLM's profile run at ``max_num_tokens`` compiles; ``smallest``: at the smallest M >= 2, as
a ``torch.compile`` user's second call may), so the two can differ by 2x at a large M, and two compiles first
run at a small M by up to 1.7x (``probe_compile_spread.py``); a round's variants share those choices (``--autotune
round``, the default: a kernel whose source an earlier variant of the round compiled takes its config, the
cache emptied each round), so a kernel two variants both run runs alike in both. ``--rounds K`` compiles and
times every variant K times in turn and reports the median speedup and the rounds' range. One pass object per variant serves the whole run (as a process sets the pass once); its
set-up on the warm-up graph is reported apart; ``--lines CSV..`` fits those calibration tables' lines into the
passes' profile for the run (a line's trial before it enters the shipped profile). The fp8 GEMMs are ``--gemm`` (``e2e_blocks.GEMMS``; default
``dispatch``: AITER's Triton or cuBLAS's fp8 GEMM, the faster correct one per shape).

Per (block, variant, M): the whole forward timed in CUDA graphs. ``--timing interleaved`` (the default): each
variant's forward at that M is captured (``gpu_timing.GraphTimer``: back-to-back calls for ~1 ms a replay) as
it is checked, and at the round's end the round's forwards at one M are replayed in turn, ``--samples`` times,
the order rotated (``gpu_timing.interleave``), so the device's drift falls on every variant alike; Inductor's
code is captured twice, and the ratio of its two medians (``aa_ratio``, logged) is the noise floor of every
speedup in that round; ``rep_medians_us`` are the medians of ``--repeats`` consecutive chunks of the samples.
``--timing sequential``: each forward timed on its own as it is checked (``gpu_timing.bench``: median of
``--repeats`` x ``do_bench_cudagraph(rep=--rep-ms)``). Either way plain ``triton.testing.do_bench`` if capture
fails, marked in ``timing``; in the dry run, wall-clock medians. Also per row: kernel launches (profiler),
outputs against eager of the same module (bf16 outputs: relative Frobenius error <= max(1e-2, 2 x the fp8 noise floor, i.e. the error of eager fp8 against
eager with every quant the identity: fused kernels may round fp8 differently within the contract's 1.25
steps; top-k ids: the reference's logits at the chosen ids reach its k-th largest within twice the
logits' own error), compile wall time (the first call at that M when it compiled), the pass's own time
(``EqSatPass.__call__``) and share, and the pass's predicted times: ``pred_before_us`` /
``pred_after_us``, what the pass predicted at size M for the graph it wrote (``Report.predicted_at``; where
it did not cost M, ``eqsat.optimize`` re-run at sizes = M on a copy of the graph it saw), the
region's predicted speedup and the whole forward's (``t_inductor / (t_inductor - predicted saving)``)
beside the measured one.

Outputs under ``--out`` (default benchmarks/results/; the tables and the plot made by ``e2e_report``): ``e2e_<tag>.csv`` (one row per block, variant, M),
``e2e_<tag>_compile.csv`` (per block and variant: compiles, compile s, pass s, share, the pass's stages), ``e2e_<tag>.md``,
``e2e_<tag>.png`` (speedup vs M per block; skipped without matplotlib), ``e2e_<tag>_graphs.txt`` (the
post-grad graphs after the pass, and the kernels chosen). Rows are written as they are timed (interleaved: at
the round's end), so a run cut short keeps what it timed; ``--budget-s`` skips what would start after that
many seconds.

Device command (repo root; ``.device-site`` from ``../shared/tools/device-site.sh``, carried; about 8 min):

    run(kind="nvidia-h200", carry=[".device-site"], timeout_s=600, command=
        "export PYTHONPATH=$PWD/.device-site:$PWD:$PWD/benchmarks/gpu PYTHONUNBUFFERED=1; set -o pipefail; "
        "python3 benchmarks/gpu/e2e.py --out $OUT --budget-s 480 2>&1 | tee $OUT/e2e_h200.log")

CPU dry run (tiny widths, M in {1, 8}, no CUDA graphs, wall-clock medians, results in /tmp by default):

    cd /work/main && .venv/bin/python benchmarks/gpu/e2e.py --dry-run

``--exec fx`` (CPU only) runs Inductor's passes, the eqsat pass included, and Inductor's lowering of the
post-grad graph, then executes that graph with FX instead of generating code: seconds instead of minutes,
for ``tests/test_e2e_blocks.py``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import glob
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
for _p in (HERE, ROOT):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import e2e_blocks  # noqa: E402  (this folder: the blocks)
import gpu_timing  # noqa: E402  (this folder: CUDA-graph timing, launches, the environment)
import native  # noqa: E402  (this folder: the fp8 checks)
import torch  # noqa: E402
import torch.fx as fx  # noqa: E402
from e2e_report import VariantStats, compact_table, markdown, plot  # noqa: E402  (this folder: the reports)
from gpu_timing import gpu_tag, log  # noqa: E402

import eqsat  # noqa: E402
from eqsat.cost import calibrate  # noqa: E402
from eqsat.cost.cards import resolved  # noqa: E402
from eqsat.cost.roofline import KernelTiming, Profile, load_profile  # noqa: E402
from eqsat.fx.capture import copy_graph  # noqa: E402

VARIANTS = ("inductor", "eqsat", "always_fuse")
DEFAULT_M = (1, 8, 64, 256, 1024, 4096, 8192)
DRY_M = (1, 8)
QUICK_M = (1, 64, 1024, 8192)
BF16_TOL = 1e-2
NOISE_FACTOR = 2.0
KERNEL_OPS = ("eqsat.", "vllm.", "vllm_ir.")  # the kernel ops counted in a graph after the pass
FP8_TOL_STEPS = 1.25
FREE_GBPS = 1e12
FREE_LAUNCH_US = 0.01  # not 0: of two ways to fuse a site, always-fuse takes the one of fewer kernels
ON_CUDA_PLATFORMS = frozenset({"triton", "any"})  # a Triton GPU (profiles without a platform field)


# -- the pass, timed ----------------------------------------------------------------------------------------

@dataclass
class PassCall:
    """One call of the pass on one post-grad graph."""

    seconds: float
    report: eqsat.Report | None
    before: fx.GraphModule | None  # a copy of the graph the pass saw (for the per-M predictions)
    nodes_before: int
    nodes_after: int
    eqsat_ops: dict[str, int]  # eqsat:: op (or vllm.<op>, vllm_ir.<op>) -> nodes in the graph after the pass
    code_after: str
    label: str = ""  # where the runner was when the pass ran (the M of the compiling call)


class TimedEqSatPass(eqsat.EqSatPass):
    """``EqSatPass`` that records each call: its own wall time (``time.perf_counter`` around
    ``EqSatPass.__call__``, the graph copy for the predictions excluded), the report, the graph after."""

    def __init__(self, options: eqsat.Options | None = None, **overrides: Any) -> None:
        super().__init__(options, **overrides)
        self.calls: list[PassCall] = []
        self.label = ""

    def __call__(self, graph: fx.Graph) -> None:
        before = copy_graph(graph)
        n_before = len(graph.nodes)
        self.last_report = None
        t0 = time.perf_counter()
        try:
            super().__call__(graph)
        finally:
            dt = time.perf_counter() - t0
            ops: dict[str, int] = {}
            for n in graph.nodes:
                if n.op == "call_function" and str(n.target).startswith(KERNEL_OPS):
                    op = str(n.target).removeprefix("eqsat.").removesuffix(".default")
                    ops[op] = ops.get(op, 0) + 1
            self.calls.append(PassCall(dt, self.last_report, before, n_before, len(graph.nodes), ops,
                                       graph.python_code("self").src, self.label))

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "calls": []}


def always_fuse_profile(base: str | Profile = "h200", cuda: bool = True) -> tuple[Profile, list[str]]:
    """``base`` with every fused ``K_*`` row's calibration key at ~0 cost (launch 0.01 µs, 1e12 GB/s), the
    rows that run where the profile's kernels do (its ``platform``; without one, on CUDA: the rows with a
    Triton or any-platform implementation). Returns the profile and the rows it frees."""
    p = load_profile(base)
    kernels = dict(p.kernels)
    platform = getattr(p, "platform", None)
    here = {platform, "any"} if platform and platform != "any" else ON_CUDA_PLATFORMS if cuda else None
    rows = []
    for spec in eqsat.DEFAULT_CATALOG.fused():
        if not spec.name.startswith("K_"):
            continue
        platforms = getattr(spec, "platforms", None)
        if here is not None and platforms is not None and not (set(platforms) & here):
            continue
        kernels[spec.calibration_key] = KernelTiming(launch_us=FREE_LAUNCH_US, bandwidth_gbps=FREE_GBPS)
        rows.append(spec.name)
    desc = f"{p.name} with the fused rows {', '.join(rows)} at ~0 cost (benchmarks/gpu/e2e.py always_fuse)"
    return dataclasses.replace(p, name=f"{p.name}-always-fuse", kernels=kernels, description=desc), rows


def base_profile(lines: Sequence[str] = (), profile: str = "h200") -> Profile:
    """The profile ``profile``, with the lines fitted on the calibration tables ``lines`` where given (lines a
    run tries before they enter the shipped profile, e.g. ``h200_calibration_heads.csv``)."""
    p = load_profile(profile)
    return calibrate.fit(calibrate.read_table(*lines), p) if lines else p


def make_pass(variant: str, sizes: int | tuple[int, ...], cuda: bool, lines: Sequence[str] = (),
              profile: str = "h200") -> TimedEqSatPass | None:
    if variant == "inductor":
        return None
    if variant == "eqsat":
        return TimedEqSatPass(profile=base_profile(lines, profile), sizes=sizes)
    if variant == "always_fuse":
        profile, _ = always_fuse_profile(base_profile(lines, profile), cuda)
        return TimedEqSatPass(profile=profile, sizes=sizes, emit="always")
    raise ValueError(f"unknown variant {variant!r}")


def first_dynamic_call(compiled: Callable[..., Any], block: e2e_blocks.Block, device: str = "cuda", m: int = 8) -> None:
    """Compile ``compiled`` (``torch.compile`` of ``block``) for every M >= 2: its first call at M = ``m`` with
    the token dim marked dynamic, as a block's runs compile it (the probes' way to get that compile)."""
    first = block.example_inputs(m, device)
    for t in first:
        torch._dynamo.mark_dynamic(t, 0)
    compiled(*first)


def predict(calls: Sequence[PassCall], options: eqsat.Options, m: int) -> dict[str, Any]:
    """The pass's prediction at M = m for the graphs of ``calls``: what each call predicted at size m for
    the graph it wrote (``Report.predicted_at``: a dynamic graph's one choice over the range, the one that
    runs), where it costed m; else the choice at m, eqsat.optimize on a copy of the graph at sizes = m."""
    before = after = 0.0
    kernels: dict[str, int] = {}
    errors = []
    for c in calls:
        if c.report is not None and m in c.report.predicted_at:
            rep = c.report
            b, a = rep.predicted_at[m]
        elif c.before is not None:
            rep = eqsat.optimize(copy_graph(c.before), dataclasses.replace(options, sizes=m, dump_dir=None),
                                 recompile=False)
            b, a = rep.predicted_before_us, rep.predicted_after_us if rep.changed else rep.predicted_before_us
        else:
            continue
        before, after = before + b, after + a
        for k, n in (rep.kernels_chosen.items() if rep.changed else ()):
            kernels[k] = kernels.get(k, 0) + n
        if rep.error:
            errors.append(rep.error)
    return {"before": before, "after": after, "kernels": kernels, "errors": errors}


def kernels_of(calls: Sequence[PassCall]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in calls:
        if c.report is not None and c.report.changed:
            for k, n in c.report.kernels_chosen.items():
                out[k] = out.get(k, 0) + n
    return out


def ops_of(calls: Sequence[PassCall]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in calls:
        for k, n in c.eqsat_ops.items():
            out[k] = out.get(k, 0) + n
    return out


def fmt_kernels(k: dict[str, int]) -> str:
    return " ".join(f"{name}x{n}" for name, n in sorted(k.items())) or "-"


# -- compiling ------------------------------------------------------------------------------------------------

def run_order(ms: Sequence[int], first_dynamic: str) -> list[int]:
    """``ms`` in the order a variant runs them: M = 1 (compiled on its own) first, then the dynamic graph's
    first run at the smallest M >= 2 or (``largest``) at the largest, the rest ascending."""
    ordered = sorted(ms)
    dynamic = [m for m in ordered if m >= 2]
    if first_dynamic == "largest" and dynamic:
        dynamic = [dynamic[-1], *dynamic[:-1]]
    return [m for m in ordered if m < 2] + dynamic


class Backend:
    """Inductor (``compile_fx``) as a Dynamo backend that counts and times its compiles; ``exec_fx``: stop
    after Inductor's post-grad passes and run the post-grad graph with FX (CPU test mode). It holds what
    it compiled (``made``), so that code a CUDA graph launches outlives ``torch._dynamo.reset()``."""

    def __init__(self, exec_fx: bool = False) -> None:
        self.exec_fx = exec_fx
        self.compiles = 0
        self.seconds = 0.0
        self.made: list[Callable[..., Any]] = []

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        from torch._inductor.compile_fx import compile_fx

        self.compiles += 1
        t0 = time.perf_counter()
        try:
            made = compile_fx(gm, example_inputs, **({"inner_compile": _fx_inner_compile} if self.exec_fx else {}))
            self.made.append(made)
            return made
        finally:
            self.seconds += time.perf_counter() - t0


def _fx_inner_compile(gm: fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """``compile_fx_inner`` up to and including the post-grad passes and the lowering; the graph is then run
    by FX."""
    from torch._guards import detect_fake_mode
    from torch._inductor.compile_fx import _recursive_post_grad_passes
    from torch._inductor.virtualized import V

    fake_mode = detect_fake_mode(example_inputs) or torch._subclasses.FakeTensorMode(allow_non_fake_inputs=True)
    with V.set_fake_mode(fake_mode):
        _recursive_post_grad_passes(gm, is_inference=kwargs.get("is_inference", True))
        _lower(copy_graph(gm), example_inputs, fake_mode)
    gm.recompile()

    def run(args: list[Any]) -> Any:
        return gm(*args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def warm_up_compiler(device: torch.device, exec_fx: bool, quiet: bool = False) -> None:
    """One tiny compile first, so that the process's one-off set-up (Inductor's and Triton's imports and
    initialisation) is not counted in the first block's compile time."""
    t0 = time.perf_counter()
    x = torch.randn(8, 256, device=device, dtype=torch.bfloat16)
    torch.compile(lambda t: (t.float().pow(2).mean(-1, keepdim=True) * t).to(t.dtype), backend=Backend(exec_fx))(x)
    torch._dynamo.reset()
    if not quiet:
        log(f"compiler warmed up in {time.perf_counter() - t0:.1f} s")


def _lower(gm: fx.GraphModule, example_inputs: Sequence[Any], fake_mode: Any) -> None:
    """Inductor's lowering of the post-grad graph (``GraphLowering.run``, no code generated): what fails
    there (an op Inductor cannot lower) fails the fx mode too."""
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    graph = GraphLowering(gm, example_inputs=list(example_inputs), shape_env=getattr(fake_mode, "shape_env", None),
                          is_inference=True)
    with V.set_graph_handler(graph), V.set_extern_kernel_nodes([]):
        graph.run(*example_inputs)


def configure_torch(fixed_configs: bool = False, shared_autotune: bool = False) -> None:
    """Fresh compiles (no FX-graph, AOT or remote caches), mutating ops functionalized as vLLM has them
    (``auto_functionalized``, v1); ``fixed_configs``: Inductor times no Triton config
    while compiling (its deterministic mode, pointwise autotuning off), so two compiles of a graph are alike;
    ``shared_autotune``: Inductor's local autotune cache on (:func:`forget_autotuning` empties it)."""
    gpu_timing.setup_torch()  # Dynamo's recompile limits up, autotune cache off, grad off
    import torch._inductor.config as ic

    ic.autotune_local_cache = shared_autotune

    ic.fx_graph_cache = False
    ic.enable_auto_functionalized_v2 = False  # as vLLM's compile config sets it (its _C ops' mutations, v1)
    for mod, key in ((torch._functorch.config, "enable_autograd_cache"), (ic, "autotune_remote_cache"),
                     (ic, "fx_graph_remote_cache")):
        if hasattr(mod, key):
            setattr(mod, key, False)
    if fixed_configs:
        ic.deterministic = True
        ic.triton.autotune_pointwise = False


def forget_autotuning() -> int:
    """Delete the Triton configs Inductor's local autotune cache holds (``*.best_config`` beside each
    kernel's source in Inductor's cache folder); how many. With the cache on, a kernel whose source an
    earlier compile made takes that compile's choice instead of timing its configs again."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    found = glob.glob(os.path.join(cache_dir(), "**", "*.best_config"), recursive=True)
    for path in found:
        os.remove(path)
    return len(found)


# -- checks ---------------------------------------------------------------------------------------------------

def as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    if not torch.isfinite(a).all():
        return math.inf
    den = b.norm().item()
    num = (a - b).norm().item()
    return num / den if den > 0 else num


def check(block: e2e_blocks.Block, outs: tuple[Any, ...], refs: tuple[Any, ...], noise: list[float]) -> tuple[bool, float, str]:
    """(ok, worst error / tolerance, detail) of a variant's outputs against eager's."""
    ok, worst, parts = True, 0.0, []
    if len(outs) != len(refs):
        return False, math.inf, f"{len(outs)} outputs, eager has {len(refs)}"
    for i, spec in enumerate(block.outputs):
        o, r = outs[i], refs[i]
        if tuple(o.shape) != tuple(r.shape) or o.dtype != r.dtype:
            ok = False
            parts.append(f"{spec.name}: {tuple(o.shape)} {o.dtype} != {tuple(r.shape)} {r.dtype}")
            continue
        if spec.kind == "bf16":
            tol = max(BF16_TOL, NOISE_FACTOR * noise[i])
            err = rel_err(o, r)
            parts.append(f"{spec.name}={err:.2e}/{tol:.1e}")
        elif spec.kind == "ids":
            ref_logits, logits = refs[spec.logits].float(), outs[spec.logits].float()
            k = r.shape[-1]
            kth = ref_logits.topk(k, dim=-1).values[..., -1:]
            short = (kth - ref_logits.gather(-1, o.long())).clamp(min=0).max().item()
            tol = 2 * (logits - ref_logits).abs().max().item() + 1e-6
            err = short
            same = (o.sort(-1).values == r.sort(-1).values).all(-1).float().mean().item()
            parts.append(f"{spec.name}: {same:.3f} rows same, short {short:.1e}/{tol:.1e}")
        elif spec.kind == "fp8":
            s, s_ref = outs[i + 1], refs[i + 1]
            good, steps, mism = native.check_quant(o, s, r, s_ref, o.shape[-1] // s.shape[-1], FP8_TOL_STEPS)
            err, tol = steps, FP8_TOL_STEPS
            parts.append(f"{spec.name}={steps:.2f}st/{mism:.3f}")
        else:  # "scale": checked with its q
            continue
        ratio = err / tol if tol > 0 else (0.0 if err == 0 else math.inf)
        worst = max(worst, ratio)
        ok = ok and ratio <= 1.0
    return ok, worst, " ".join(parts)


def fp8_noise(block: e2e_blocks.Block, inputs: tuple[torch.Tensor, ...], refs: tuple[Any, ...]) -> list[float]:
    """Per output: eager's relative error against eager with every quant the identity (0 off bf16)."""
    block.fp8 = False
    try:
        exact = as_tuple(block(*inputs))
    finally:
        block.fp8 = True
    return [rel_err(r, e) if s.kind == "bf16" else 0.0 for s, r, e in zip(block.outputs, refs, exact, strict=True)]


# -- timing ---------------------------------------------------------------------------------------------------

def time_fn(fn: Callable[[], Any], args: argparse.Namespace, cuda: bool) -> tuple[float, list[float], str]:
    """(median µs, per-repeat medians, how)."""
    if not cuda:
        fn()  # warm-up
        ts = []
        for _ in range(args.dry_reps):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(ts), ts, "wall"
    try:
        us, meds = gpu_timing.bench(fn, args.rep_ms, args.repeats)
        return us, meds, "cudagraph"
    except Exception as exc:  # noqa: BLE001  (capture failed: time without graphs, and say so)
        log(f"    CUDA-graph timing failed ({type(exc).__name__}: {str(exc)[:200]}); plain do_bench")
        torch.cuda.synchronize()
        import triton.testing

        ms = triton.testing.do_bench(fn, warmup=25, rep=args.rep_ms * args.repeats, return_mode="median")
        return ms * 1e3, [ms * 1e3], "do_bench"


def sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


# -- the run --------------------------------------------------------------------------------------------------

FIELDS = ("block", "variant", "round", "M", "us", "speedup", "pred_speedup_whole", "pred_speedup_region", "pred_before_us",
          "pred_after_us", "check", "err_ratio", "launches", "timing", "rep_medians_us", "compiled", "compile_s",
          "pass_ms", "kernels", "eqsat_ops", "kernels_at_M", "pass_errors", "detail", "aa_ratio")


@dataclass
class _VariantRun:
    """What the Ms of one variant share: the compiled block, its backend and pass, and the pass's calls
    on the dynamic graph (which serve every M >= 2)."""

    name: str
    variant: str
    block: e2e_blocks.Block
    compiled: Callable[..., Any]
    backend: Backend
    p: TimedEqSatPass | None
    stats: VariantStats
    static: bool
    dyn_calls: list[PassCall] = field(default_factory=list)


@dataclass
class _Measured:
    """One checked (block, variant, M) row waiting for its time: ``saving`` is the pass's predicted saving
    (µs, None without a pass); ``timers`` its captured forwards under ``--timing interleaved``, and
    ``backend`` what compiled them (kept alive with them)."""

    row: dict[str, Any]
    saving: float | None
    note: str
    timers: dict[str, gpu_timing.GraphTimer] = field(default_factory=dict)
    backend: Backend | None = None


def _chunks(seq: Sequence[float], n: int) -> list[Sequence[float]]:
    """``seq`` cut into ``n`` (at most ``len(seq)``) consecutive pieces of near-equal length."""
    n = max(1, min(n, len(seq)))
    bounds = [round(i * len(seq) / n) for i in range(n + 1)]
    return [seq[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pending: dict[int, list[_Measured]] = {}  # M -> rows captured, to be timed at the round's end
        self.cuda = not args.dry_run
        self.device = torch.device("cuda" if self.cuda else "cpu")
        self.t0 = time.perf_counter()
        self.rows: list[dict[str, Any]] = []
        self.stats: list[VariantStats] = []
        self.rnd = 0
        self.passes, self.setup_s = self.make_passes()
        os.makedirs(args.out, exist_ok=True)
        self.prefix = os.path.join(args.out, f"e2e_{args.tag}")
        self._csv = open(self.prefix + ".csv", "w", newline="")  # noqa: SIM115  (closed in finish)
        self._writer = csv.DictWriter(self._csv, fieldnames=FIELDS)
        self._writer.writeheader()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def over_budget(self) -> bool:
        return self.args.budget_s > 0 and self.elapsed() > self.args.budget_s

    def add(self, row: dict[str, Any]) -> None:
        row = {k: row.get(k, "") for k in FIELDS} | {"round": self.rnd}
        self.rows.append(row)
        self._writer.writerow(row)
        self._csv.flush()

    def sizes(self) -> int | tuple[int, ...]:
        s = self.args.eqsat_sizes
        return tuple(self.args.M) if s == "range" else int(s)

    def make_passes(self) -> tuple[dict[str, TimedEqSatPass], dict[str, float]]:
        """One pass per variant for the whole run, as a user sets ``post_grad_custom_post_pass`` once per
        process; each first runs on the warm-up graph, so its one-off set-up (the engine declaring its rules)
        is timed apart from the blocks' compiles."""
        import torch._inductor.config as ic

        passes, setup = {}, {}
        for variant in self.args.variants:
            p = make_pass(variant, self.sizes(), self.cuda, self.args.lines, self.args.profile)
            if p is None:
                continue
            with ic.patch(post_grad_custom_post_pass=p):
                warm_up_compiler(self.device, self.args.exec == "fx", quiet=True)
            setup[variant] = sum(c.seconds for c in p.calls)
            log(f"{variant} pass set up in {setup[variant]:.2f} s (its first graph, the warm-up's)")
            p.calls.clear()
            passes[variant] = p
        return passes, setup

    def block(self, name: str) -> None:
        args = self.args
        log(f"== {name} ({'tiny' if args.dry_run else 'full'} widths) t={self.elapsed():.0f}s")
        opts = {"residual": args.residual, "llama_quant": args.llama_quant, "gemm": args.gemm}
        block = e2e_blocks.build(name, self.device, tiny=args.dry_run, **opts)
        ms = list(args.M)
        inputs = {m: block.example_inputs(m, self.device, seed=m) for m in ms}
        refs, noise = {}, {}
        for m in ms:
            refs[m] = as_tuple(block(*inputs[m]))
            noise[m] = fp8_noise(block, inputs[m], refs[m])
        sync(self.cuda)
        log(f"   eager refs done; fp8 noise floor (rel) at M={ms[-1]}: "
            + ", ".join(f"{s.name}={n:.3f}" for s, n in zip(block.outputs, noise[ms[-1]], strict=True)))
        for rnd in range(args.rounds):
            self.round(name, rnd, block, inputs, refs, noise)

    def round(self, name: str, rnd: int, block: e2e_blocks.Block, inputs: dict[int, tuple[torch.Tensor, ...]],
              refs: dict[int, tuple[Any, ...]], noise: dict[int, list[float]]) -> None:
        """Every variant compiled afresh and timed once, speedups against this round's Inductor alone."""
        args = self.args
        if args.rounds > 1:
            log(f"   -- round {rnd + 1} / {args.rounds}")
        if args.autotune == "round":
            log(f"   autotune cache emptied ({forget_autotuning()} configs)")
        self.rnd = rnd
        base_us: dict[int, float] = {}
        for variant in args.variants:
            if self.over_budget():
                log(f"   {variant}: skipped (budget {args.budget_s:.0f} s spent)")
                self.add({"block": name, "variant": variant, "check": "skipped", "detail": "budget"})
                continue
            try:
                self.variant(name, variant, block, inputs, refs, noise, base_us)
            except Exception as exc:  # noqa: BLE001  (one variant's failure must not end the run)
                log(f"   {variant}: FAILED {type(exc).__name__}: {exc}")
                traceback.print_exc()
                self.add({"block": name, "variant": variant, "check": "error",
                          "detail": f"{type(exc).__name__}: {str(exc)[:300]}"})
                if not (self.stats and (self.stats[-1].block, self.stats[-1].variant) == (name, variant)):
                    self.stats.append(VariantStats(name, variant, self.rnd))
                self.stats[-1].error = f"{type(exc).__name__}: {str(exc)[:300]}"
            finally:
                torch._dynamo.reset()
                if self.cuda:
                    torch.cuda.empty_cache()
        self.time_pending(base_us)

    def variant(self, name: str, variant: str, block: e2e_blocks.Block, inputs: dict[int, tuple[torch.Tensor, ...]],
                refs: dict[int, tuple[Any, ...]], noise: dict[int, list[float]], base_us: dict[int, float]) -> None:
        """One fresh compile of ``block`` (per M with ``--compile static``), timed and checked at each M."""
        import torch._inductor.config as ic

        args = self.args
        torch._dynamo.reset()
        p = self.passes.get(variant)
        first_call = len(p.calls) if p is not None else 0
        backend = Backend(exec_fx=args.exec == "fx")
        st = VariantStats(name, variant, self.rnd)
        self.stats.append(st)
        static = args.compile == "static"
        compiled = torch.compile(block, backend=backend, dynamic=False if static else None)
        ctx = _VariantRun(name, variant, block, compiled, backend, p, st, static)
        try:
            with ic.patch(post_grad_custom_post_pass=p):
                for m in run_order(args.M, args.first_dynamic):
                    if self.over_budget():
                        log(f"   {variant} M={m}: skipped (budget)")
                        self.add({"block": name, "variant": variant, "M": m, "check": "skipped", "detail": "budget"})
                        continue
                    try:
                        self.one_m(ctx, m, inputs[m], refs[m], noise[m], base_us)
                    except Exception as exc:  # noqa: BLE001  (one M's failure, e.g. out of memory, ends only it)
                        log(f"   {variant} M={m}: FAILED {type(exc).__name__}: {str(exc)[:500]}")
                        traceback.print_exc()
                        self.add({"block": name, "variant": variant, "M": m, "check": "error",
                                  "detail": f"{type(exc).__name__}: {str(exc)[:300]}"})
                        st.error = st.error or f"M={m}: {type(exc).__name__}: {str(exc)[:200]}"
                        if self.cuda:
                            torch.cuda.synchronize()
                            torch.cuda.empty_cache()
        finally:  # what the pass did, compiles that failed after it included
            st.backend_s = backend.seconds
            if p is not None:
                mine = p.calls[first_call:]
                st.kernels = fmt_kernels(kernels_of(mine))
                st.eqsat_ops = fmt_kernels(ops_of(mine))
                st.pass_s = sum(c.seconds for c in mine)
                st.pass_calls = len(mine)
                for c in mine:
                    for stage, ms in (c.report.stage_ms if c.report else {}).items():
                        st.pass_stages_ms[stage] = st.pass_stages_ms.get(stage, 0.0) + ms
                st.graphs = [f"-- {name} / {variant} / compiled at {c.label}: {c.nodes_before} -> {c.nodes_after} "
                             f"nodes, pass {c.seconds * 1e3:.1f} ms, eqsat ops {fmt_kernels(c.eqsat_ops)}\n"
                             f"report: {c.report.summary() if c.report else 'none (pass failed)'}\n{c.code_after}"
                             for c in mine]

    def one_m(self, ctx: _VariantRun, m: int, x: tuple[torch.Tensor, ...], ref: tuple[Any, ...], noise: list[float],
              base_us: dict[int, float]) -> None:
        args, p, st, variant = self.args, ctx.p, ctx.stats, ctx.variant
        if not ctx.static and m >= 2:
            for t in x:
                torch._dynamo.mark_dynamic(t, 0)
        n_comp, n_calls = ctx.backend.compiles, len(p.calls) if p else 0
        if p is not None:
            p.label = f"M={m}"
        t0 = time.perf_counter()
        out = as_tuple(ctx.compiled(*x))
        sync(self.cuda)
        first_s = time.perf_counter() - t0
        new_calls = p.calls[n_calls:] if p else []
        did_compile = ctx.backend.compiles > n_comp
        if did_compile:
            st.compiles += ctx.backend.compiles - n_comp
            st.compile_s += first_s
        if new_calls and not ctx.static and m >= 2:
            ctx.dyn_calls = new_calls
        calls = new_calls or (ctx.dyn_calls if m >= 2 and not ctx.static else [])
        pass_s = sum(c.seconds for c in new_calls)
        ok, worst, detail = check(ctx.block, out, ref, noise)
        del out
        fn = _caller(ctx.compiled, x)
        launches: int | str = ""
        if self.cuda and args.launches:
            try:
                launches = gpu_timing.count_launches(fn)[0]
            except Exception as exc:  # noqa: BLE001
                launches = f"err {type(exc).__name__}"
        row: dict[str, Any] = {
            "block": ctx.name, "variant": variant, "M": m, "check": "ok" if ok else "FAIL",
            "err_ratio": f"{worst:.3f}", "launches": launches, "compiled": int(did_compile),
            "compile_s": f"{first_s:.2f}" if did_compile else "", "pass_ms": f"{pass_s * 1e3:.1f}" if new_calls else "",
            "detail": detail,
        }
        saving = None
        if p is not None:
            row["kernels"] = fmt_kernels(kernels_of(calls))
            row["eqsat_ops"] = fmt_kernels(ops_of(calls))
            errs = [c.report.error for c in calls if c.report and c.report.error]
            errs += ["pass raised (see the log)" for c in calls if c.report is None]
            if variant == "eqsat" and calls:
                pr = predict(calls, p.options, m)
                errs += pr["errors"]
                row["pred_before_us"], row["pred_after_us"] = f"{pr['before']:.2f}", f"{pr['after']:.2f}"
                row["kernels_at_M"] = fmt_kernels(pr["kernels"])
                if pr["after"] > 0:
                    row["pred_speedup_region"] = f"{pr['before'] / pr['after']:.3f}"
                saving = pr["before"] - pr["after"]
            row["pass_errors"] = "; ".join(errs)[:300]
        note = ((f"  compile {first_s:.1f}s" if did_compile else "") + (f"  pass {pass_s * 1e3:.0f}ms" if new_calls else "")
                + (f"  [{row.get('kernels', '')}; ops {row.get('eqsat_ops', '')}]" if p is not None else "")
                + ("" if ok else f"  {detail}"))
        done = _Measured(row, saving, note)
        if self.cuda and args.timing == "interleaved":
            try:
                done.backend = ctx.backend
                done.timers = {variant: gpu_timing.GraphTimer(fn)}
                if variant == "inductor":  # the same code twice: the noise floor of a ratio
                    done.timers["inductor (again)"] = gpu_timing.GraphTimer(fn)
                self.pending.setdefault(m, []).append(done)
                return
            except Exception as exc:  # noqa: BLE001  (capture failed: time it now, sequentially, and say so)
                log(f"    {variant} M={m}: CUDA-graph capture failed ({type(exc).__name__}: {str(exc)[:200]}); "
                    "timed on its own")
                torch.cuda.synchronize()
        us, meds, how = time_fn(fn, args, self.cuda)
        self.record(done, us, meds, how, base_us)

    def time_pending(self, base_us: dict[int, float]) -> None:
        """The round's captured forwards timed interleaved, M by M (``--timing interleaved``), then recorded."""
        for m in sorted(self.pending):
            group = self.pending[m]
            timers = {n: t for d in group for n, t in d.timers.items()}
            try:
                samples = gpu_timing.interleave(timers, self.args.samples)
            except Exception as exc:  # noqa: BLE001  (a replay failed: this M's rows say so, the run goes on)
                log(f"   M={m}: interleaved timing FAILED {type(exc).__name__}: {str(exc)[:300]}")
                for d in group:
                    self.add(d.row | {"check": "error", "detail": f"timing: {type(exc).__name__}: {str(exc)[:200]}"})
                continue
            meds = {n: statistics.median(v) for n, v in samples.items()}
            aa = meds["inductor"] / meds["inductor (again)"] if "inductor (again)" in meds else None
            if aa is not None:
                log(f"   M={m}: the same Inductor code timed twice, ratio {aa:.3f}")
            for d in sorted(group, key=lambda d: d.row["variant"] != "inductor"):
                v = d.row["variant"]
                if v == "inductor" and aa is not None:
                    d.row["aa_ratio"] = f"{aa:.3f}"
                chunks = _chunks(samples[v], self.args.repeats)
                self.record(d, meds[v], [statistics.median(c) for c in chunks], "interleaved", base_us)
            for d in group:
                d.timers.clear()
                d.backend = None
        self.pending.clear()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def record(self, done: _Measured, us: float, meds: list[float], how: str, base_us: dict[int, float]) -> None:
        """A measured row: its time, its speedup against this round's Inductor alone at its M, written and logged."""
        row, m, variant = done.row, int(done.row["M"]), done.row["variant"]
        row |= {"us": f"{us:.2f}", "timing": how, "rep_medians_us": " ".join(f"{v:.2f}" for v in meds)}
        if variant == "inductor":
            base_us[m] = us
        if m in base_us:
            row["speedup"] = f"{base_us[m] / us:.3f}"
            if done.saving is not None and base_us[m] - done.saving > 0:
                row["pred_speedup_whole"] = f"{base_us[m] / (base_us[m] - done.saving):.3f}"
        self.add(row)
        log(f"   {variant:11s} M={m:<5d} {us:10.2f} us  x{row.get('speedup', '-'):>6}  "
            f"{row['check']} ({row['err_ratio']} of tol)" + done.note)

    def finish(self) -> None:
        self._csv.close()
        cold: dict[str, float] = {}
        for s in self.stats:  # the first round's: the cold caches
            if s.variant == "inductor" and s.compiles and s.block not in cold:
                cold[s.block] = s.compile_s
        for st in self.stats:
            st.cold_s = cold.get(st.block, math.nan)
        with open(self.prefix + "_compile.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["block", "variant", "round", "compiles", "compile_s", "backend_s", "pass_s", "pass_calls",
                        "pass_share", "pass_share_of_inductor_compile", "pass_stages_ms", "kernels", "eqsat_ops",
                        "error"])
            for s in self.stats:
                w.writerow([s.block, s.variant, s.round, s.compiles, f"{s.compile_s:.2f}", f"{s.backend_s:.2f}",
                            f"{s.pass_s:.3f}", s.pass_calls, f"{s.share:.4f}", f"{s.share_cold:.4f}",
                            " ".join(f"{k} {v:.1f}" for k, v in s.pass_stages_ms.items()), s.kernels, s.eqsat_ops,
                            s.error])
        with open(self.prefix + "_graphs.txt", "w") as f:
            for s in self.stats:
                f.write("\n\n".join(s.graphs) + ("\n\n" if s.graphs else ""))
        md = markdown(self.rows, self.stats, self.args, env_lines(self.cuda, self.args.gemm), self.elapsed(),
                      self.setup_s)
        with open(self.prefix + ".md", "w") as f:
            f.write(md)
        if self.args.plot:
            plot(self.rows, self.prefix + ".png")
        log("\n" + compact_table(self.rows, self.stats))
        log(f"\nwrote {self.prefix}.csv, _compile.csv, .md, _graphs.txt"
            + (", .png" if os.path.exists(self.prefix + ".png") else "") + f"; total {self.elapsed():.1f} s")


def _caller(compiled: Callable[..., Any], x: tuple[torch.Tensor, ...]) -> Callable[[], Any]:
    def fn() -> Any:
        return compiled(*x)

    return fn


def env_lines(cuda: bool, gemm: str) -> list[str]:
    """The run's environment, and for the dispatched GEMMs on a GPU whether this card has a tuned table."""
    try:
        lines = gpu_timing.env_report()
    except Exception:  # noqa: BLE001  (no triton on the CPU)
        import platform

        return [f"python: {platform.python_version()}", f"torch: {torch.__version__}", "device: cpu (dry run)"]
    if cuda and gemm == "dispatch":
        lines.append(e2e_blocks.table_note(torch.cuda.get_device_properties(0).name))
    return lines


# -- main -----------------------------------------------------------------------------------------------------

def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny widths, M in {1, 8}, wall-clock timing")
    ap.add_argument("--M", type=int, nargs="+", default=None, help=f"token counts (default {list(DEFAULT_M)})")
    ap.add_argument("--quick", action="store_true", help=f"M = {list(QUICK_M)}")
    ap.add_argument("--blocks", nargs="+", default=list(e2e_blocks.BLOCKS), choices=list(e2e_blocks.BLOCKS))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--compile", choices=("dynamic", "static"), default="dynamic",
                    help="dynamic: one compile per variant and block, the token dim dynamic; static: one per M")
    ap.add_argument("--eqsat-sizes", default="range", help="'range' (the M list) or one int: where the pass costs")
    ap.add_argument("--residual", choices=("vllm", "hf"), default="vllm", help="fp32 fused add (vLLM) or bf16 add (HF)")
    ap.add_argument("--llama-quant", choices=("token", "group"), default="token")
    ap.add_argument("--gemm", choices=(*e2e_blocks.GEMMS, "inline"), default="dispatch",
                    help="the fp8 GEMM (e2e_blocks.GEMMS, opaque ops reading q and s) or inline dequant + bf16 GEMM")
    ap.add_argument("--first-dynamic", choices=("smallest", "largest"), default="largest",
                    help="the M the dynamic graph first runs at (Inductor times its Triton configs there): the "
                         "smallest M >= 2, or the largest, as vLLM's profile run at max_num_tokens does")
    ap.add_argument("--rounds", type=int, default=1,
                    help="compile and time every variant this many times, in turn (each round a fresh compile)")
    ap.add_argument("--inductor-configs", choices=("default", "fixed"), default="default",
                    help="fixed: Inductor's deterministic mode and no pointwise autotuning (no config timed at compile)")
    ap.add_argument("--autotune", choices=("round", "fresh"), default="round",
                    help="round: the variants of a round share Inductor's autotune choices (a kernel source "
                         "another variant compiled takes its config; emptied each round); fresh: each times its own")
    ap.add_argument("--exec", choices=("inductor", "fx"), default="inductor",
                    help="fx (CPU only): run the post-grad graph with FX instead of Inductor's code")
    ap.add_argument("--timing", choices=("interleaved", "sequential"), default="interleaved",
                    help="interleaved: a round's variants at one M captured in CUDA graphs and replayed in turn "
                         "(with Inductor's code twice: the noise floor); sequential: each timed on its own")
    ap.add_argument("--samples", type=int, default=40, help="interleaved replays of each forward per round")
    ap.add_argument("--rep-ms", type=float, default=10.0, help="do_bench_cudagraph's rep (ms; --timing sequential)")
    ap.add_argument("--repeats", type=int, default=2,
                    help="do_bench_cudagraph runs per row (interleaved: the samples' chunks reported apart)")
    ap.add_argument("--dry-reps", type=int, default=5, help="wall-clock calls per row in the dry run")
    ap.add_argument("--no-launches", dest="launches", action="store_false", help="skip the profiler's launch count")
    ap.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG")
    ap.add_argument("--lines", nargs="+", default=[],
                    help="calibration CSVs whose lines are fitted into the passes' profile (a trial)")
    ap.add_argument("--profile", default=None,
                    help="the passes' device profile: a name, a .json path or auto (default: auto, the one measured "
                         "on this GPU; the dry run's: h200)")
    ap.add_argument("--budget-s", type=float, default=0.0, help="skip what would start after this many s (0: none)")
    ap.add_argument("--out", default=None, help="default benchmarks/results/ (dry run: /tmp/eqsat_e2e_dryrun)")
    ap.add_argument("--tag", default=None, help="file name tag (default: h200 / the GPU's name, dryrun)")
    args = ap.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.profile is None:
        args.profile = "h200" if args.dry_run else "auto"
    try:
        args.profile = resolved(args.profile)
    except ValueError as exc:
        ap.error(f"--profile auto: {exc}")
    if args.M is None:
        args.M = list(DRY_M if args.dry_run else QUICK_M if args.quick else DEFAULT_M)
    if args.exec == "fx" and not args.dry_run:
        ap.error("--exec fx is for the CPU dry run")
    if args.out is None:
        args.out = "/tmp/eqsat_e2e_dryrun" if args.dry_run else os.path.join(ROOT, "benchmarks", "results")
    if args.tag is None:
        args.tag = "dryrun" if args.dry_run else gpu_tag()
    return args


def main(argv: Sequence[str] | None = None) -> Run:
    args = parse(argv)
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --dry-run on the CPU")
    configure_torch(args.inductor_configs == "fixed", args.autotune == "round")
    if args.dry_run:
        torch.set_num_threads(1)  # wall-clock times on a shared CPU: no OpenMP threads spinning against each other
    for line in env_lines(not args.dry_run, args.gemm):
        log(line)
    _, free = always_fuse_profile(args.profile, cuda=not args.dry_run)
    log(f"profile {args.profile}; blocks {args.blocks}; variants {args.variants}; M {args.M}; compile {args.compile}; "
        f"eqsat sizes {args.eqsat_sizes}; exec {args.exec}; always_fuse frees {free}")
    warm_up_compiler(torch.device("cpu" if args.dry_run else "cuda"), args.exec == "fx")
    run = Run(args)
    # the blocks in vLLM's ops last: once vLLM's stand-ins exist a native graph's kernels are spelled in them
    blocks = sorted(args.blocks, key=lambda name: name.endswith("_vllm"))
    try:
        for name in blocks:
            if run.over_budget():
                log(f"== {name}: skipped (budget)")
                run.add({"block": name, "check": "skipped", "detail": "budget"})
                continue
            run.block(name)
    finally:
        run.finish()
    return run


if __name__ == "__main__":
    r = main()
    sys.exit(0 if all(row["check"] in ("ok", "skipped") for row in r.rows) else 1)
