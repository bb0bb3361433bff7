""""Leave it to Inductor": each fused row marked ``inductor=Twin(...)`` gets a twin row standing for
the native ATen chain, which Inductor compiles into ``Twin.launches`` kernels (one more where an
opaque op, a GEMM, reads its group quant: ``Twin.quant_epilogue``, the twin's ``traffic_into_op``).

A twin has the fused row's parameters, outputs (its semantics) and boundary traffic, under its own
calibration key ``inductor:<key>``, so a measured profile decides per shape between the AITER
kernel, the unfused kernels and Inductor. No vocabulary spells it: the emitter inlines ``expand``,
the composition of the semantic rows' ``reference`` along the fused row's outputs (a fused row those
outputs name, as MLA's quant rows name the dual norm, is the composition of its own outputs).
``rounding``: Inductor's fp32 evaluation order may differ from the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eqsat.core.sexp import Sexp, calls, parse
from eqsat.core.spec import KernelSpec, Operand, Traffic, TrafficFn

ANY_PLATFORM = frozenset({"any"})
TWIN_KEY = "inductor:"  # a twin's calibration key is this prefix and its fused row's key


def is_twin(row: KernelSpec) -> bool:
    """Whether ``row`` is an Inductor twin (the native chain compiled by Inductor), not a kernel of its own."""
    return row.calibration_key.startswith(TWIN_KEY)


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
    return tuple(_twin(r, refs) for r in rows if r.inductor is not None)


def _twin(row: KernelSpec, refs: tuple[tuple[str, Callable[..., Any]], ...]) -> KernelSpec:
    assert row.inductor is not None
    t, key = row.inductor, row.calibration_key
    into_op = Launches(row.traffic, t.launches + 1, reread=True) if t.quant_epilogue else None
    return KernelSpec(
        f"I_{key}", row.params, row.traffic if t.launches == 1 else Launches(row.traffic, t.launches),
        traffic_into_op=into_op,
        outputs=row.outputs, constraints=t.constraints, numerics="rounding", platforms=ANY_PLATFORM,
        calibration_key=f"{TWIN_KEY}{key}", expand=Composition(row.param_names, row.outputs, refs),
        doc=f"the native chain of {row.name}, compiled by Inductor")
