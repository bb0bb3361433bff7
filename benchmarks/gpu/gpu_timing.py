"""Timing and the run's record on the GPU, shared by the H200 benchmarks in this folder: CUDA-graph
medians (``bench``), kernel launches from the profiler, the environment, the GPU's clocks and copy
bandwidth, torch set-up, and the compile-warming worker processes.
"""

from __future__ import annotations

import datetime
import os
import statistics
import subprocess
import sys
import time

from aiter_triton import find_aiter_dir


def gpu_tag():
    """A short name of the GPU torch sees, for file names and tables: its shipped profile's name where
    one was measured on that card (``h200``, ``h100``), else its name's letters and digits."""
    import torch

    from eqsat.cost.cards import gpu_profile_name

    if not torch.cuda.is_available():
        return "gpu"
    name = torch.cuda.get_device_name(0)
    try:
        return gpu_profile_name(name)
    except ValueError:
        return "".join(ch for ch in name.lower() if ch.isalnum())[:16] or "gpu"


def log(*a):
    print(*a, flush=True)


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


class GraphTimer:
    """One callable captured in a CUDA graph of ``calls`` back-to-back calls (enough for about ``target_ms``
    of device time a replay), kept so that several callables can be timed interleaved (``interleave``).
    The timer holds ``fn`` (and so the compiled code the graph launches) and the graph's memory pool until
    it is dropped."""

    def __init__(self, fn, target_ms=1.0):
        import torch

        self.fn = fn

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up off the default stream, as capture requires
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        one = torch.cuda.CUDAGraph()
        with torch.cuda.graph(one):
            fn()
        est = self._replay_ms(one, 5)
        self.calls = max(1, min(1000, round(target_ms / max(est, 1e-4))))
        if self.calls == 1:
            self.graph = one
        else:
            del one
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                for _ in range(self.calls):
                    fn()
        self.graph.replay()  # the first replay uploads the graph
        torch.cuda.synchronize()

    @staticmethod
    def _replay_ms(graph, n):
        import torch

        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / n

    def sample_us(self):
        """One replay, in µs a call."""
        return self._replay_ms(self.graph, 1) * 1e3 / self.calls


def interleave(timers, samples):
    """{name: [µs a call per sample]}: ``samples`` rounds, each replaying every timer once, the order rotated
    from round to round, so the device's drift (clocks, temperature) falls on every timer alike."""
    names = list(timers)
    out = {n: [] for n in names}
    for i in range(samples):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            out[n].append(timers[n].sample_us())
    return out


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
        d = find_aiter_dir()
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


def wait_workers(procs, timeout_s, t0):
    """Wait for the compile-warming worker processes; kill any that outlive ``timeout_s``."""
    for p in procs:
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            log(f"[warm] worker pid {p.pid} timed out and was killed")
    log(f"[warm] {len(procs)} workers finished in {time.time() - t0:.1f} s (rc {[p.returncode for p in procs]})")
