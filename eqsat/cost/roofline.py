"""The roofline cost model: ``time = launches * latency + rows * row_us + bytes / bandwidth`` (µs), per kernel.

Entry points: :func:`load_profile` (a device profile, ``eqsat/cost/profiles/<name>.json`` or a path) and
:class:`RooflineCost`, the ``CostFn`` extractors call on each e-node.

- Catalog ops are costed by their row's traffic formula; the profile's ``kernels`` table, fitted
  from measurements (``eqsat.cost.calibrate``), gives each calibration key its own latency and
  effective bandwidth, and the profile's defaults cover keys never measured. A key's ``row_us`` prices
  the rows a kernel walks one after another (AITER's persistent norms run one program per SM, each
  looping over rows: their time grows with the rows past what bandwidth explains), and a key fitted on
  both sides of the device's L2 (``l2_bytes``) has a second line for calls moving more (``past_l2``):
  what fits in L2 stays there across a model's kernels and streams faster. An Inductor twin's key
  never measured is priced no faster than its fused kernel's line nor the defaults, streaming at
  ``INDUCTOR_PRIOR`` of that bandwidth: without a measurement, Inductor's code for a chain never beats
  the kernel written for it (same bytes, at least as many launches). A twin in a dynamic graph (a
  symbolic dim in its operands) is priced by its key's ``DYNAMIC`` line, where the profile has one, at
  the sizes past the symbols' ``hints``: Inductor picks a dynamic graph's Triton configs for the sizes
  it is first run at (the shape env's hints), and code so tuned for a small size can run far slower at
  a larger one than compiled per size (gpt-oss's add + norm + pad first run at M = 8: 2x at M = 8192),
  while at sizes up to the hints it runs as compiled per size. Without hints every size is past them.
  A twin whose row operands are heads (``Twin.heads``) on rows that are a symbolic heads x tokens takes
  its ``@flat`` line (Inductor's two kernels over the flat rows); the twin over heads its ``@heads`` line
  (``eqsat.admissible`` makes it no candidate where the profile has none). An unmeasured form's line is
  the plain key's.
- Generic ATen ops (and catalog rows keyed ``aten:``, as the pad) are one kernel each, Inductor's, that
  reads its inputs and writes its output, priced by their key's ``DYNAMIC`` line past the hints as twins are.
- Projections and leaves cost 0; a view costs a token ``VIEW_US`` so that fewer views win ties. A
  ``Slice`` that is not contiguous (part of a dim past the first, some dim before it not a static 1), in
  a class of ``fixed_layout`` (values an opaque consumer or the output reads with the strides they were
  traced with, contiguous there), costs the copy Inductor then writes: one kernel reading and writing
  the value (key ``COPY_KEY``, its ``DYNAMIC`` line past the hints of a graph compiled for every size).
- Symbolic dims are bound before any formula sees a shape. ``sizes`` is one int for every symbol,
  a mapping symbol -> int (``"*"`` the default), or a tuple of ints: a compile range costed at each
  of its sample sizes, the node's cost being the weighted mean of its costs there. The weights are
  equal until ``weigh`` gives each size the inverse of the unchanged graph's time at it, so that each
  size counts by its ratio, not its µs (a range 1 … 8192 is otherwise decided at 8192 alone).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import sympy

from eqsat.core.egraph import EGraph, ENode, Ref, TensorFacts
from eqsat.core.ir import ZERO_COST_OPS
from eqsat.core.spec import Operand, Traffic
from eqsat.cost.cards import resolved
from eqsat.kernels.catalog import Catalog
from eqsat.kernels.families.aten_ops import ATEN_KEY
from eqsat.kernels.inductor import FLAT_KEY, HEADS_KEY, TWIN_KEY, is_over_heads, site_heads

VIEW_US = 1e-6
INDUCTOR_PRIOR = 0.75  # an unmeasured Inductor twin's share of its fused kernel's (or the default) bandwidth
MEMO_CAP = 1 << 16  # costs a CostMemo keeps before it starts again
DYNAMIC = "@dynamic"  # an Inductor kernel's key suffix for its line past a dynamic graph's hints (else the per-size line)


@dataclass(frozen=True)
class KernelTiming:
    """A fitted line for one calibration key: ``launch_us`` per launch, ``row_us`` per row walked, plus
    bytes at ``bandwidth_gbps``; ``past_l2``: the key's line where a call moves more than the profile's
    ``l2_bytes`` (None: this line at every size)."""

    launch_us: float
    bandwidth_gbps: float
    row_us: float = 0.0
    past_l2: KernelTiming | None = None

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"launch_us": self.launch_us, "bandwidth_gbps": self.bandwidth_gbps}
        if self.row_us:
            d["row_us"] = self.row_us
        if self.past_l2 is not None:
            d["past_l2"] = self.past_l2.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> KernelTiming:
        past = d.get("past_l2")
        return cls(float(d["launch_us"]), float(d["bandwidth_gbps"]), float(d.get("row_us", 0.0)),
                   None if past is None else cls.from_dict(past))


@dataclass(frozen=True)
class Profile:
    name: str
    bandwidth_gbps: float
    launch_us: float
    opaque_us: float = 0.0
    kernels: Mapping[str, KernelTiming] = field(default_factory=dict)
    description: str = ""
    platform: str = "any"  # where its kernels run (a row's ``platforms``): a row not there is no candidate
    l2_bytes: float = 0.0  # a call moving more streams from DRAM: a key's ``past_l2`` line (0: one regime)

    def line(self, key: str, nbytes: float = 0.0) -> KernelTiming:
        """The line of calibration key ``key`` for a call moving ``nbytes`` (see the module docstring)."""
        k = self.kernels.get(key)
        if k is None:
            for suffix in (DYNAMIC, FLAT_KEY, HEADS_KEY):  # a form's line unmeasured: the plain key's
                if key.endswith(suffix):
                    return self.line(key.removesuffix(suffix), nbytes)
            if key.startswith(TWIN_KEY):
                fused = self.line(key.removeprefix(TWIN_KEY), nbytes)
                return KernelTiming(max(fused.launch_us, self.launch_us),
                                    min(fused.bandwidth_gbps, self.bandwidth_gbps) * INDUCTOR_PRIOR, fused.row_us)
            return KernelTiming(self.launch_us, self.bandwidth_gbps)
        if k.past_l2 is not None and self.beyond_l2(nbytes):
            return k.past_l2
        return k

    def beyond_l2(self, nbytes: float) -> bool:
        """Whether a call moving ``nbytes`` is past the device's L2 (never, without ``l2_bytes``)."""
        return 0 < self.l2_bytes < nbytes

    def time_us(self, t: Traffic, key: str = "") -> float:
        k = self.line(key, t.bytes)
        return t.launches * k.launch_us + t.rows * k.row_us + t.bytes / (k.bandwidth_gbps * 1e3)

    def to_json(self) -> str:
        d = {"name": self.name, "description": self.description, "platform": self.platform,
             "bandwidth_gbps": self.bandwidth_gbps,
             "launch_us": self.launch_us, "opaque_us": self.opaque_us,
             **({"l2_bytes": self.l2_bytes} if self.l2_bytes else {}),
             "kernels": {k: v.to_dict() for k, v in sorted(self.kernels.items())}}
        return json.dumps(d, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Profile:
        d = json.loads(text)
        kernels = {k: KernelTiming.from_dict(v) for k, v in d.pop("kernels", {}).items()}
        d.pop("factors", None)
        return cls(kernels=kernels, **d)


def profile_names() -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in resources.files("eqsat.cost.profiles").iterdir()
                  if p.name.endswith(".json"))


