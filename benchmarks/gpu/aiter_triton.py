"""AITER's Triton kernels, loaded from the installed amd-aiter wheel without running
``aiter/__init__.py`` (its ROCm JIT set-up fails off ROCm), for the H200 benchmarks in this folder.

``load_aiter`` puts three stubs in ``sys.modules`` (the package itself with the wheel's folder as its
path, ``aiter.dtypes`` with fp8 = float8_e4m3fn, and an ``arch_info`` that answers "gfx950", plus a
``device_info`` for the CPU dry run), imports the kernel modules, checks the kernels used for
the two ROCm-only constructs a Hopper port would have to patch (``tl.assume``, ``waves_per_eu``), and
returns the wrappers with a list saying what it did. Nothing of AITER is copied here.
"""

from __future__ import annotations

import sys
import types

from eqsat.library.aiter import KERNELS as WRAPPERS  # (module under aiter.ops.triton, wrapper)
from eqsat.library.aiter import aiter_dir, stub_package


def find_aiter_dir() -> str:
    d = aiter_dir()
    if d is None:
        raise RuntimeError("amd-aiter is not installed on sys.path (install the wheel with pip --target, PYTHONPATH)")
    return d


def load_aiter(cpu: bool = False) -> tuple[dict, list[str]]:
    """The AITER Triton wrappers these benchmarks use (``WRAPPERS``), by name, and what loading them had
    to do (stubs put in ``sys.modules``, port checks), for the log."""
    import importlib

    d = find_aiter_dir()
    stub_package(d)
    patches: list[str] = [
        f"eqsat.library.aiter.stub_package({d}): sys.modules['aiter'] = a package stub (aiter/__init__.py not run), "
        "aiter.dtypes (fp8 = float8_e4m3fn) and arch_info (get_arch() -> 'gfx950': on CUDA the real one returns "
        "the int 90 and utils/types.py raises TypeError at import)"
    ]
    if cpu:
        di = types.ModuleType("aiter.ops.triton.utils.device_info")
        di.get_num_sms = lambda: 4
        di.get_num_xcds = lambda: 1
        sys.modules["aiter.ops.triton.utils.device_info"] = di

    mods = {name: importlib.import_module(f"aiter.ops.triton.{name}") for name in {m for m, _ in WRAPPERS}}
    assert "aiter.jit" not in sys.modules, "aiter.jit was imported: the stub leaked"

    # Hopper port checks (aiter-kernels.md section 5): no waves_per_eu launch kwargs and no tl.assume in the
    # kernels used here; verify instead of assuming, and report.
    import inspect

    from aiter.ops.triton._triton_kernels import activation as k_act
    from aiter.ops.triton._triton_kernels import fused_add_rmsnorm_pad as k_pad
    from aiter.ops.triton._triton_kernels import fused_fp8_quant as k_fq
    from aiter.ops.triton._triton_kernels import rmsnorm as k_rms

    used = [
        k_fq._fused_rms_fp8_group_quant_kernel,
        k_fq._fused_flatten_fp8_group_quant_kernel,
        k_fq._fused_rms_fp8_per_tensor_static_quant_kernel,
        k_act._act_mul_and_dynamic_fp8_group_quant_kernel,
        k_rms._rms_norm_kernel,
        k_rms._fused_add_rmsnorm_kernel,
        k_rms._quant_rms_norm_kernel,
        k_rms._quant_fused_add_rmsnorm_kernel,
        k_pad._fused_add_rmsnorm_pad,
    ]
    for k in used:
        fn = getattr(k, "fn", k)
        while hasattr(fn, "fn"):
            fn = fn.fn
        src = inspect.getsource(fn)
        if "tl.assume" in src:
            patches.append(f"WARNING: {fn.__name__} contains tl.assume (not patched)")
    for name, fname in WRAPPERS:
        f = getattr(mods[name], fname)
        if "waves_per_eu=" in "".join(
            ln for ln in inspect.getsource(f).splitlines() if not ln.strip().startswith("#")
        ):
            patches.append(f"WARNING: {name}.{fname} passes waves_per_eu (not patched)")
    if not any(p.startswith("WARNING") for p in patches):
        patches.append(
            f"no kernel source patches were needed: the {len(used)} kernels used have no tl.assume, and the "
            "wrappers used pass no waves_per_eu (act_mul_and_fp8_group_quant has it commented out)"
        )
    return {fname: getattr(mods[name], fname) for name, fname in WRAPPERS}, patches
