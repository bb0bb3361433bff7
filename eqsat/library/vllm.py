"""Stand-ins for the vLLM 0.33.0 ops the ROCm/AITER fusion pass matches and emits, as vLLM defines them.

``register_vllm_standins()`` defines, with vLLM's namespaces and schema strings, each op of
``eqsat.library.vllm_ops`` that this process lacks: the ``vllm_ir`` norms, the AITER ops
(norm / group / per-token / static quants, their fused forms, the gated norm, silu + quant, the MLA
dual norms, add + norm + pad, the router GEMM) and the ``_C`` ops read under ``auto_functionalized``.
``make test-vllm`` compares each with vLLM's own registration (schema, fake outputs or errors on
2-D and 3-D inputs).

Invariants:
- An op that already exists (the real vLLM imported first registers its ``vllm_ir`` ops) is never
  redefined or overridden; only missing ones are added.
- A stand-in is never more permissive than vLLM's op: its fake is written as vLLM writes it (the AITER
  fakes unpack ``M, N = x.shape``, so they are 2-D), and its kernel (an ``eqsat.library.reference``
  function) first checks what vLLM's fake and AITER's kernel require (``standin_checks``).
- The fp8 dtype (vLLM's ``FP8_DTYPE``, the platform's) is fixed by the first call that defines a
  quant op (default e4m3fnuz, gfx942 / MI300X); later calls cannot change it (``standin_fp8_dtype``).
"""

from __future__ import annotations

import importlib.util
import sys

import torch

from eqsat.core.accepts import Produces
from eqsat.library.eqsat_ops import define_op
from eqsat.library.vllm_ops import standin_table

# The Library objects that own the stand-in definitions. A Library removes all of its registrations
# when it is garbage-collected, so these must stay referenced for the life of the process; the dict
# is carried over if this module is reloaded so that a reload cannot drop live ops.
_LIBS: dict[str, torch.library.Library] = globals().get("_LIBS", {})
_STATE: dict[str, torch.dtype] = globals().get("_STATE", {})


def standin_fp8_dtype() -> torch.dtype | None:
    """The fp8 dtype of the quant stand-ins this module defined, or None if it defined none."""
    return _STATE.get("fp8_dtype")


def vllm_fp8_dtype() -> torch.dtype | None:
    """The fp8 dtype vLLM's AITER ops produce in this process: the stand-ins' where this module
    defined them, else vLLM's own platform dtype (``FP8_DTYPE`` of ``vllm._aiter_ops``, once vLLM has
    imported it); None when neither is known."""
    mine = standin_fp8_dtype()
    if mine is not None:
        return mine
    aiter_ops = sys.modules.get("vllm._aiter_ops")
    return getattr(aiter_ops, "FP8_DTYPE", None)


FP8_OUT = Produces("dt", vllm_fp8_dtype)
"""The requirement of every vLLM op that quantizes to the platform's fp8 (it takes no dtype)."""


def register_vllm_standins(fp8_dtype: torch.dtype = torch.float8_e4m3fnuz) -> None:
    """Define whichever of the vLLM ops are missing; a no-op once they all exist.

    ``fp8_dtype`` is the platform fp8 dtype of the quant stand-ins; only the first call that defines
    them uses it (query the result with ``standin_fp8_dtype``).
    """
    if importlib.util.find_spec("vllm") is not None:
        import vllm.ir  # noqa: F401  (the real vllm_ir ops first: a stand-in must never shadow them)
    fp8 = _STATE.get("fp8_dtype", fp8_dtype)
    for op in standin_table(fp8):
        if define_op(_LIBS, op.namespace, op.schema, op.kernel, op.fake) and op.namespace == "vllm":
            _STATE["fp8_dtype"] = fp8