def load_profile(name: str | Profile) -> Profile:
    """A built-in profile by name (``mi300x``, ``mi355x``, ``h200``, ``h100``, ...), ``auto`` (the profile
    of the GPU torch sees), or a JSON file by path."""
    if isinstance(name, Profile):
        return name
    name = resolved(name)
    if name.endswith(".json") and Path(name).is_file():
        return Profile.from_json(Path(name).read_text())
    return _builtin_profile(name)


@cache
def _builtin_profile(name: str) -> Profile:  # a pure function of files shipped in the package
    try:
        text = resources.files("eqsat.cost.profiles").joinpath(f"{name}.json").read_text()
    except FileNotFoundError:
        raise ValueError(f"unknown device profile {name!r}; known: {profile_names()} or a .json path") from None
    return Profile.from_json(text)


Sizes = int | Mapping[str, int] | Sequence[int]
Hints = Mapping[str, int] | None  # symbol name -> the size a dynamic graph was first run at (None: unknown)


@cache
def _sympify(expr: str) -> sympy.Expr:
    return sympy.sympify(expr)


@cache
def _names(expr: str) -> frozenset[str]:
    return frozenset(str(s) for s in _sympify(expr).free_symbols)


def bind_dim(d: int | str, sizes: int | Mapping[str, int]) -> int:
    if isinstance(d, int):
        return d
    if isinstance(sizes, int):
        default, table = sizes, {}
    else:
        default, table = sizes.get("*", 256), sizes
    if d in table:
        return int(table[d])
    return _bind_expr(d, default, tuple(sorted(table.items())))


