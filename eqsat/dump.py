"""Debug dumps: set ``EQSAT_DUMP_DIR`` (or ``Options.dump_dir``) and every optimized graph leaves a
folder ``<dir>/graph_<pid>_<n>/`` with:
- ``before.py`` / ``after.py``: the graph's code before and after the pass;
- ``before.json``: the input as a saved graph (:mod:`eqsat.graphfile`), so ``eqsat explain
  before.json`` replays offline what the pass saw;
- ``before.dot`` / ``after.dot`` and ``.png``: the FX graph (:mod:`eqsat.fx.picture`; created nodes
  filled, fused kernels bold; no PNG above ``fx_picture.PNG_MAX_NODES`` nodes, which is logged);
- ``report.txt`` / ``report.json``: the report;
- ``egraph.dot``: egglog's Graphviz output of the saturated e-graph (up to ``EGGLOG_DOT_MAX_NODES``);
- ``fusion_<i>_<kernel>.dot``: the e-graph around each chosen fused kernel (its e-class, projections
  and three levels of children; chosen e-nodes filled).
Each ``.dot`` is also rendered to ``.svg`` when Graphviz's ``dot`` program is installed.
Invariant: dumping never changes what the pass does; a failure to dump is logged and ignored.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import torch.fx as fx
from egglog import bindings as eb

from eqsat import graphfile
from eqsat.core.egraph import EGraph, Selection
from eqsat.core.errors import described
from eqsat.extract.dot import neighbourhood_dot
from eqsat.fx import picture as fx_picture
from eqsat.kernels.catalog import Catalog
from eqsat.report import Report

ENV = "EQSAT_DUMP_DIR"
EGGLOG_DOT_MAX_NODES = 2000
log = logging.getLogger("eqsat")


def dump_root(configured: str | None) -> Path | None:
    value = configured or os.environ.get(ENV)
    return Path(value) if value else None


def _render(path: Path) -> None:
    dot = shutil.which("dot")
    if dot:
        subprocess.run([dot, "-Tsvg", str(path), "-o", str(path.with_suffix(".svg"))], check=False,
                       capture_output=True, timeout=30)


class Dump:
    """The dump folder of one graph; each method writes one kind of artifact."""

    def __init__(self, root: Path, graph: fx.Graph) -> None:
        root.mkdir(parents=True, exist_ok=True)
        n = sum(1 for p in root.iterdir() if p.name.startswith(f"graph_{os.getpid()}_"))
        self.dir = root / f"graph_{os.getpid()}_{n}"
        self.dir.mkdir()
        (self.dir / "before.py").write_text(graph.python_code("self").src)
        self.before = list(graph.nodes)
        safely("the saved graph", graphfile.save, graph, self.dir / "before.json")
        safely("the graph picture", self.fx_picture, graph, "before", None)

    def fx_picture(self, graph: fx.Graph, name: str, before: list[fx.Node] | None) -> None:
        path, title = self.dir / f"{name}.dot", f"{self.dir.name}: {name}"
        if before is not None:
            title += " (orange, bold: ops new to the graph; light orange: other nodes the pass created)"
        path.write_text(fx_picture.fx_dot(graph, before, title))
        _render(path)
        if not fx_picture.fx_png(graph, path.with_suffix(".png"), before, title):
            log.info("eqsat: %s.png not drawn: %d nodes > %d", name, len(graph.nodes), fx_picture.PNG_MAX_NODES)

    def egglog_dot(self, egraph: eb.EGraph, size: int) -> None:
        if size <= EGGLOG_DOT_MAX_NODES:
            path = self.dir / "egraph.dot"
            path.write_text(egraph.serialize([]).to_dot())
            _render(path)

    def fusions(self, eg: EGraph, selection: Selection, catalog: Catalog) -> None:
        projections: dict[int, list[int]] = {}
        for n in eg.nodes:
            if n.op == "Get":
                projections.setdefault(n.children[0], []).append(n.eclass)
        fused = [(c, eg.nodes[i].op) for c, i in selection.items()
                 if eg.nodes[i].op in catalog and catalog[eg.nodes[i].op].is_fused]
        for k, (cls, op) in enumerate(sorted(fused)):
            path = self.dir / f"fusion_{k}_{op}.dot"
            path.write_text(neighbourhood_dot(eg, [cls, *projections.get(cls, [])], selection, 3, op))
            _render(path)

    def finish(self, graph: fx.Graph, report: Report) -> None:
        (self.dir / "after.py").write_text(graph.python_code("self").src)
        safely("the graph picture", self.fx_picture, graph, "after", self.before)
        (self.dir / "report.txt").write_text(report.table() + "\n")
        (self.dir / "report.json").write_text(json.dumps(report.as_dict(), indent=2, default=str) + "\n")


def opened(root: Path, graph: fx.Graph) -> Dump | None:
    """A new dump folder for ``graph`` under ``root``; None (logged) when it cannot be made."""
    try:
        return Dump(root, graph)
    except Exception as exc:
        log.warning("eqsat: could not dump to %s (%s)", root, described(exc))
        return None


def safely(action: str, fn, *args: object) -> None:
    """Run one dump step; a dump must never break the pass."""
    try:
        fn(*args)
    except Exception as exc:
        log.warning("eqsat: could not dump %s (%s)", action, described(exc))
