"""Defining torch ops once per process, and the helpers the kernel modules' fakes share.

:func:`define_op` defines ``namespace::schema`` with its kernel (any device; the CPU only where a GPU
implementation is given, for the CUDA key) and a fake, unless the dispatcher knows the name already (a second import, a reload, vLLM's own op).
The ``Library`` objects are kept in ``_LIBS``: dropping one removes everything it registered, so they
stay reachable for the whole process (the dict even survives a reload of this module).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from eqsat.core.spec import OpDef

_LIBS: dict[str, torch.library.Library] = globals().get("_LIBS", {})


def op_exists(qualname: str, overload: str = "") -> bool:
    """True when the dispatcher knows the schema ``qualname`` (e.g. "vllm_ir::rms_norm")."""
    try:
        torch._C._dispatch_find_schema_or_throw(qualname, overload)
    except RuntimeError:
        return False
    return True


def define_op(libs: dict[str, torch.library.Library], namespace: str, schema: str, impl: Callable[..., Any],
              fake: Callable[..., Any], gpu: Callable[..., Any] | None = None) -> bool:
    """Define ``namespace::schema`` with kernel ``impl`` (``gpu`` on the CUDA key) and a fake, unless it exists;
    the FRAGMENT library for ``namespace`` is made on demand in ``libs`` (keep ``libs`` alive). Returns
    True if this call defined the op."""
    name = schema.split("(", 1)[0]
    if op_exists(f"{namespace}::{name}"):
        return False
    lib = libs.get(namespace)
    if lib is None:
        lib = libs[namespace] = torch.library.Library(namespace, "FRAGMENT")
    lib.define(schema)
    if gpu is None:
        lib.impl(name, impl, "CompositeExplicitAutograd")
    else:
        lib.impl(name, impl, "CPU")
        lib.impl(name, gpu, "CUDA")
    torch.library.register_fake(f"{namespace}::{name}", fake, lib=lib)
    return True


def define(ops: list[OpDef]) -> list[OpDef]:
    """Define each of ``ops`` missing in this process; the ones this call defined."""
    return [op for op in ops if define_op(_LIBS, op.namespace, op.schema, op.kernel, op.fake, op.gpu)]


def fresh(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every output fresh and contiguous, as the project's ops promise."""
    return tuple(t.contiguous() for t in ts)


def scale_shape(x: torch.Tensor, group_size: int) -> list[Any]:
    """Shape of the per-group scale of ``x``: ``x.shape[:-1] + [N // group_size]`` (SymInt-safe)."""
    return [*x.shape[:-1], x.shape[-1] // group_size]


def check_norm_shapes(x: torch.Tensor, weight: torch.Tensor | None, residual: torch.Tensor | None = None) -> None:
    """What the real kernels require, stated to the shape environment: the weight spans the last dim
    and a residual has x's shape (under torch.compile this ties a symbolic hidden dim to the weight's)."""
    if weight is not None:
        torch._check(x.shape[-1] == weight.shape[-1], lambda: "rms_norm: weight must span the last dim of x")
    if residual is not None:
        for a, b in zip(x.shape, residual.shape, strict=True):
            torch._check(a == b, lambda: "rms_norm: residual must have the shape of x")


def empty(x: torch.Tensor, shape: Sequence[Any] | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A fresh contiguous tensor on ``x``'s device, of ``shape`` (x's) and ``dtype`` (x's): what
    ``x.new_empty`` makes, without its decomposition (under a fake mode new to an op, about half the cost)."""
    return torch.empty(x.shape if shape is None else shape, dtype=x.dtype if dtype is None else dtype, device=x.device)


def quant_fake(x: torch.Tensor, group_size: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A group quant's outputs: q like x in ``dtype``, the fp32 scale of ``scale_shape``."""
    return empty(x, dtype=dtype), empty(x, scale_shape(x, group_size), torch.float32)


def token_fake(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A per-token quant's outputs: q like x in ``dtype``, the fp32 scale ``[..., 1]``."""
    return empty(x, dtype=dtype), empty(x, [*x.shape[:-1], 1], torch.float32)