@cache
def _bind_expr(d: str, default: int, table: tuple[tuple[str, int], ...]) -> int:
    expr, sizes = _sympify(d), dict(table)
    return int(expr.subs({s: sizes.get(str(s), default) for s in expr.free_symbols}))


def operand(f: TensorFacts, sizes: int | Mapping[str, int]) -> Operand:
    return Operand(tuple(bind_dim(d, sizes) for d in f.shape), f.itemsize)


def size_points(sizes: Sizes) -> tuple[int | Mapping[str, int], ...]:
    if isinstance(sizes, (int, Mapping)):
        return (sizes,)
    points = tuple(int(s) for s in sizes)
    if not points:
        raise ValueError("sizes: an empty list of sizes")
    return points


class CostMemo:
    """Own costs kept across e-graphs for one catalog, profile and size binding, by what an e-node's
    cost depends on: its op, its primitive arguments, the facts of the classes it reads and makes (not
    their ids) and, where one of those has a symbolic dim, the graph's hints. A pass's graphs repeat the
    same e-nodes (a model's layers), and so does one graph of many layers. ``serves`` says whether it
    holds costs of that catalog, profile (the same object: a profile read again from a file is new, and
    a profile is never changed in place) and sizes."""

    def __init__(self, catalog: Catalog, profile: Profile, sizes: Sizes) -> None:
        self.catalog, self.profile, self.points = catalog, profile, size_points(sizes)
        self.table: dict[tuple, tuple[float, ...]] = {}  # an e-node's costs at each size point

    def serves(self, catalog: Catalog, profile: Profile, points: tuple[int | Mapping[str, int], ...]) -> bool:
        return self.catalog is catalog and self.profile is profile and self.points == points


COPY_KEY = "copy"  # the contiguous copy of a strided view a layout-fixing consumer reads
INDUCTOR_CODE = (TWIN_KEY, ATEN_KEY, COPY_KEY)  # keys of kernels Inductor generates (each dynamic-line aware)


