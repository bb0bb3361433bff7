"""``EqSatPass``: the optimizer as an Inductor post-grad custom pass and a vLLM ``InductorPass``.

Use: ``torch._inductor.config.post_grad_custom_post_pass = EqSatPass()``. In vLLM, put it in
``compilation_config.inductor_compile_config["post_grad_custom_post_pass"]``. ``uuid()`` hashes
everything that can change the result (rules, catalog, cost profile, options, the package's own
source, and the egglog and torch versions), so Inductor's FX-graph cache never reuses a stale graph.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from functools import cache
from importlib import metadata, resources
from pathlib import Path

import torch
import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from eqsat.api import optimize
from eqsat.cost.roofline import load_profile
from eqsat.engine.engine import Engine
from eqsat.options import Options
from eqsat.report import Report

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


class EqSatPass(CustomGraphPass):
    """Runs :func:`eqsat.optimize` on each graph; never breaks a compile unless ``strict``."""

    def __init__(self, options: Options | None = None, **overrides: object) -> None:
        self.options = replace(options or Options(), **overrides)
        self.last_report: Report | None = None
        self._engine: Engine | None = None  # declared rules, reused across graphs (see eqsat.engine.engine)
        self._range_sizes: tuple[int, ...] = ()

    def __call__(self, graph: fx.Graph) -> None:
        try:
            if self._engine is None:
                self._engine = Engine(self.options.catalog, self.options.active_rules())
            # Inductor (and vLLM through it) recompiles the module after its post-grad passes
            self.last_report = optimize(graph, self._options_for_graph(), engine=self._engine, recompile=False)
            if self.last_report.error:
                self._keep_engine_if_clean()
        except Exception as exc:
            self._keep_engine_if_clean()
            if self.options.strict:
                raise
            log.warning("eqsat: pass skipped (%s: %s); graph left unchanged", type(exc).__name__, exc)
            return
        log.info("%s", self.last_report.summary())
        log.debug("eqsat report:\n%s", self.last_report.table())

    def _keep_engine_if_clean(self) -> None:
        """After a failed graph: the engine's scope deleted that graph's rows, so it serves the next
        graph warm; only an engine left holding rows (or one that cannot say) is dropped."""
        if self._engine is None:
            return
        try:
            self._engine.check_empty()
        except Exception as exc:
            log.warning("eqsat: the engine is rebuilt for the next graph (%s)", exc)
            self._engine = None

    def __getstate__(self) -> dict:
        """Copies and pickles (vLLM deep-copies its compile config per backend) leave the egglog engine
        behind; it is rebuilt on first use."""
        return {**self.__dict__, "_engine": None}

    def is_applicable_for_range(self, compile_range: object) -> bool:
        """vLLM asks this before running the pass on the graph of one compile range: the pass then
        costs that graph at sizes sampled from the range (so the choice can differ per range)."""
        self._range_sizes = range_sizes(compile_range)
        return True

    def _options_for_graph(self) -> Options:
        return replace(self.options, sizes=self._range_sizes) if self._range_sizes else self.options

    def uuid(self) -> str:
        o = self.options
        parts = [
            "\n".join(r.egglog("main") + r.numerics for r in o.active_rules()),
            o.catalog.fingerprint(), repr(load_profile(o.profile)), o.fingerprint(), _source_digest(),
            metadata.version("egglog"), torch.__version__,
        ]
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()
