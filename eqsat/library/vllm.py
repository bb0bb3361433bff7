"""What every stand-in for a vLLM 0.33.0 op shares: the platform fp8 dtype and how a stand-in is made.

vLLM's AITER ops exist only on ROCm builds; each kernel module declares stand-ins for the ones it
reads or writes (``vllm_standins(fp8)``), with vLLM's schema strings, fakes written as vLLM writes them
(the AITER fakes unpack ``M, N = x.shape``: 2-D only) and a kernel that is never more permissive:
:func:`standin_kernel` runs the fake on the real inputs first (its checks, its output layout), then what
AITER's kernel requires beyond it, then fills the outputs from the module's reference function. On a GPU
a stand-in runs the AITER Triton kernel vLLM's op calls on ROCm (for vLLM's HIP / CK ones, AITER's
Triton kernel of the same op where the wheel has one: ``rms_norm``, ``rmsnorm2d_fwd_with_add``, the
group quant), inside the same checks; the ones with no Triton kernel run the reference there too.
``standin_op`` makes one (its kernels, its fake); ``eqsat.kernels.torch_ops.register_vllm_standins``
registers them. The fp8 dtype (vLLM's
``FP8_DTYPE``, the platform's) is fixed by the first registration that defines a quant op.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from eqsat.core.accepts import Produces
from eqsat.core.spec import OpDef

_STATE: dict[str, torch.dtype] = globals().get("_STATE", {})
F32 = torch.float32


def standin_fp8_dtype() -> torch.dtype | None:
    """The fp8 dtype of the quant stand-ins this process defined, or None if it defined none."""
    return _STATE.get("fp8_dtype")


def fix_fp8_dtype(fp8: torch.dtype) -> None:
    """Record the fp8 dtype the quant stand-ins were defined with (the first registration's)."""
    _STATE.setdefault("fp8_dtype", fp8)


def vllm_fp8_dtype() -> torch.dtype | None:
    """The fp8 dtype vLLM's AITER ops produce in this process: the stand-ins' where this process defined
    them, else vLLM's own platform dtype (``FP8_DTYPE`` of ``vllm._aiter_ops``, once vLLM has imported
    it); None when neither is known."""
    mine = standin_fp8_dtype()
    if mine is not None:
        return mine
    aiter_ops = sys.modules.get("vllm._aiter_ops")
    return getattr(aiter_ops, "FP8_DTYPE", None)


FP8_OUT = Produces("dt", vllm_fp8_dtype)
"""The requirement of every vLLM op that quantizes to the platform's fp8 (it takes no dtype)."""


def rows(x: torch.Tensor, op: str, who: str = "vLLM's fake") -> tuple[Any, Any]:
    """``M, N = x.shape`` as vLLM's AITER fakes (or ``who``: AITER's kernel) unpack it: the same
    ValueError for any rank but 2."""
    if x.dim() != 2:
        want = "too many" if x.dim() > 2 else "not enough"
        raise ValueError(f"{op}: {want} values to unpack (expected 2): {who} takes a 2-D x, got shape {tuple(x.shape)}")
    return x.shape[0], x.shape[1]


def ceil_div(n: Any, g: Any) -> Any:
    return (n + g - 1) // g


def aiter_transposed(s: torch.Tensor) -> torch.Tensor:
    """A ``transpose_scale=True`` scale as AITER returns it: the column-major data of ``s`` read as a
    row-major tensor of ``s``'s shape (the GEMM that reads it knows; an element is not ``s``'s)."""
    return s.transpose(0, 1).contiguous().view(s.shape)


def need(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def divides(op: str, n: Any, g: int) -> None:
    need(g > 0 and n % g == 0, f"{op}: the last dim {n} must be a multiple of group_size {g}")


def standin_kernel(fake: Callable[..., Any], compute: Callable[..., Any],
                   needs: Callable[..., None] | None = None, take: bool = False) -> Callable[..., Any]:
    """A stand-in kernel: vLLM's fake on the real inputs (its checks, its output layout), AITER's
    further requirements ``needs``, then ``compute``'s values copied into the fake's outputs; with
    ``take`` (a GPU kernel's fresh outputs) an output that already has the fake's layout is returned
    as it is, so the stand-in launches nothing AITER's kernel does not."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        outs = fake(*args, **kwargs)
        if needs is not None:
            needs(*args, **kwargs)
        got = compute(*args, **kwargs)
        if isinstance(outs, torch.Tensor):
            return _into(outs, got, take)
        return tuple(_into(o, g, take) for o, g in zip(outs, got, strict=True))

    return kernel


def standin_op(namespace: str, schema: str, fake: Callable[..., Any], compute: Callable[..., Any],
               needs: Callable[..., None] | None = None, gpu: Callable[..., Any] | None = None) -> OpDef:
    """A stand-in op: ``standin_kernel`` of the reference ``compute`` and, with ``gpu`` (AITER's kernel,
    on CUDA and ROCm), of that one taking its outputs as they are; both inside ``fake`` and ``needs``."""
    return OpDef(namespace, schema, standin_kernel(fake, compute, needs), fake,
                 None if gpu is None else standin_kernel(fake, gpu, needs, take=True))


def _into(out: torch.Tensor, got: torch.Tensor, take: bool) -> torch.Tensor:
    if take and got.shape == out.shape and got.dtype == out.dtype and got.stride() == out.stride():
        return got
    return out.copy_(got)


def nothing(*args: Any) -> None:
    """The fake of a mutating op that returns nothing."""
    return None
