"""The roofline cost model: ``time = bytes / bandwidth * factor + launches * latency`` (µs).

Entry points: :func:`load_profile` (a device profile from ``extract/profiles/*.json``) and
:class:`RooflineCost`, the ``CostFn`` extractors call on each e-node. Catalog ops are costed by
their row's traffic formula (``factor`` from the profile's calibration for that row's key); generic
ATen ops as one kernel each that reads its inputs and writes its output; projections and leaves
cost 0, and a view costs a token ``VIEW_US`` so that, all else equal, fewer views win. Symbolic dims are bound to sizes (``sizes``: one int for every symbol, or a mapping
symbol -> int with ``"*"`` as the default) before any formula sees a shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import sympy

from eqsat.ir import ZERO_COST_OPS
from eqsat.kernels.catalog import Catalog
from eqsat.kernels.spec import Operand, Traffic
from extract.egraph import EGraph, ENode, TensorFacts

VIEW_US = 1e-6


@dataclass(frozen=True)
class Profile:
    name: str
    bandwidth_gbps: float
    launch_us: float
    opaque_us: float = 0.0
    factors: Mapping[str, float] = field(default_factory=dict)
    description: str = ""

    def time_us(self, t: Traffic, key: str = "") -> float:
        factor = self.factors.get(key, 1.0)
        return t.bytes / (self.bandwidth_gbps * 1e3) * factor + t.launches * self.launch_us


def load_profile(name: str) -> Profile:
    try:
        text = resources.files("extract.profiles").joinpath(f"{name}.json").read_text()
    except FileNotFoundError:
        known = sorted(p.name.removesuffix(".json") for p in resources.files("extract.profiles").iterdir()
                       if p.name.endswith(".json"))
        raise ValueError(f"unknown device profile {name!r}; known: {known}") from None
    return Profile(**json.loads(text))


Sizes = int | Mapping[str, int]


@cache
def _symbols(expr: str) -> sympy.Expr:
    return sympy.sympify(expr)


def bind_dim(d: int | str, sizes: Sizes) -> int:
    if isinstance(d, int):
        return d
    if isinstance(sizes, int):
        default, table = sizes, {}
    else:
        default, table = sizes.get("*", 256), sizes
    if d in table:
        return int(table[d])
    expr = _symbols(d)
    return int(expr.subs({s: table.get(str(s), default) for s in expr.free_symbols}))


def operand(f: TensorFacts, sizes: Sizes) -> Operand:
    return Operand(tuple(bind_dim(d, sizes) for d in f.shape), f.itemsize)


class RooflineCost:
    """Own cost (µs) of one e-node of ``egraph`` under ``profile`` at ``sizes``."""

    def __init__(self, egraph: EGraph, catalog: Catalog, profile: Profile, sizes: Sizes = 256) -> None:
        self.egraph, self.catalog, self.profile, self.sizes = egraph, catalog, profile, sizes
        self._memo: dict[ENode, float] = {}

    def operand(self, eclass: int) -> Operand | None:
        f = self.egraph.facts.get(eclass)
        return None if f is None else operand(f, self.sizes)

    def traffic(self, node: ENode) -> tuple[Traffic, str] | None:
        """Bytes and launches of one e-node and its calibration key; None for free nodes."""
        if node.op in ZERO_COST_OPS:
            return None
        if node.op in self.catalog:
            spec = self.catalog[node.op]
            bound: dict[str, object] = {}
            for (name, sort), a in zip(spec.params, node.args, strict=True):
                bound[name] = self.operand(a.eclass) if sort == "T" else a
            if any(v is None for v in bound.values()):
                return Traffic(0, 0, 1), spec.calibration_key
            return spec.traffic(bound), spec.calibration_key
        if node.op.startswith("A"):
            ins = [self.operand(c) for c in node.children]
            out = self.operand(node.eclass)
            read = sum(o.bytes for o in ins if o is not None)
            return Traffic(read, out.bytes if out is not None else 0, 1), f"aten:{node.args[0]}"
        return Traffic(0, 0, 1), node.op

    def __call__(self, node: ENode) -> float:
        got = self._memo.get(node)
        if got is None:
            t = self.traffic(node)
            got = (VIEW_US if node.op == "Reshape" else 0.0) if t is None else self.profile.time_us(*t)
            self._memo[node] = got
        return got
