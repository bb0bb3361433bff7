"""Where a pass's time goes beyond its own code, per graph: egglog's calls, and torch computing the
fake value (shape, dtype, strides; the token dim symbolic) of each node the pass writes.

``split(gm, engine, run_eqsat, run_baseline)`` measures, outside the timed runs of
``benchmarks.pass_time``, over ``runs`` eqsat runs (each on a fresh copy; the median run is kept):
- **egglog**: the engine's e-graph is wrapped in a stopwatch, which times every call into egglog
  (``run_program``, ``parse_program``, ``freeze``);
- **eqsat's fake values**: ``eqsat.fx.new_values.fake_value`` is wrapped in one too: the time eqsat's emit
  spends making the value of each node whose value is not an original node's (eqsat reuses one
  where a new node computes an old value and is no view), as eqsat makes it (``eqsat.fx.fake_value``);
- **the baseline's fake values**: the baseline is run once more on a fresh copy; every node it wrote
  whose value is new has its op dispatched again on its inputs' fake values under the graph's fake
  mode, and the medians are summed (the dispatch then hits torch's fake-tensor cache: a lower bound).

Nothing here changes what a pass does: the stopwatches pass every call through.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch.fx.node import map_aggregate

from eqsat.engine.engine import Engine
from eqsat.fx import new_values
from eqsat.fx.capture import copy_graph


@dataclass(frozen=True)
class Split:
    eqsat_ms: float  # the median instrumented run
    egglog_ms: float  # of it, in egglog's calls
    eqsat_fake_ms: float  # of it, making the fake values of the nodes eqsat wrote
    eqsat_written: int  # nodes eqsat wrote whose fake value it had to make
    baseline_fake_ms: float  # the same for the baseline's replacement nodes
    baseline_written: int

    @property
    def python_ms(self) -> float:
        """eqsat's own code: the rest."""
        return max(self.eqsat_ms - self.egglog_ms - self.eqsat_fake_ms, 0.0)


class _Stopwatch:
    """Seconds ``spent`` in, and ``calls`` to, the functions it ``wrap``s."""

    def __init__(self) -> None:
        self.spent, self.calls = 0.0, 0

    def wrap(self, fn: Callable[..., object]) -> Callable[..., object]:
        def timed(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - start
                self.calls += 1

        return timed


class _TimedEGraph:
    """An egglog e-graph whose calls into egglog a stopwatch times; everything else passes through."""

    TIMED = ("run_program", "parse_program", "freeze")

    def __init__(self, egraph: object, watch: _Stopwatch) -> None:
        self.inner, self.watch = egraph, watch

    def __getattr__(self, name: str) -> object:
        attr = getattr(self.inner, name)
        return self.watch.wrap(attr) if name in self.TIMED else attr


def _values(node: fx.Node) -> list[object]:
    val = node.meta.get("val")
    return list(val) if isinstance(val, (tuple, list)) else [val]


def fake_dispatch(gm: fx.GraphModule, run: Callable[[fx.GraphModule], object], reps: int = 20) -> tuple[float, int]:
    """Run ``run`` on a fresh copy of ``gm``; the summed median ms of dispatching again, under the graph's
    fake mode, each call it wrote whose fake value is new, and how many there were."""
    copy = copy_graph(gm)
    before = set(copy.graph.nodes)
    old_vals = {id(v) for n in before for v in _values(n) if v is not None}
    run(copy)
    written = [n for n in copy.graph.nodes if n not in before and n.op == "call_function"
               and not all(id(v) in old_vals for v in _values(n))]
    mode = detect_fake_mode([v for n in before for v in _values(n) if isinstance(v, torch.Tensor)])
    total = 0.0
    for node in written:
        args, kwargs = map_aggregate((node.args, node.kwargs),
                                     lambda a: a.meta["val"] if isinstance(a, fx.Node) else a)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            if mode is None:
                node.target(*args, **kwargs)
            else:
                with mode:
                    node.target(*args, **kwargs)
            times.append((time.perf_counter() - start) * 1e3)
        total += statistics.median(times)
    return total, len(written)


def split(gm: fx.GraphModule, engine: Engine, run_eqsat: Callable[[fx.GraphModule], object],
          run_baseline: Callable[[fx.GraphModule], object], runs: int = 15) -> Split:
    """``run_eqsat`` must run eqsat with ``engine`` (see the module docstring)."""
    real_egraph, real_fake_value = engine.egraph, new_values.fake_value
    egglog, fakes = _Stopwatch(), _Stopwatch()
    engine.egraph = _TimedEGraph(real_egraph, egglog)  # type: ignore[assignment]
    new_values.fake_value = fakes.wrap(real_fake_value)  # type: ignore[assignment]
    samples = []
    try:
        for _ in range(runs):
            copy = copy_graph(gm)
            egglog.spent, fakes.spent, fakes.calls = 0.0, 0.0, 0
            start = time.perf_counter()
            run_eqsat(copy)
            samples.append(((time.perf_counter() - start) * 1e3, egglog.spent * 1e3, fakes.spent * 1e3, fakes.calls))
    finally:
        engine.egraph, new_values.fake_value = real_egraph, real_fake_value
    total, egglog_ms, eq_fake, eq_n = sorted(samples)[len(samples) // 2]
    pm_fake, pm_n = fake_dispatch(gm, run_baseline)
    return Split(total, egglog_ms, eq_fake, eq_n, pm_fake, pm_n)
