"""The IR: one egglog sort ``T`` for every value, at three levels, plus the facts it carries.

Level A (ATen/prims) enters generically: ``A0``..``A3`` take the target name, a key into the import's
constant-argument table and up to three tensor children. Levels B (semantics) and C (kernels) are
generated from the kernel catalog (``eqsat.kernels.catalog``): adding a kernel never edits this file.
Fixed constructors: ``(Leaf i)``, a graph input or opaque node's output, never rewritten and never
held by egglog (its e-class is ``(Fx i)``; serialize adds the ``Leaf`` e-node); ``(Get t i)``,
projection ``i`` of a tuple; ``(Reshape t s)``, ``t`` reshaped row-major to shape key ``s``, the one
form every FX view op imports as. Facts, from ``node.meta["val"]``: ``(dtype t)``, ``(shape t)``,
``(ndim t)``, ``(dim t -1)`` (the last dim when concrete, the only dim a rule reads) and
``(contiguous t)``, kept as rows ``dtype``, ``shape`` and ``facts`` (the rest packed, ``eqsat.core.facts``),
set by the ``load`` ruleset for ``(Fx i)`` from the loader's rows (``eqsat.engine.rows``). ``Fx`` is no
op: no rule reads it, it is never extracted. ``(dtype-ok K d)`` lists kernel ``K``'s activation dtypes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import torch

from eqsat.core.facts import SCHEMA as FACTS_SCHEMA

LEAF = "Leaf"
FIXED_CONSTRUCTORS: dict[str, tuple[str, ...]] = {
    LEAF: ("i64",),
    "Get": ("T", "i64"),
    "Reshape": ("T", "String"),
    "A0": ("String", "i64"),
    "A1": ("String", "i64", "T"),
    "A2": ("String", "i64", "T", "T"),
    "A3": ("String", "i64", "T", "T", "T"),
}
"""Constructors of sort T that every e-graph has, with their argument sorts."""

FX = "Fx"
BASE_SCHEMA = f"""
(constructor {FX} (i64) T :unextractable)
{FACTS_SCHEMA}
(relation dtype-ok (String String))
(ruleset load)
"""

MAX_GENERIC_TENSOR_ARGS = 3
ZERO_COST_OPS = frozenset({LEAF, "Get", "Reshape"})


def schema() -> str:
    """egglog declarations for sort T and the fact functions; constructors come one by one
    (``constructor``), as graphs and rules need them."""
    return "(datatype T)" + BASE_SCHEMA


def constructor(name: str, sorts: Sequence[str]) -> str:
    """The egglog declaration of constructor ``name`` of sort T with argument ``sorts``."""
    return f"(constructor {name} ({' '.join(sorts)}) T)"


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype name {name!r}")
    return value


@functools.lru_cache(maxsize=4096)
def _expr_key(expr: object) -> int | str:
    """A symbolic dim's expression as a key; memoised: printing one with sympy is dear, and every graph
    of a compile repeats the same few (sympy expressions are immutable and hashable)."""
    return int(expr) if expr.is_number else str(expr)  # type: ignore[attr-defined,call-overload]


def dim_key(d: int | torch.SymInt) -> int | str:
    """A concrete dim stays an int; a symbolic one becomes its expression, e.g. ``"s77"``."""
    return _expr_key(d.node.expr) if isinstance(d, torch.SymInt) else int(d)


def shape_key(shape: Iterable[int | str]) -> str:
    """Canonical string for a shape: dims joined by commas, ``"s77,7168"``; ``""`` for a scalar."""
    return ",".join(str(d) for d in shape)


def sorts_of(params: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    return tuple(sort for _, sort in params)
