"""Family: "leave it to Inductor" — native chains that Inductor fuses into one generated kernel.

Each row has the same semantics as a fused AITER kernel but stands for the native ATen code (vLLM's
decomposition) that Inductor compiles into one kernel: it is costed as one kernel whose traffic is
only at the chain's boundary (the fused kernel's traffic formula), under its own calibration key,
so a measured profile decides per shape between the AITER kernel, the unfused kernels and
Inductor. No vocabulary spells these rows: the emitter inlines ``expand``, the chain in ATen ops.
Inductor's fp32 evaluation order may differ from the reference, hence ``rounding``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from eqsat.core.spec import (
    KernelSpec,
    Traffic,
    TrafficFn,
    last_dim_divisible,
    params,
    rank,
    same_dtype,
    same_shape,
)
from eqsat.kernels import act_quant, gated, norm_quant
from eqsat.library import reference as ref


def _rms_group_quant(x: torch.Tensor, w: torch.Tensor, eps: float, g: int, dt: torch.dtype):
    return ref.group_fp8_quant(ref.rms_norm(x, w, eps), g, dt)


def _add_rms_group_quant(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float, g: int,
                         dt: torch.dtype):
    normed, residual = ref.fused_add_rms_norm(x, r, w, eps)
    q, s = ref.group_fp8_quant(normed, g, dt)
    return q, residual, s


def _rms_gated_group_quant(x: torch.Tensor, z: torch.Tensor, w: torch.Tensor, eps: float, g: int,
                           dt: torch.dtype):
    return ref.group_fp8_quant(ref.rms_norm_gated(x, z, w, eps), g, dt)


def _silu_group_quant(x: torch.Tensor, g: int, dt: torch.dtype):
    return ref.group_fp8_quant(ref.silu_and_mul(x), g, dt)


@dataclass(frozen=True)
class _Launches:
    """The fused kernel's boundary traffic in ``n`` launches (Inductor splits a row reduction and the
    pointwise epilogue into two kernels; counted with the profiler on an H200). A picklable value."""

    traffic: TrafficFn
    n: int

    def __call__(self, a: Mapping[str, object]) -> Traffic:
        t = self.traffic(a)
        return Traffic(t.read, t.written, self.n)


def _like(name: str) -> KernelSpec:
    return {s.name: s for s in (*norm_quant.ROWS, *act_quant.ROWS, *gated.ROWS)}[name]


_RMS = _like("K_rmsnorm_fp8_group_quant")
_ADD = _like("K_rmsnorm_add_fp8_group_quant")
_SILU = _like("K_silu_mul_fp8_group_quant")
_GATED = _like(gated.K)
_ANY = frozenset({"any"})

ROWS: tuple[KernelSpec, ...] = (
    KernelSpec("I_rms_group_quant", params("x:T w:T eps:f64 G:i64 dt:dtype"), _Launches(_RMS.traffic, 2), outputs=_RMS.outputs,
               constraints=(*rank("x", 2), *same_dtype("x", "w"), *last_dim_divisible("x", "G")),
               numerics="rounding", platforms=_ANY, calibration_key="inductor:rms_group_quant",
               expand=_rms_group_quant, doc="native rms_norm + group quant, one Inductor kernel"),
    KernelSpec("I_add_rms_group_quant", params("x:T r:T w:T eps:f64 G:i64 dt:dtype"), _Launches(_ADD.traffic, 2),
               outputs=_ADD.outputs,
               constraints=(*rank("x", 2), *same_dtype("x", "w"), *same_shape("x", "r"),
                            *last_dim_divisible("x", "G")),
               numerics="rounding", platforms=_ANY, calibration_key="inductor:add_rms_group_quant",
               expand=_add_rms_group_quant, doc="native fused-add rms_norm + group quant, one Inductor kernel"),
    KernelSpec("I_rms_gated_group_quant", params("x:T z:T w:T eps:f64 G:i64 dt:dtype"), _Launches(_GATED.traffic, 2),
               outputs=_GATED.outputs,
               constraints=(*rank("x", 2), *same_shape("x", "z"), *same_dtype("x", "z"), *same_dtype("x", "w"),
                            *last_dim_divisible("x", "G")),
               numerics="rounding", platforms=_ANY, calibration_key="inductor:rms_gated_group_quant",
               expand=_rms_gated_group_quant, doc="native gated rms_norm + group quant, one Inductor kernel"),
    KernelSpec("I_silu_group_quant", params("x:T G:i64 dt:dtype"), _SILU.traffic, outputs=_SILU.outputs,
               constraints=(*rank("x", 2), "(= (dim x -1) __n)", "(= 0 (% __n (* 2 G)))"),
               numerics="rounding", platforms=_ANY, calibration_key="inductor:silu_group_quant",
               expand=_silu_group_quant, doc="native silu_and_mul + group quant, one Inductor kernel"),
)