class RooflineCost:
    """Own cost (µs) of one e-node of ``egraph`` under ``profile`` at ``sizes``; ``memo``: costs kept
    across e-graphs (``CostMemo``), used when it serves the same catalog, profile and sizes;
    ``fixed_layout``: the e-classes read with their traced strides; ``hints``: the graph's symbols'
    hints (see the module docstring); ``read_by_op``: the e-classes an opaque op reads (a row's
    ``traffic_into_op`` prices it where one of its outputs is among them)."""

    def __init__(self, egraph: EGraph, catalog: Catalog, profile: Profile, sizes: Sizes = 256,
                 memo: CostMemo | None = None, fixed_layout: frozenset[int] = frozenset(), hints: Hints = None,
                 read_by_op: frozenset[int] = frozenset()) -> None:
        self.egraph, self.catalog, self.profile = egraph, catalog, profile
        self.fixed_layout, self.hints, self.read_by_op = fixed_layout, hints, read_by_op
        self._outputs: dict[int, list[int]] | None = None  # a tuple class -> the classes of its projections
        self.points = size_points(sizes)
        self.weights = tuple(1.0 / len(self.points) for _ in self.points)
        self._memo: dict[ENode, float] = {}
        self._per_point: dict[ENode, tuple[float, ...]] = {}
        self._operands: dict[tuple[int, int], Operand | None] = {}  # (e-class, size point) -> tensor
        self._shared = memo.table if memo is not None and memo.serves(catalog, profile, self.points) else None
        self._hints_key = None if hints is None else tuple(sorted(hints.items()))  # a symbolic e-node's memo key

    def operand_at(self, eclass: int, sizes: int | Mapping[str, int] | None = None) -> Operand | None:
        """The tensor of ``eclass`` at ``sizes`` (default: the first size point); None without facts."""
        f = self.egraph.facts.get(eclass)
        return None if f is None else operand(f, self.points[0] if sizes is None else sizes)

    def traffic(self, node: ENode, sizes: int | Mapping[str, int]) -> tuple[Traffic, str] | None:
        """Bytes and launches of one e-node at one size binding, and its calibration key."""
        return self._traffic(node, sizes, next((k for k, p in enumerate(self.points) if p is sizes), None))

    def _opnd(self, eclass: int, sizes: int | Mapping[str, int], point: int | None) -> Operand | None:
        """``operand_at(eclass, sizes)``, memoised where ``sizes`` is size point ``point``."""
        if point is None:  # a size binding other than the cost's own points: not memoised
            return self.operand_at(eclass, sizes)
        key = (eclass, point)
        if key not in self._operands:
            self._operands[key] = self.operand_at(eclass, sizes)
        return self._operands[key]

    def _traffic(self, node: ENode, sizes: int | Mapping[str, int], point: int | None) -> tuple[Traffic, str] | None:
        if node.op in ZERO_COST_OPS:
            return None
        if node.op in self.catalog:
            spec = self.catalog[node.op]
            bound = {name: (self._opnd(a.eclass, sizes, point) if sort == "T" else a)
                     for (name, sort), a in zip(spec.params, node.args, strict=True)}
            if any(v is None for v in bound.values()):
                return Traffic(0, 0, 1), spec.calibration_key
            flat = not is_over_heads(spec) and site_heads(spec, node, self.egraph.facts) is not None
            key = self._at_hints(spec.calibration_key + (FLAT_KEY if flat else ""), node.children, sizes)
            first = next((v for v in bound.values() if isinstance(v, Operand)), None)
            formula = spec.traffic_into_op if self._into_op(node) else spec.traffic
            assert formula is not None
            t = formula(bound)
            return Traffic(t.read, t.written, t.launches, first.rows if first is not None else 0), key
        if node.op.startswith("A"):
            ins = [self._opnd(c, sizes, point) for c in node.children]
            out = self._opnd(node.eclass, sizes, point)
            read = sum(o.bytes for o in ins if o is not None)
            key = self._at_hints(f"{ATEN_KEY}{node.args[0]}", [*node.children, node.eclass], sizes)
            rows = next((o.rows for o in ins if o is not None), 0)
            return Traffic(read, out.bytes if out is not None else 0, 1, rows), key
        return Traffic(0, 0, 1), node.op

    def _into_op(self, node: ENode) -> bool:
        """Whether ``node`` is a row with a ``traffic_into_op`` and an opaque op reads one of its outputs."""
        if not self.read_by_op or node.op not in self.catalog or self.catalog[node.op].traffic_into_op is None:
            return False
        if self._outputs is None:
            self._outputs = {}
            for n in self.egraph.nodes:
                if n.op == "Get":
                    self._outputs.setdefault(n.children[0], []).append(n.eclass)
        return any(c in self.read_by_op for c in (node.eclass, *self._outputs.get(node.eclass, ())))

    def _at_hints(self, key: str, classes: Iterable[int], sizes: int | Mapping[str, int]) -> str:
        """``key``, or its ``DYNAMIC`` line where it is Inductor's code and one of ``classes`` is past the hints."""
        if key.startswith(INDUCTOR_CODE) and any(self._past_hint(c, sizes) for c in classes):
            return key + DYNAMIC
        return key

    def _past_hint(self, eclass: int, sizes: int | Mapping[str, int]) -> bool:
        """Whether a symbolic dim of ``eclass`` is larger at ``sizes`` than at the graph's hints (always,
        where a symbol it reads has no hint)."""
        f = self.egraph.facts.get(eclass)
        if f is None:
            return False
        for d in f.shape:
            if isinstance(d, str):
                if self.hints is None or not _names(d) <= self.hints.keys():
                    return True
                if bind_dim(d, sizes) > bind_dim(d, self.hints):
                    return True
        return False

    def at(self, node: ENode, sizes: int | Mapping[str, int], point: int | None = None) -> float:
        """The own cost of ``node`` at ``sizes`` (size point ``point``, if it is one: its tensors memoised)."""
        t = self._traffic(node, sizes, point) if point is not None else self.traffic(node, sizes)
        if t is None:
            return VIEW_US if node.op == "Reshape" else 0.0
        return self.profile.time_us(*t)

    def weigh(self, totals: Sequence[float]) -> None:
        """Weigh each size point by the inverse of ``totals`` (the unchanged graph's cost there), the weights
        summing to 1; equal weights where a total is not positive."""
        if len(totals) != len(self.points):
            raise ValueError(f"weigh: {len(totals)} totals for {len(self.points)} size points")
        inverse = [1.0 / t if t > 0 else 0.0 for t in totals]
        self.use_weights(inverse if all(inverse) else [1.0] * len(totals))

    def use_weights(self, weights: Sequence[float]) -> None:
        """Weigh the size points by ``weights`` (positive; scaled to sum to 1)."""
        if len(weights) != len(self.points) or not all(w > 0 for w in weights):
            raise ValueError(f"use_weights: {list(weights)} for {len(self.points)} size points")
        self.weights = tuple(w / sum(weights) for w in weights)
        self._memo.clear()

    def __call__(self, node: ENode) -> float:
        got = self._memo.get(node)
        if got is None:
            got = self._memo[node] = sum(map(operator.mul, self.weights, self.per_point(node)))  # one per size point
        return got

    def point_totals(self, nodes: Iterable[ENode]) -> list[float]:
        """The own costs of ``nodes`` summed at each size point."""
        columns = list(zip(*map(self.per_point, nodes), strict=True))  # each tuple one per size point
        return [sum(c) for c in columns] if columns else [0.0] * len(self.points)

    def per_point(self, node: ENode) -> tuple[float, ...]:
        """The own cost of ``node`` at each size point."""
        got = self._per_point.get(node)
        if got is None:
            if self._shared is None:
                got = self._own(node, self._static(node))
            else:
                facts, static = self.egraph.facts, self._static(node)
                key = (node.op, tuple([facts.get(a.eclass) if isinstance(a, Ref) else a for a in node.args]),
                       facts.get(node.eclass), self._into_op(node), None if static else self._hints_key)
                got = self._shared.get(key)
                if got is None:
                    if len(self._shared) >= MEMO_CAP:
                        self._shared.clear()
                    got = self._shared[key] = self._own(node, static)
            if node.eclass in self.fixed_layout and self._strided_slice(node):
                got = tuple(c + self._copy(node.eclass, s) for c, s in zip(got, self.points, strict=True))
            self._per_point[node] = got
        return got

    def _strided_slice(self, node: ENode) -> bool:
        """A ``Slice`` of fewer than all of a dim past the first, in a class whose traced value is contiguous,
        unless every dim before it is a static 1 (a slice of one row is contiguous as it is: no copy)."""
        facts = self.egraph.facts.get(node.eclass)
        if node.op != "Slice" or facts is None or not facts.contiguous:
            return False
        x, dim, start, end = node.args
        src = self.operand_at(x.eclass) if isinstance(x, Ref) else None
        if src is None or not isinstance(dim, int) or not isinstance(start, int) or not isinstance(end, int):
            return False
        d = dim % len(src.shape)
        traced = self.egraph.facts[x.eclass].shape
        if all(isinstance(n, int) and n == 1 for n in traced[:d]):
            return False
        return min(end, src.shape[d]) - max(start, 0) < src.shape[d]

    def _copy(self, eclass: int, sizes: int | Mapping[str, int]) -> float:
        out = self.operand_at(eclass, sizes)
        key = self._at_hints(COPY_KEY, (eclass,), sizes)
        return 0.0 if out is None else self.profile.time_us(Traffic(out.bytes, out.bytes, 1, out.rows), key)

    def _own(self, node: ENode, static: bool) -> tuple[float, ...]:
        """``node``'s cost at each size point; a ``static`` node's (``_static``) once, for every point (no
        size point changes its operands or its key)."""
        if static:
            return (self.at(node, self.points[0], 0),) * len(self.points)
        return tuple(self.at(node, s, k) for k, s in enumerate(self.points))

    def _static(self, node: ENode) -> bool:
        """Whether every class ``node`` reads or makes has a shape of ints (or no facts)."""
        facts = self.egraph.facts
        f = facts.get(node.eclass)
        if f is not None and f.symbolic:
            return False
        for c in node.children:
            f = facts.get(c)
            if f is not None and f.symbolic:
                return False
        return True
