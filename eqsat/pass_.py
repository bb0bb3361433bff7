"""``EqSatPass``: the optimizer as an Inductor post-grad custom pass and a vLLM ``InductorPass``.

Use: ``torch._inductor.config.post_grad_custom_post_pass = EqSatPass()``. In vLLM, put it in
``compilation_config.inductor_compile_config["post_grad_custom_post_pass"]``. ``uuid()`` hashes
everything that can change the result (rules, catalog, cost profile, options, the package's own
source, and the egglog and torch versions), so Inductor's FX-graph cache never reuses a stale graph.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from importlib import metadata, resources
from pathlib import Path

import torch
import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from eqsat.api import optimize
from eqsat.core.errors import described, guarded
from eqsat.core.rule import Rule
from eqsat.cost.cards import resolved
from eqsat.cost.roofline import load_profile
from eqsat.engine.engine import Engine
from eqsat.kernels.catalog import Catalog
from eqsat.options import Options
from eqsat.report import RUNTIME_FLOATS_HINT, Report

log = logging.getLogger("eqsat")


@cache
def _source_digest() -> str:
    h = hashlib.sha256()
    for pkg in ("eqsat", "eqsat.rewrites", "eqsat.extract"):
        root = Path(str(resources.files(pkg)))
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".json"):
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def range_sizes(compile_range: object, points: int = 6) -> tuple[int, ...]:
    """Sizes to cost a compile range at: its ends and the powers of two between (at most ``points``)."""
    start, end = int(getattr(compile_range, "start", 1)), int(getattr(compile_range, "end", 1))
    start, end = max(1, min(start, end)), max(1, start, end)
    inner = [1 << k for k in range(start.bit_length(), end.bit_length()) if start < (1 << k) < end]
    if len(inner) > points - 2:
        step = len(inner) / (points - 2)
        inner = [inner[int(i * step)] for i in range(points - 2)]
    return tuple(sorted({start, *inner, end}))


class SharedEngine:
    """The engines a pass keeps (rules declared, reused across graphs: ``eqsat.engine.engine``), one per
    thread that runs it, in a box the pass and its deep copies share: vLLM deep-copies its compile
    config per backend, and each copy then starts warm on the engine the first one declared, and an
    engine dropped after a failed graph is dropped for every copy. One per thread: egglog's e-graph
    answers only on the thread that made it (a pyo3 ``unsendable`` class: from another thread it
    panics, and it cannot be let go there), so each thread's engine is made, used and, when the thread
    ends, let go on it. ``lock`` lets one graph at a time through the pass (an engine holds no row
    between graphs). A pickle carries an empty box: an engine stays in its process, and is made again
    on first use."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._mine = threading.local()  # .engine: this thread's

    @property
    def engine(self) -> Engine | None:
        """The calling thread's engine (None before its first graph, or after it was dropped)."""
        return getattr(self._mine, "engine", None)

    def ready(self, catalog: Catalog, rules: Sequence[Rule]) -> Engine:
        """The calling thread's engine for ``catalog`` and ``rules``, made now if it has none for them."""
        engine = self.engine
        if engine is None or not engine.serves(catalog, rules):  # a copy given other options
            engine = self._mine.engine = Engine(catalog, rules)
        return engine

    def drop(self) -> None:
        self._mine.engine = None

    def __deepcopy__(self, memo: dict[int, object]) -> SharedEngine:
        return self

    def __reduce__(self) -> tuple[type[SharedEngine], tuple[()]]:
        return SharedEngine, ()


class EqSatPass(CustomGraphPass):
    """Runs :func:`eqsat.optimize` on each graph, from whichever thread calls it; never breaks a compile
    unless ``strict``. Its deep copies share its engines; its pickles leave them behind
    (``SharedEngine``). ``profile="auto"`` is resolved when the pass is made, to the profile of the GPU
    torch sees (a clear error without one), so that its options and ``uuid`` name the card's profile."""

    def __init__(self, options: Options | None = None, **overrides: object) -> None:
        options = replace(options or Options(), **overrides)
        self.options = replace(options, profile=resolved(options.profile))
        self.last_report: Report | None = None
        self._shared = SharedEngine()
        self._range_sizes: tuple[int, ...] = ()
        self._said_runtime_floats = False  # the warning below, once per pass
        self._uuid: str | None = None  # see uuid

    @property
    def engine(self) -> Engine | None:
        """The engine this pass and its deep copies run on in the calling thread (None before the thread's
        first graph, or when the last one was dropped)."""
        return self._shared.engine

    def __call__(self, graph: fx.Graph) -> None:
        with self._shared.lock:
            self._run(graph)

    def _run(self, graph: fx.Graph) -> None:
        try:
            engine = self._shared.ready(self.options.catalog, self.options.active_rules())
            # Inductor (and vLLM through it) recompiles the module after its post-grad passes
            self.last_report = optimize(graph, self._options_for_graph(), engine=engine, recompile=False)
            if self.last_report.error:
                self._keep_engine_if_clean()
        except Exception as exc:
            self._keep_engine_if_clean()
            if self.options.strict:
                raise
            log.warning("eqsat: pass skipped (%s); graph left unchanged", described(exc))
            return
        log.info("%s", self.last_report.summary())
        log.debug("eqsat report:\n%s", self.last_report.table())
        if self.last_report.runtime_floats and not self.last_report.changed and not self._said_runtime_floats:
            self._said_runtime_floats = True
            log.warning("eqsat: graph left unchanged; %d float input(s) known only at run time (%s): %s",
                        len(self.last_report.runtime_floats), ", ".join(self.last_report.runtime_floats[:4]),
                        RUNTIME_FLOATS_HINT)

    def _keep_engine_if_clean(self) -> None:
        """After a failed graph: the engine's scope deleted that graph's rows, so it serves the next
        graph warm; only an engine left holding rows (or one that cannot say) is dropped (for every copy)."""
        engine = self._shared.engine
        if engine is None:
            return
        try:
            guarded(engine.check_empty)
        except Exception as exc:
            log.warning("eqsat: the engine is rebuilt for the next graph (%s)", described(exc))
            self._shared.drop()

    def is_applicable_for_range(self, compile_range: object) -> bool:
        """vLLM asks this before running the pass on the graph of one compile range: the pass then
        costs that graph at sizes sampled from the range (so the choice can differ per range)."""
        self._range_sizes = range_sizes(compile_range)
        return True

    def _options_for_graph(self) -> Options:
        return replace(self.options, sizes=self._range_sizes) if self._range_sizes else self.options

    def uuid(self) -> str:
        """Inductor asks it for every graph it compiles with its FX-graph cache on: worked out once per
        pass (its options are frozen; what else it hashes does not change while a process runs)."""
        if self._uuid is None:
            self._uuid = self._hash()
        return self._uuid

    def _hash(self) -> str:
        o = self.options
        parts = [
            "\n".join(r.egglog("main") + r.numerics for r in o.active_rules()),
            o.catalog.fingerprint(), repr(load_profile(o.profile)), o.fingerprint(), _source_digest(),
            metadata.version("egglog"), torch.__version__,
        ]
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()
