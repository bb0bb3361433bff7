"""The torch ops the kernel modules define, registered: the project's ``eqsat::`` ops (each module's
``OPS``), when ``eqsat`` is imported, and the stand-ins for vLLM 0.33.0's ops (each module's
``vllm_standins(fp8)``), on demand.

An op this process already has is never redefined (the real vLLM imported first registers its
``vllm_ir`` ops; a second call changes nothing). The stand-ins' fp8 dtype (vLLM's platform
``FP8_DTYPE``; default e4m3fnuz, gfx942 / MI300X) is the first registration's
(``eqsat.library.vllm.standin_fp8_dtype``).
"""

from __future__ import annotations

import importlib.util

import torch

from eqsat.core.spec import OpDef
from eqsat.kernels.catalog import FAMILIES
from eqsat.library.define import define
from eqsat.library.vllm import fix_fp8_dtype, standin_fp8_dtype


def eqsat_ops() -> list[OpDef]:
    """Every ``eqsat::`` op the kernel modules define."""
    return [op for family in FAMILIES for op in getattr(family, "OPS", ())]


def vllm_standin_ops(fp8: torch.dtype) -> list[OpDef]:
    """Every vLLM stand-in the kernel modules define, their quants producing ``fp8``."""
    return [op for family in FAMILIES if hasattr(family, "vllm_standins") for op in family.vllm_standins(fp8)]


def register_eqsat_ops() -> None:
    define(eqsat_ops())


def register_vllm_standins(fp8_dtype: torch.dtype = torch.float8_e4m3fnuz) -> None:
    """Define whichever of vLLM's ops are missing (a no-op once they all exist); ``fp8_dtype``, the
    platform fp8 of the quant stand-ins, counts only for the first call that defines one."""
    if importlib.util.find_spec("vllm") is not None:
        import vllm.ir  # noqa: F401  (the real vllm_ir ops first: a stand-in must never shadow them)
    fp8 = standin_fp8_dtype() or fp8_dtype
    if any(op.namespace == "vllm" for op in define(vllm_standin_ops(fp8))):
        fix_fp8_dtype(fp8)
