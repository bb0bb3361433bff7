""""Leave it to Inductor": each fused row marked ``inductor=Twin(...)`` gets a twin row standing for
the native ATen chain, which Inductor compiles into ``Twin.launches`` kernels (one more where an
opaque op, a GEMM, reads its group quant: ``Twin.quant_epilogue``, the twin's ``traffic_into_op``).

A twin has the fused row's parameters, outputs (its semantics) and boundary traffic, under its own
calibration key ``inductor:<key>``, so a measured profile decides per shape between the AITER
kernel, the unfused kernels and Inductor. No vocabulary spells it: the emitter inlines ``expand``,
the composition of the semantic rows' ``reference`` along the fused row's outputs (a fused row those
outputs name, as MLA's quant rows name the dual norm, is the composition of its own outputs).
``rounding``: Inductor's fp32 evaluation order may differ from the reference.

A row whose ``Twin.heads`` names row operands gets a second twin, ``IH_<key>``: the same composition
written over the ``(tokens, H, D)`` view of those operands (``OverHeads``), one kernel where Inductor
splits the flat chain in two, under key ``inductor:<key>@heads``. It is a candidate only where its rows
are a symbolic ``H * tokens`` (``heads_of``); there the flat twin, and the graph's own chain it stands
for, are priced by ``inductor:<key>@flat``. No other twin stands for the graph's own chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import sympy

from eqsat.core.egraph import ENode, Ref, TensorFacts
from eqsat.core.sexp import Sexp, calls, parse
from eqsat.core.spec import KernelSpec, Operand, Traffic, TrafficFn

ANY_PLATFORM = frozenset({"any"})
TWIN_KEY = "inductor:"  # a twin's calibration key is this prefix and its fused row's key
FLAT_KEY = "@flat"  # a heads-capable twin's key suffix over flat rows of heads (a dynamic graph's)
HEADS_KEY = "@heads"  # the key suffix of a twin written over the (tokens, H, D) view


def is_twin(row: KernelSpec) -> bool:
    """Whether ``row`` is an Inductor twin (the native chain compiled by Inductor), not a kernel of its own."""
    return row.calibration_key.startswith(TWIN_KEY)


def is_over_heads(row: KernelSpec) -> bool:
    """Whether ``row`` is a twin written over the (tokens, H, D) view (``IH_<key>``)."""
    return row.calibration_key.endswith(HEADS_KEY)


def stands_for_chain(row: KernelSpec) -> bool:
    """Whether ``row`` is a twin standing for the graph's own chain as Inductor compiles it (not the
    chain re-viewed over heads, which no graph holds as written)."""
    return is_twin(row) and not is_over_heads(row)


@cache
def heads_of(rows: int | str) -> int | None:
    """H where ``rows`` (a dim as facts hold it) is a symbolic ``H * tokens`` with a static H > 1; else None."""
    if isinstance(rows, int):
        return None
    coeff, rest = sympy.sympify(rows).as_coeff_Mul()
    return int(coeff) if coeff.is_Integer and coeff > 1 and rest.free_symbols else None


def site_heads(row: KernelSpec, node: ENode, facts: Mapping[int, TensorFacts]) -> int | None:
    """H at e-node ``node`` of ``row``: where the row has ``heads`` operands and the first one is rank 2
    with rows a symbolic ``H * tokens`` (``heads_of``); else None."""
    if not row.heads:
        return None
    arg = node.args[row.param_names.index(row.heads[0])]
    f = facts.get(arg.eclass) if isinstance(arg, Ref) else None
    return heads_of(f.shape[0]) if f is not None and len(f.shape) == 2 else None


@dataclass(frozen=True)
class OverHeads:
    """``composition`` called with its ``viewed`` arguments (rank 2, rows ``tokens * heads``) viewed as
    ``(tokens, heads, D)``, each output viewed back to rows ``(tokens * heads, last)``. ``heads`` is set
    per site by the emitter (``heads_of`` the rows). A hashable value: a trace of it is reused."""

    composition: Callable[..., Any]
    params: tuple[str, ...]
    viewed: tuple[str, ...]
    heads: int = 0

    def __call__(self, *args: object) -> object:
        if self.heads < 2:
            raise ValueError(f"OverHeads needs heads >= 2, got {self.heads}")
        args = tuple(a.reshape(-1, self.heads, a.shape[-1]) if p in self.viewed else a  # type: ignore[union-attr]
                     for p, a in zip(self.params, args, strict=True))
        outs = self.composition(*args)
        flat = tuple(o.reshape(-1, o.shape[-1]) for o in (outs if isinstance(outs, tuple) else (outs,)))
        return flat if isinstance(outs, tuple) else flat[0]


@dataclass(frozen=True)
class Launches:
    """``traffic`` in ``n`` launches (Inductor splits a row reduction and its pointwise epilogue); with
    ``reread``, the tensor arguments read once more (an epilogue kernel that recomputes from them)."""

    traffic: TrafficFn
    n: int
    reread: bool = False

    def __call__(self, a: Mapping[str, object]) -> Traffic:
        t = self.traffic(a)
        again = sum(v.bytes for v in a.values() if isinstance(v, Operand)) if self.reread else 0
        return Traffic(t.read + again, t.written, self.n)


@dataclass(frozen=True)
class Composition:
    """The outputs ``outputs`` (egglog terms over ``params``) computed with each semantic op's
    reference; shared subterms are computed once. A hashable, picklable value."""

    params: tuple[str, ...]
    outputs: tuple[str, ...]
    references: tuple[tuple[str, Callable[..., Any]], ...]

    def __call__(self, *args: object) -> object:
        env: dict[str, object] = dict(zip(self.params, args, strict=True))
        refs = dict(self.references)
        done: dict[str, object] = {}

        def value(e: Sexp) -> object:
            if isinstance(e, str):
                return env[e]
            key = repr(e)
            if key not in done:
                head, *rest = e
                done[key] = value(rest[0])[int(rest[1])] if head == "Get" else refs[head](*map(value, rest))
            return done[key]

        outs = tuple(value(parse(o)) for o in self.outputs)
        return outs if len(outs) > 1 else outs[0]


def twins(rows: Iterable[KernelSpec]) -> tuple[KernelSpec, ...]:
    """The twin of every row of ``rows`` that asks for one (``rows`` also holds the semantic rows)."""
    rows = tuple(rows)
    refs = tuple((r.name, r.reference) for r in rows if r.reference is not None)
    named = {c[0] for r in rows if r.inductor is not None for o in r.outputs or () for c in calls(parse(o))}
    refs += tuple((r.name, Composition(r.param_names, r.outputs, refs)) for r in rows
                  if r.outputs is not None and r.name in named)
    made = [_twin(r, refs) for r in rows if r.inductor is not None]
    return (*made, *(_heads_twin(r, refs) for r in rows if r.inductor is not None and r.inductor.heads))


def _twin(row: KernelSpec, refs: tuple[tuple[str, Callable[..., Any]], ...]) -> KernelSpec:
    assert row.inductor is not None
    t, key = row.inductor, row.calibration_key
    into_op = Launches(row.traffic, t.launches + 1, reread=True) if t.quant_epilogue else None
    return KernelSpec(
        f"I_{key}", row.params, row.traffic if t.launches == 1 else Launches(row.traffic, t.launches),
        traffic_into_op=into_op,
        outputs=row.outputs, constraints=t.constraints, numerics="rounding", platforms=ANY_PLATFORM,
        calibration_key=f"{TWIN_KEY}{key}", expand=Composition(row.param_names, row.outputs, refs),
        heads=t.heads, doc=f"the native chain of {row.name}, compiled by Inductor")


def _heads_twin(row: KernelSpec, refs: tuple[tuple[str, Callable[..., Any]], ...]) -> KernelSpec:
    """The chain of ``row`` written over the (tokens, H, D) view of its ``Twin.heads`` operands: one kernel."""
    assert row.inductor is not None
    t, key = row.inductor, row.calibration_key
    return KernelSpec(
        f"IH_{key}", row.params, row.traffic, outputs=row.outputs, constraints=t.constraints, numerics="rounding",
        platforms=ANY_PLATFORM, calibration_key=f"{TWIN_KEY}{key}{HEADS_KEY}",
        expand=OverHeads(Composition(row.param_names, row.outputs, refs), row.param_names, t.heads),
        heads=t.heads, doc=f"the native chain of {row.name} over the (tokens, heads, D) view, compiled by Inductor")
