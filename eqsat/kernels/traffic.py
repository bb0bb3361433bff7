"""The pieces of traffic formulas every kernel module shares: reading an operand, counting groups, the
bytes a quant writes, the product half of a gated activation, an ATen op that reads its input once,
and the infinite traffic of a term no kernel computes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from eqsat.core.spec import Operand, Traffic

ACT_DTYPES = ("bfloat16", "float16")
"""The activation dtypes AITER's fused kernels take."""
SCALE_BYTES = 4
FP8_BYTES = 1


def operand(a: Mapping[str, object], name: str) -> Operand:
    """The tensor parameter ``name`` of a traffic formula's arguments."""
    value = a[name]
    assert isinstance(value, Operand)
    return value


def groups(x: Operand, g: object) -> int:
    """How many groups of ``g`` a group quant of ``x`` scales: ``ceil(N / g)`` per row."""
    assert isinstance(g, int) and g > 0
    return x.rows * -(-x.shape[-1] // g)


def quant_out(x: Operand, g: object) -> float:
    """The bytes a group quant of ``x`` writes: fp8 values and an fp32 scale per group."""
    return x.numel * FP8_BYTES + groups(x, g) * SCALE_BYTES


def half(x: Operand) -> Operand:
    """``x`` with its last dim halved: the product of a gated activation (silu(a) * b)."""
    return Operand((*x.shape[:-1], x.shape[-1] // 2), x.itemsize)


def never(a: Mapping[str, object]) -> Traffic:
    """The traffic of a term with no kernel of its own (a semantic op, a witness): infinite, so no
    extractor ever picks it."""
    return Traffic(read=math.inf, written=0, launches=0)


@dataclass(frozen=True)
class Pointwise:
    """An ATen op reading x once and writing ``out`` elements per row (None: as many as x has)."""

    out: int | None = None

    def __call__(self, a: Mapping[str, object]) -> Traffic:
        x = operand(a, "x")
        return Traffic(read=x.bytes, written=x.bytes if self.out is None else x.rows * self.out * x.itemsize)
