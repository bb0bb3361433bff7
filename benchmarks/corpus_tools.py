"""The research tools on the third-party corpus: what ``explain``, ``check-equiv`` and ``discover``
say about each saved case (``benchmarks.corpus_check`` reads the same directory).

Per case: ``explain``'s verdict on the case's kernel (chosen / not chosen / constraint failed; for a
look-alike, the fused sites it lists); ``check_equiv`` of the traced graph against the graph the
pass made of it (every output ``equal`` where the pass proved its rewrite); ``discover``'s chains
(ops of the largest). ``python -m benchmarks.corpus_tools DIR [TRACER]`` prints the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import eqsat
from benchmarks.corpus_check import OPTIONS
from eqsat import graphfile
from eqsat.fx.capture import copy_graph
from eqsat.tools.equiv import check_equiv
from eqsat.tools.explain import discover, explain


def tools_row(directory: Path, stem: str, meta: dict[str, object]) -> str:
    gm = graphfile.load(directory / f"{stem}.json")
    options = eqsat.Options(profile=str(OPTIONS["profile"]), sizes=int(str(OPTIONS["sizes"])))
    kernel = meta["kernel"]
    sites = explain(gm, options)
    if isinstance(kernel, str):
        verdict = ", ".join(sorted({s.status for s in sites if s.kernel == kernel})) or "no site"
    else:
        verdict = ", ".join(sorted({f"{s.kernel} {s.status}" for s in sites if s.status != "constraint failed"})) \
            or "no fused site"
    optimized = copy_graph(gm)
    eqsat.optimize(optimized, options)
    equiv = "/".join(v.status for v in check_equiv(gm, optimized, options=options))
    chains = discover(gm, options)
    top = " ".join(chains[0].ops) if chains else "-"
    return f"| {meta['case']} | {meta['tracer']} | {meta['fp8']} | {verdict} | {equiv} | {len(chains)}: {top} |"


if __name__ == "__main__":
    directory = Path(sys.argv[1])
    cases = json.loads((directory / "cases.json").read_text())
    tracer = sys.argv[2] if len(sys.argv) > 2 else None
    print("| case | tracer | fp8 | explain | check-equiv (traced vs optimized) | discover: chains, largest |")
    print("|---|---|---|---|---|---|")
    for stem, meta in sorted(cases.items()):
        if tracer is None or meta["tracer"] == tracer:
            print(tools_row(directory, stem, meta), flush=True)
