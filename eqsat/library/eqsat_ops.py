"""The project's own `torch.library` ops, namespace `eqsat`, and the helper that defines ops once.

Ops (all functional: no argument is mutated and every output is a fresh, contiguous tensor):

    eqsat::rms_norm(Tensor x, Tensor weight, float eps) -> Tensor
    eqsat::fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)
    eqsat::group_fp8_quant(Tensor x, SymInt group_size, ScalarType dtype) -> (Tensor, Tensor)
    eqsat::rmsnorm_fp8_group_quant(Tensor x, Tensor weight, float eps, SymInt group_size,
                                   ScalarType dtype) -> (Tensor, Tensor)
    eqsat::rmsnorm_add_fp8_group_quant(Tensor x, Tensor residual, Tensor weight, float eps,
                                       SymInt group_size, ScalarType dtype) -> (Tensor, Tensor, Tensor)
    eqsat::silu_and_mul(Tensor x) -> Tensor
    eqsat::silu_mul_fp8_group_quant(Tensor x, SymInt group_size, ScalarType dtype) -> (Tensor, Tensor)
    eqsat::mla_dual_rms_norm(Tensor q, Tensor q_weight, Tensor kv, Tensor kv_weight, float q_eps,
                             float kv_eps) -> (Tensor, Tensor)
    eqsat::mla_dual_rms_norm_group_quant(<the same>, SymInt group_size, ScalarType dtype) -> (Tensor, Tensor, Tensor)
    eqsat::mla_dual_rms_norm_token_quant(<the same>, ScalarType dtype) -> (Tensor, Tensor, Tensor)
    eqsat::add_rmsnorm_pad(Tensor x, Tensor residual, Tensor weight, float eps, SymInt pad_to_multiple)
                           -> (Tensor, Tensor)
    eqsat::token_fp8_quant(Tensor x, ScalarType dtype) -> (Tensor, Tensor)            # and vllm_token_fp8_quant
    eqsat::static_fp8_quant(Tensor x, Tensor scale, ScalarType dtype) -> Tensor       # and vllm_static_fp8_quant
    eqsat::rmsnorm_token_fp8_quant(Tensor x, Tensor weight, float eps, ScalarType dtype) -> (Tensor, Tensor)
    eqsat::rmsnorm_add_token_fp8_quant(Tensor x, Tensor residual, Tensor weight, float eps,
                                       ScalarType dtype) -> (Tensor, Tensor, Tensor)
    eqsat::rmsnorm_static_fp8_quant(Tensor x, Tensor weight, float eps, Tensor scale, ScalarType dtype) -> Tensor
    eqsat::rmsnorm_add_static_fp8_quant(Tensor x, Tensor residual, Tensor weight, float eps, Tensor scale,
                                        ScalarType dtype) -> (Tensor, Tensor)
    eqsat::rms_norm_gated(Tensor x, Tensor z, Tensor weight, float eps) -> Tensor
    eqsat::rms_norm_gated_fp8_group_quant(Tensor x, Tensor z, Tensor weight, float eps, SymInt group_size,
                                          ScalarType dtype) -> (Tensor, Tensor)

Invariants:
- The real kernel of each op is the matching function of `eqsat.library.reference`, registered under
  CompositeExplicitAutograd, so it runs on any device (no autograd formula is provided).
- Each op has a fake impl built only from `x.shape` / `new_empty`, so token dims may be SymInts.
  The fakes do not check `N % group_size == 0`; the real kernels raise ValueError for that.
- Importing this module is idempotent: an op whose schema is already known to the dispatcher is
  left alone (a second import, an `importlib.reload`, or another copy of this module).
- The `Library` objects are kept in `_LIBS`. Dropping a `Library` removes everything it registered,
  so they must stay reachable for the whole process; `_LIBS` even survives a reload of this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from eqsat.library import reference as ref

NAMESPACE = "eqsat"

_LIBS: dict[str, torch.library.Library] = globals().get("_LIBS", {})


def op_exists(qualname: str, overload: str = "") -> bool:
    """True when the dispatcher knows the schema `qualname` (e.g. "vllm_ir::rms_norm")."""
    try:
        torch._C._dispatch_find_schema_or_throw(qualname, overload)
    except RuntimeError:
        return False
    return True


def define_op(
    libs: dict[str, torch.library.Library],
    namespace: str,
    schema: str,
    impl: Callable[..., Any],
    fake: Callable[..., Any],
) -> bool:
    """Define `namespace::schema` with a CompositeExplicitAutograd kernel and a fake, unless it exists.

    `schema` is "name(args) -> rets". The FRAGMENT library for `namespace` is created on demand and
    stored in `libs`; the caller must keep `libs` alive. Returns True if this call defined the op.
    """
    name = schema.split("(", 1)[0]
    if op_exists(f"{namespace}::{name}"):
        return False
    lib = libs.get(namespace)
    if lib is None:
        lib = libs[namespace] = torch.library.Library(namespace, "FRAGMENT")
    lib.define(schema)
    lib.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{namespace}::{name}", fake, lib=lib)
    return True


def _c(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.contiguous() for t in ts)


def scale_shape(x: torch.Tensor, group_size: int) -> list[Any]:
    """Shape of the per-group scale of `x`: x.shape[:-1] + [N // group_size] (SymInt-safe)."""
    return [*x.shape[:-1], x.shape[-1] // group_size]


# -- real kernels: thin wrappers over eqsat.library.reference -------------------------------------------------


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return ref.rms_norm(x, weight, eps).contiguous()


def _fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> Any:
    return _c(*ref.fused_add_rms_norm(x, residual, weight, eps))


def _group_fp8_quant(x: torch.Tensor, group_size: int, dtype: torch.dtype) -> Any:
    return _c(*ref.group_fp8_quant(x, group_size, dtype))


def _rmsnorm_fp8_group_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int, dtype: torch.dtype
) -> Any:
    return _c(*ref.rmsnorm_fp8_group_quant(x, weight, eps, group_size, dtype))


def _rmsnorm_add_fp8_group_quant(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    group_size: int,
    dtype: torch.dtype,
) -> Any:
    return _c(*ref.rmsnorm_add_fp8_group_quant(x, residual, weight, eps, group_size, dtype))


# -- fakes: shapes and dtypes only -------------------------------------------------------------------


def check_norm_shapes(x: torch.Tensor, weight: torch.Tensor | None, residual: torch.Tensor | None = None) -> None:
    """What the real kernels require, stated to the shape environment: the weight spans the last dim
    and a residual has x's shape (under torch.compile this ties a symbolic hidden dim to the weight's)."""
    if weight is not None:
        torch._check(x.shape[-1] == weight.shape[-1], lambda: "rms_norm: weight must span the last dim of x")
    if residual is not None:
        for a, b in zip(x.shape, residual.shape, strict=True):
            torch._check(a == b, lambda: "rms_norm: residual must have the shape of x")


def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    check_norm_shapes(x, weight)
    return x.new_empty(x.shape)


def _fused_add_rms_norm_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> Any:
    check_norm_shapes(x, weight, residual)
    return x.new_empty(x.shape), x.new_empty(x.shape)


def _quant_fake(x: torch.Tensor, group_size: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape, dtype=dtype), x.new_empty(scale_shape(x, group_size), dtype=torch.float32)


def _rmsnorm_fp8_group_quant_fake(
    x: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int, dtype: torch.dtype
) -> Any:
    check_norm_shapes(x, weight)
    return _quant_fake(x, group_size, dtype)


def _rmsnorm_add_fp8_group_quant_fake(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    group_size: int,
    dtype: torch.dtype,
) -> Any:
    check_norm_shapes(x, weight, residual)
    q, scale = _quant_fake(x, group_size, dtype)
    return q, x.new_empty(x.shape), scale


def _half(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty([*x.shape[:-1], x.shape[-1] // 2])


def _silu_mul_quant_fake(x: torch.Tensor, group_size: int, dtype: torch.dtype) -> Any:
    return _quant_fake(_half(x), group_size, dtype)


_SCHEMAS: list[tuple[str, Callable[..., Any], Callable[..., Any]]] = [
    ("silu_and_mul(Tensor x) -> Tensor", lambda x: ref.silu_and_mul(x).contiguous(), _half),
    (
        "silu_mul_fp8_group_quant(Tensor x, SymInt group_size, ScalarType dtype) -> (Tensor, Tensor)",
        lambda x, g, dt: _c(*ref.silu_mul_fp8_group_quant(x, g, dt)),
        _silu_mul_quant_fake,
    ),
    ("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", _rms_norm, _rms_norm_fake),
    (
        "fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)",
        _fused_add_rms_norm,
        _fused_add_rms_norm_fake,
    ),
    (
        "group_fp8_quant(Tensor x, SymInt group_size, ScalarType dtype) -> (Tensor, Tensor)",
        _group_fp8_quant,
        _quant_fake,
    ),
    (
        "rmsnorm_fp8_group_quant(Tensor x, Tensor weight, float eps, SymInt group_size, ScalarType dtype)"
        " -> (Tensor, Tensor)",
        _rmsnorm_fp8_group_quant,
        _rmsnorm_fp8_group_quant_fake,
    ),
    (
        "rmsnorm_add_fp8_group_quant(Tensor x, Tensor residual, Tensor weight, float eps, SymInt group_size,"
        " ScalarType dtype) -> (Tensor, Tensor, Tensor)",
        _rmsnorm_add_fp8_group_quant,
        _rmsnorm_add_fp8_group_quant_fake,
    ),
]


# -- per-token dynamic and static per-tensor fp8 quant (``eqsat.kernels.token_static``) -------------


def _token_fake(x: torch.Tensor, dtype: torch.dtype) -> Any:
    return x.new_empty(x.shape, dtype=dtype), x.new_empty([*x.shape[:-1], 1], dtype=torch.float32)


def _static_fake(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.new_empty(x.shape, dtype=dtype)


def _rms_token_fake(x: torch.Tensor, weight: torch.Tensor, eps: float, dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight)
    return _token_fake(x, dtype)


def _add_rms_token_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                        dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight, residual)
    q, scale = _token_fake(x, dtype)
    return q, x.new_empty(x.shape), scale


def _rms_static_fake(x: torch.Tensor, weight: torch.Tensor, eps: float, scale: torch.Tensor,
                     dtype: torch.dtype) -> torch.Tensor:
    check_norm_shapes(x, weight)
    return x.new_empty(x.shape, dtype=dtype)


def _add_rms_static_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                         scale: torch.Tensor, dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight, residual)
    return x.new_empty(x.shape, dtype=dtype), x.new_empty(x.shape)


_SCHEMAS += [
    ("token_fp8_quant(Tensor x, ScalarType dtype) -> (Tensor, Tensor)",
     lambda x, dt: _c(*ref.token_fp8_quant(x, dt)), _token_fake),
    ("static_fp8_quant(Tensor x, Tensor scale, ScalarType dtype) -> Tensor",
     lambda x, s, dt: ref.static_fp8_quant(x, s, dt).contiguous(), _static_fake),
    ("vllm_token_fp8_quant(Tensor x, ScalarType dtype) -> (Tensor, Tensor)",
     lambda x, dt: _c(*ref.vllm_token_fp8_quant(x, dt)), _token_fake),
    ("vllm_static_fp8_quant(Tensor x, Tensor scale, ScalarType dtype) -> Tensor",
     lambda x, s, dt: ref.vllm_static_fp8_quant(x, s, dt).contiguous(), _static_fake),
    ("rmsnorm_token_fp8_quant(Tensor x, Tensor weight, float eps, ScalarType dtype) -> (Tensor, Tensor)",
     lambda x, w, eps, dt: _c(*ref.rmsnorm_token_fp8_quant(x, w, eps, dt)), _rms_token_fake),
    ("rmsnorm_add_token_fp8_quant(Tensor x, Tensor residual, Tensor weight, float eps, ScalarType dtype)"
     " -> (Tensor, Tensor, Tensor)",
     lambda x, r, w, eps, dt: _c(*ref.rmsnorm_add_token_fp8_quant(x, r, w, eps, dt)), _add_rms_token_fake),
    ("rmsnorm_static_fp8_quant(Tensor x, Tensor weight, float eps, Tensor scale, ScalarType dtype) -> Tensor",
     lambda x, w, eps, s, dt: ref.rmsnorm_static_fp8_quant(x, w, eps, s, dt).contiguous(), _rms_static_fake),
    ("rmsnorm_add_static_fp8_quant(Tensor x, Tensor residual, Tensor weight, float eps, Tensor scale,"
     " ScalarType dtype) -> (Tensor, Tensor)",
     lambda x, r, w, eps, s, dt: _c(*ref.rmsnorm_add_static_fp8_quant(x, r, w, eps, s, dt)), _add_rms_static_fake),
]

# -- MLA dual rms_norm and add + rms_norm + pad (``eqsat.kernels.mla``, ``eqsat.kernels.pad``) ------


def _dual_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
               q_eps: float, kv_eps: float) -> Any:
    check_norm_shapes(q, q_weight)
    check_norm_shapes(kv, kv_weight)
    torch._check(q.shape[0] == kv.shape[0], lambda: "mla dual rms_norm: q and kv must have the same rows")
    return q.new_empty(q.shape), kv.new_empty(kv.shape)


def _dual_group_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                     q_eps: float, kv_eps: float, group_size: int, dtype: torch.dtype) -> Any:
    kv_normed = _dual_fake(q, q_weight, kv, kv_weight, q_eps, kv_eps)[1]
    return (*_quant_fake(q, group_size, dtype), kv_normed)


def _dual_token_fake(q: torch.Tensor, q_weight: torch.Tensor, kv: torch.Tensor, kv_weight: torch.Tensor,
                     q_eps: float, kv_eps: float, dtype: torch.dtype) -> Any:
    kv_normed = _dual_fake(q, q_weight, kv, kv_weight, q_eps, kv_eps)[1]
    return (q.new_empty(q.shape, dtype=dtype), q.new_empty([*q.shape[:-1], 1], dtype=torch.float32), kv_normed)


def _add_rmsnorm_pad_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                          pad_to_multiple: int) -> Any:
    check_norm_shapes(x, weight, residual)
    return x.new_empty([*x.shape[:-1], ref.padded_width(x.shape[-1], pad_to_multiple)]), x.new_empty(x.shape)


