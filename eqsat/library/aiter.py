"""AITER's Triton kernels, loaded from the installed amd-aiter package (nothing of AITER is copied here).

:func:`triton_kernels` returns the wrappers the kernel modules' GPU implementations call. Where
``import aiter`` works (ROCm) the real package is used; elsewhere ``aiter/__init__.py`` (its ROCm JIT
set-up) never runs: three stand-in modules take the place of what the wrappers import and cannot run
there — the package (its folder as the path), ``aiter.dtypes`` (fp8 = e4m3fn) and ``arch_info``
(answers "gfx950", so the wrappers pick e4m3fn, the fp8 of MI355X and of every CUDA GPU). Modules
load once, as any import does. :func:`installed` says whether the wheel is there without importing it.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
import types
from functools import cache

import torch

KERNELS = (  # (module under aiter.ops.triton, wrapper)
    ("fused_fp8_quant", "fused_rms_fp8_group_quant"),
    ("fused_fp8_quant", "fused_flatten_fp8_group_quant"),
    ("fused_fp8_quant", "fused_rms_fp8_per_tensor_static_quant"),
    ("rmsnorm", "rms_norm"),
    ("rmsnorm", "rmsnorm2d_fwd_with_add"),
    ("rmsnorm", "rmsnorm2d_fwd_with_dynamicquant"),
    ("rmsnorm", "rmsnorm2d_fwd_with_add_dynamicquant"),
    ("activation", "act_mul_and_fp8_group_quant"),
    ("fused_add_rmsnorm_pad", "fused_add_rmsnorm_pad"),
)


ARCH_INFO = "aiter.ops.triton.utils._triton.arch_info"
AMD_ONLY = frozenset({"waves_per_eu", "matrix_instr_nonkdim", "kpack"})  # AMD backend compile options


class AiterMissing(RuntimeError):
    """AITER's Triton kernels cannot be loaded in this process."""


def aiter_dir() -> str | None:
    """The installed ``aiter`` package's folder, found without importing it (None: not installed)."""
    loaded = sys.modules.get("aiter")
    if loaded is not None:  # the real package or this module's stand-in (which has no spec)
        locations = list(getattr(loaded, "__path__", []))
    else:
        spec = importlib.util.find_spec("aiter")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in locations:
        if os.path.isfile(os.path.join(d, "ops", "triton", "fused_fp8_quant.py")):
            return d
    return None


def installed() -> bool:
    """Whether AITER's Triton kernels and Triton are both installed (nothing is imported)."""
    return aiter_dir() is not None and importlib.util.find_spec("triton") is not None


def stub_package(d: str) -> None:
    """Put the stand-in ``aiter`` package (folder ``d``), ``aiter.dtypes`` and ``arch_info`` in ``sys.modules``."""
    pkg = types.ModuleType("aiter")
    pkg.__path__ = [d]
    pkg.__file__ = os.path.join(d, "__init__.py")
    sys.modules["aiter"] = pkg
    dtypes = types.ModuleType("aiter.dtypes")
    dtypes.fp8 = torch.float8_e4m3fn  # type: ignore[attr-defined]
    dtypes.bf16, dtypes.fp16, dtypes.fp32 = torch.bfloat16, torch.float16, torch.float32  # type: ignore[attr-defined]
    dtypes.i8, dtypes.i32 = torch.int8, torch.int32  # type: ignore[attr-defined]
    sys.modules["aiter.dtypes"] = dtypes
    pkg.dtypes = dtypes  # type: ignore[attr-defined]
    arch = types.ModuleType(ARCH_INFO)
    arch.get_arch = lambda: "gfx950"  # type: ignore[attr-defined]
    arch.get_device = lambda: "MI350X"  # type: ignore[attr-defined]
    arch.is_fp4_avail = lambda: False  # type: ignore[attr-defined]
    arch.is_fp8_avail = lambda: True  # type: ignore[attr-defined]
    sys.modules[ARCH_INFO] = arch


@cache
def triton_module(name: str) -> types.ModuleType:
    """``aiter.ops.triton.<name>`` from the installed wheel (on top of the stand-ins where ``import aiter``
    cannot run); raises :class:`AiterMissing` with the fix."""
    d = aiter_dir()
    if d is None or importlib.util.find_spec("triton") is None:
        raise AiterMissing("AITER's Triton kernels are not installed: pip install --no-deps amd-aiter (and triton)")
    if torch.version.hip is not None:
        try:
            importlib.import_module("aiter")
        except ImportError:
            stub_package(d)
    elif "aiter" not in sys.modules or not hasattr(sys.modules["aiter"], "__path__"):
        stub_package(d)
    stand_in = sys.modules.get(ARCH_INFO)
    if stand_in is not None and stand_in.__spec__ is None:  # `import <ARCH_INFO> as` reads its parent's attribute
        importlib.import_module(ARCH_INFO.rpartition(".")[0]).arch_info = stand_in  # type: ignore[attr-defined]
    return importlib.import_module(f"aiter.ops.triton.{name}")


def portable(config: dict[str, object]) -> dict[str, object]:
    """An AITER tuning config without the options only AMD's Triton backend reads (``AMD_ONLY``), so a
    wrapper that passes its config to the kernel also launches on a CUDA GPU."""
    return {k: v for k, v in config.items() if k not in AMD_ONLY}


@cache
def triton_kernels() -> types.SimpleNamespace:
    """AITER's Triton wrappers by name (``KERNELS``); raises :class:`AiterMissing` with the fix."""
    return types.SimpleNamespace(**{name: getattr(triton_module(mod), name) for mod, name in KERNELS})


def rows2d(fn):  # noqa: ANN001, ANN201  (a decorator over kernels of varying signature)
    """Run a 2-D kernel over ``x``'s rows: the leading dims of the tensor arguments of x's shape are
    flattened, and every output with x's leading dims gets them back."""

    def run(x: torch.Tensor, *args: object) -> object:
        lead, n = x.shape[:-1], x.shape[-1]
        flat = [a.reshape(-1, a.shape[-1]) if isinstance(a, torch.Tensor) and a.shape[:-1] == lead else a
                for a in args]
        rows = math.prod(lead)
        out = fn(x.reshape(rows, n), *flat)
        outs = out if isinstance(out, tuple) else (out,)
        back = tuple(o.reshape(*lead, o.shape[-1]) if o.dim() == 2 and o.shape[0] == rows else o for o in outs)
        return back if isinstance(out, tuple) else back[0]

    return run
