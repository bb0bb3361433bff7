"""Checking the third-party corpus (``benchmarks/corpus.py`` builds it): project dependencies only.

A corpus directory holds ``cases.json`` (file stem -> case name, family, tracer, fp8 dtype and the
kernel the case must fuse into, or null for a look-alike) and, per stem, ``<stem>.json`` (the graph,
``eqsat.graphfile``) and ``<stem>.pt`` (the inputs and the eager outputs of the code it was traced from).

``check_case`` loads the graph, optimizes it (``OPTIONS``: the cheapest extraction written even where it is
not predicted faster, since the saved graphs are tiny and whether a kernel pays there is the cost model's
call, not the lift's) and runs it on the saved inputs:
- a positive passes when its kernel is chosen and every output is within the rounding contract of
  the eager one: an fp8 output followed by its fp32 scale as q·s within ``NATIVE_QUANT_TOL_STEPS``
  fp8 steps, every other output bit-exact;
- a look-alike passes when, optimized under ``numerics="exact"``, every output is bit-exact (fp8
  compared as bytes), and, under the default ``"rounding"``, no kernel but a standalone quant
  (``Quant*``: a native quant is one within rounding) is chosen and the outputs are within the contract.
``summary`` counts both per fp8 dtype. ``python -m benchmarks.corpus_check DIR`` prints the table.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from eqsat.rewrites.lift import NATIVE_QUANT_TOL_STEPS

import eqsat
from eqsat import graphfile
from eqsat.library.reference import fp8_step_error

OPTIONS = {"profile": "mi300x", "sizes": 256, "strict": True, "emit": "always"}
"""A compile range where the fused AITER kernels are the cheapest choice (the README's example)."""

LOOK_ALIKE_MAY_GET = "Quant"
"""The only kernels a look-alike may get (prefix): the standalone quants its native quant is."""


@dataclass(frozen=True)
class Outcome:
    stem: str
    case: str
    family: str
    tracer: str
    fp8: str
    kernel: str | None
    chosen: tuple[str, ...]
    passed: bool
    detail: str


def _is_fp8(t: torch.Tensor) -> bool:
    return t.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def _bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8)) if _is_fp8(a) else torch.equal(a, b)


def compare(got: list[torch.Tensor], want: list[torch.Tensor], exact: bool) -> str:
    """'' when ``got`` matches ``want`` (see the module docstring), else what differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, want {len(want)}"
    k = 0
    while k < len(got):
        g, w = got[k], want[k]
        pair = _is_fp8(g) and k + 1 < len(got) and got[k + 1].dtype == torch.float32
        if exact or not pair:
            if not _bitwise(g, w):
                return f"output {k} differs"
            k += 1
            continue
        sg, sw = got[k + 1], want[k + 1]
        if g.shape != w.shape or sg.shape != sw.shape:
            return f"output {k}: shapes {tuple(g.shape)}/{tuple(sg.shape)}, want {tuple(w.shape)}/{tuple(sw.shape)}"
        err = fp8_step_error(w, sw, g, sg, g.shape[-1] // sg.shape[-1])
        if not err <= NATIVE_QUANT_TOL_STEPS:
            return f"output {k}: {err:.2f} fp8 steps"
        k += 2
    return ""


def _run(directory: Path, stem: str, numerics: str) -> tuple[tuple[str, ...], list[torch.Tensor], list[torch.Tensor]]:
    """(kernels chosen, outputs, eager reference) of the saved graph optimized under ``numerics``."""
    gm = graphfile.load(directory / f"{stem}.json")
    saved = torch.load(directory / f"{stem}.pt")
    report = eqsat.optimize(gm, numerics=numerics, **OPTIONS)
    got = gm(*saved["inputs"])
    chosen = tuple(sorted(k for k, n in report.kernels_chosen.items() if n))
    return chosen, list(got) if isinstance(got, (tuple, list)) else [got], saved["reference"]


def _verdict(directory: Path, stem: str, kernel: str | None) -> tuple[tuple[str, ...], str]:
    chosen, got, want = _run(directory, stem, "rounding")
    if kernel is not None:
        return chosen, ("" if kernel in chosen else f"chose {list(chosen)}") or compare(got, want, exact=False)
    other = [k for k in chosen if not k.startswith(LOOK_ALIKE_MAY_GET)]
    if other:
        return chosen, f"got {other}"
    if detail := compare(got, want, exact=False):
        return chosen, detail
    _, got, want = _run(directory, stem, "exact")
    return chosen, compare(got, want, exact=True) and f"exact: {compare(got, want, exact=True)}"


def check_case(directory: Path, stem: str, meta: dict[str, object]) -> Outcome:
    kernel = meta["kernel"] if isinstance(meta["kernel"], str) else None
    try:
        chosen, detail = _verdict(directory, stem, kernel)
    except Exception as exc:  # a case that breaks the pass is a failed case, named
        chosen, detail = (), f"{type(exc).__name__}: {exc}"
    return Outcome(stem, str(meta["case"]), str(meta["family"]), str(meta["tracer"]), str(meta["fp8"]), kernel,
                   chosen, not detail, detail)


def check_corpus(directory: Path) -> list[Outcome]:
    cases = json.loads((directory / "cases.json").read_text())
    return [check_case(directory, stem, meta) for stem, meta in sorted(cases.items())]


def summary(outcomes: list[Outcome]) -> dict[str, dict[str, tuple[int, int]]]:
    """fp8 dtype -> {"positives": (fused, total), "look-alikes": (exact, total)}."""
    table: dict[str, dict[str, tuple[int, int]]] = {}
    for o in outcomes:
        row = table.setdefault(o.fp8, {"positives": (0, 0), "look-alikes": (0, 0)})
        key = "positives" if o.kernel else "look-alikes"
        ok, total = row[key]
        row[key] = (ok + o.passed, total + 1)
    return table


def render(outcomes: list[Outcome]) -> str:
    lines = ["| fp8 | positives fused / total | look-alikes exact / total |", "|---|---|---|"]
    for fp8, row in sorted(summary(outcomes).items()):
        (pf, pt), (lf, lt) = row["positives"], row["look-alikes"]
        lines.append(f"| {fp8} | {pf} / {pt} | {lf} / {lt} |")
    lines += ["", "| case | tracer | fp8 | expected | chosen | result |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        lines.append(f"| {o.case} | {o.tracer} | {o.fp8} | {o.kernel or 'look-alike'} | "
                     f"{', '.join(o.chosen) or '-'} | {'ok' if o.passed else o.detail} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(check_corpus(Path(sys.argv[1]))))