_DUAL = "Tensor q, Tensor q_weight, Tensor kv, Tensor kv_weight, float q_eps, float kv_eps"
_SCHEMAS += [
    (f"mla_dual_rms_norm({_DUAL}) -> (Tensor, Tensor)",
     lambda *a: _c(*ref.mla_dual_rms_norm(*a)), _dual_fake),
    (f"mla_dual_rms_norm_group_quant({_DUAL}, SymInt group_size, ScalarType dtype) -> (Tensor, Tensor, Tensor)",
     lambda *a: _c(*ref.mla_dual_rms_norm_group_quant(*a)), _dual_group_fake),
    (f"mla_dual_rms_norm_token_quant({_DUAL}, ScalarType dtype) -> (Tensor, Tensor, Tensor)",
     lambda *a: _c(*ref.mla_dual_rms_norm_token_quant(*a)), _dual_token_fake),
    ("add_rmsnorm_pad(Tensor x, Tensor residual, Tensor weight, float eps, SymInt pad_to_multiple)"
     " -> (Tensor, Tensor)", lambda *a: _c(*ref.add_rmsnorm_pad(*a)), _add_rmsnorm_pad_fake),
]

# -- gated rms_norm, alone and fused with the group quant (``eqsat.kernels.gated``) -------------------


def _gated_fake(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    check_norm_shapes(x, weight, z)
    return x.new_empty(x.shape)


def _gated_quant_fake(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int,
                      dtype: torch.dtype) -> Any:
    check_norm_shapes(x, weight, z)
    return _quant_fake(x, group_size, dtype)


_SCHEMAS += [
    ("rms_norm_gated(Tensor x, Tensor z, Tensor weight, float eps) -> Tensor",
     lambda *a: ref.rms_norm_gated(*a).contiguous(), _gated_fake),
    ("rms_norm_gated_fp8_group_quant(Tensor x, Tensor z, Tensor weight, float eps, SymInt group_size,"
     " ScalarType dtype) -> (Tensor, Tensor)", lambda *a: _c(*ref.rms_norm_gated_fp8_group_quant(*a)),
     _gated_quant_fake),
]

for _schema, _impl, _fake in _SCHEMAS:
    define_op(_LIBS, NAMESPACE, _schema, _impl, _fake)

RMS_NORM: torch._ops.OpOverload = torch.ops.eqsat.rms_norm.default
FUSED_ADD_RMS_NORM: torch._ops.OpOverload = torch.ops.eqsat.fused_add_rms_norm.default
GROUP_FP8_QUANT: torch._ops.OpOverload = torch.ops.eqsat.group_fp8_quant.default
RMSNORM_FP8_GROUP_QUANT: torch._ops.OpOverload = torch.ops.eqsat.rmsnorm_fp8_group_quant.default
RMSNORM_ADD_FP8_GROUP_QUANT: torch._ops.OpOverload = torch.ops.eqsat.rmsnorm_add_fp8_group_quant.default
SILU_AND_MUL: torch._ops.OpOverload = torch.ops.eqsat.silu_and_mul.default
SILU_MUL_FP8_GROUP_QUANT: torch._ops.OpOverload = torch.ops.eqsat.silu_mul_fp8_group_quant.default
TOKEN_FP8_QUANT: torch._ops.OpOverload = torch.ops.eqsat.token_fp8_quant.default
STATIC_FP8_QUANT: torch._ops.OpOverload = torch.ops.eqsat.static_fp8_quant.default
VLLM_TOKEN_FP8_QUANT: torch._ops.OpOverload = torch.ops.eqsat.vllm_token_fp8_quant.default
VLLM_STATIC_FP8_QUANT: torch._ops.OpOverload = torch.ops.eqsat.vllm_static_fp8_quant.default
RMSNORM_TOKEN_FP8_QUANT: torch._ops.OpOverload = torch.ops.eqsat.rmsnorm_token_fp8_quant.default
RMSNORM_ADD_TOKEN_FP8_QUANT: torch._ops.OpOverload = torch.ops.eqsat.rmsnorm_add_token_fp8_quant.default
RMSNORM_STATIC_FP8_QUANT: torch._ops.OpOverload = torch.ops.eqsat.rmsnorm_static_fp8_quant.default
RMSNORM_ADD_STATIC_FP8_QUANT: torch._ops.OpOverload = torch.ops.eqsat.rmsnorm_add_static_fp8_quant.default
