"""The report of one optimizer run: what fired, what was chosen, predicted times, sizes, timings.

A plain value (``Report``); ``table()`` renders it for people, ``as_dict()`` for tools and logs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

RUNTIME_FLOATS_HINT = ("torch.compile(dynamic=True) makes Python floats such as an RMSNorm's eps graph inputs, and "
                      "rules needing them constant cannot match: compile with dynamic=None (mark_dynamic the token "
                      "dim) or set torch._dynamo.config.specialize_float = True")


@dataclass
class Report:
    rules_fired: Counter[str] = field(default_factory=Counter)  # rule name -> matches
    kernels_chosen: Counter[str] = field(default_factory=Counter)  # fused kernels created
    predicted_before_us: float = 0.0
    predicted_after_us: float = 0.0
    # per size point costed (an int, or a mapping written out): the predicted µs before and after, the
    # graph as written (after = before where it was left alone); the two above are their weighted means
    predicted_at: dict[int | str, tuple[float, float]] = field(default_factory=dict)
    egraph_nodes: int = 0
    egraph_classes: int = 0
    stop_reason: str = ""
    iterations: int = 0
    rules_reachable: int = 0  # rules that can fire on this graph (eqsat.engine.reach); the others cannot
    stage_ms: dict[str, float] = field(default_factory=dict)
    imported_terms: int = 0
    opaque_nodes: int = 0
    copied_nodes: int = 0  # nodes of components that repeat another, not saturated on their own (eqsat.engine.repeats)
    changed: bool = False
    error: str | None = None
    dropped: list[str] = field(default_factory=list)  # sites emit could not write, and why (the rest landed)
    guards: list[str] = field(default_factory=list)  # shape guards the rewrites rely on (eqsat.fx.symbolic)
    declined: str = ""  # why a cheaper extraction was not written (the graph left as it was)
    range_search: str = ""  # a range's extraction slower at a size, and what weighing that size up found
    within_error: str = ""  # sizes of a range the written graph is predicted slower at, within the profiles' error
    runtime_floats: list[str] = field(default_factory=list)  # float inputs known at run time only (api.runtime_floats)

    @property
    def total_ms(self) -> float:
        return sum(self.stage_ms.values())

    @property
    def predicted_saving_us(self) -> float:
        return self.predicted_before_us - self.predicted_after_us

    def summary(self) -> str:
        kernels = ", ".join(f"{k} x{n}" for k, n in sorted(self.kernels_chosen.items())) or "none"
        return (f"eqsat: {sum(self.kernels_chosen.values())} fusion(s) [{kernels}], predicted "
                f"{self.predicted_before_us:.2f} -> {self.predicted_after_us:.2f} us, "
                f"{self.total_ms:.1f} ms, stop: {self.stop_reason or '-'}"
                + (f", {len(self.dropped)} site(s) dropped" if self.dropped else "")
                + (f", left alone: {self.declined}" if self.declined else "")
                + (f", slower within the profiles' error at {self.within_error}" if self.within_error else "")
                + (f", {len(self.runtime_floats)} float input(s) known only at run time ({RUNTIME_FLOATS_HINT})"
                   if self.runtime_floats else "")
                + (f", error: {self.error}" if self.error else ""))

    def table(self) -> str:
        rows: list[tuple[str, str]] = [
            ("changed", str(self.changed)),
            ("kernels chosen", ", ".join(f"{k} x{n}" for k, n in sorted(self.kernels_chosen.items())) or "-"),
            ("rules fired (matches)", ", ".join(f"{k}: {n}" for k, n in sorted(self.rules_fired.items())) or "-"),
            ("predicted before", f"{self.predicted_before_us:.2f} us"),
            ("predicted after", f"{self.predicted_after_us:.2f} us"),
            ("imported terms / opaque", f"{self.imported_terms} / {self.opaque_nodes}"),
            ("copied from a repeated component", f"{self.copied_nodes} node(s)"),
            ("e-graph", f"{self.egraph_nodes} e-nodes, {self.egraph_classes} e-classes"),
            ("saturation", f"{self.stop_reason} after {self.iterations} iteration(s), "
                           f"{self.rules_reachable} rule(s) reachable"),
            *((f"time: {k}", f"{v:.2f} ms") for k, v in self.stage_ms.items()),
            ("time: total", f"{self.total_ms:.2f} ms"),
        ]
        rows.extend(("dropped site", d) for d in self.dropped)
        rows.extend(("shape guard", g) for g in self.guards)
        if self.range_search:
            rows.append(("range search", self.range_search))
        if self.declined:
            rows.append(("left alone", self.declined))
        if self.within_error:
            rows.append(("slower within error", self.within_error))
        if self.runtime_floats:
            rows.append(("runtime floats", f"{', '.join(self.runtime_floats)}: {RUNTIME_FLOATS_HINT}"))
        if self.error:
            rows.append(("error", self.error))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["rules_fired"], d["kernels_chosen"] = dict(self.rules_fired), dict(self.kernels_chosen)
        return d
