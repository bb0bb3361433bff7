"""Decision quality on measured kernel tables: regret of the optimizer's choice against the oracle.

For each case of ``fixtures/h200_anchor.csv`` (rms / add+rms / silu_mul followed by fp8 group quant,
at one M and N) the graph is built in the ``eqsat`` vocabulary, optimized with a cost profile
calibrated on measurements, and the option it picks (the fused AITER kernel, the unfused kernels, or
Inductor's fusion of the native chain) is looked up in the measured table. Regret =
Σ measured time of the chosen options / Σ measured time of the per-case best.

    python -m benchmarks.decision                 # prints the table, writes results/decision_h200.md

Calibration (``eqsat.cost.calibrate.fit``) sees each measured option as its kernels: ``fused`` is the
fused kernel's key, ``inductor`` the Inductor chain's key, ``unfused`` the sum of the two
standalone kernels; bytes come from the catalog's traffic formulas. Cross-validation calibrates
on half of the shapes and scores the other half (split by N, and by alternating M).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

import eqsat
from eqsat.core.spec import Operand
from eqsat.cost.calibrate import Component, Measurement, evaluate, fit
from eqsat.cost.roofline import Profile, load_profile
from eqsat.fx.capture import trace_tokens
from eqsat.kernels.catalog import DEFAULT_CATALOG

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixtures" / "h200_anchor.csv"
OPTIONS = ("fused", "unfused", "inductor")
FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
own = torch.ops.eqsat

# case -> (fused row, inductor row, standalone rows, input width factor)
CASES: dict[str, tuple[str, str, tuple[str, ...], int]] = {
    "rms+group_quant": ("K_rmsnorm_fp8_group_quant", "I_rms_group_quant", ("RmsNorm", "QuantGroup"), 1),
    "add+rms+group_quant": ("K_rmsnorm_add_fp8_group_quant", "I_add_rms_group_quant", ("AddRmsNorm", "QuantGroup"), 1),
    "silu_mul+group_quant": ("K_silu_mul_fp8_group_quant", "I_silu_group_quant", ("SiluMul", "QuantGroup"), 2),
}


@dataclass(frozen=True)
class Case:
    case: str
    M: int
    N: int
    us: dict[str, float]

    @property
    def oracle(self) -> float:
        return min(self.us.values())


def load_cases(path: Path = FIXTURE) -> list[Case]:
    with open(path, newline="") as fh:
        return [Case(r["case"], int(r["M"]), int(r["N"]), {o: float(r[o]) for o in OPTIONS})
                for r in csv.DictReader(fh)]


def _traffic_component(row: str, x: Operand, w: Operand, group: int = 128) -> Component:
    """One kernel call of catalog ``row`` on activation ``x`` (weight ``w``), as calibration sees it."""
    spec = DEFAULT_CATALOG[row]
    args = {"x": x, "w": w, "r": x, "G": group, "eps": 1e-6, "dt": "float8_e4m3fn"}
    t = spec.traffic({name: args[name] for name in spec.param_names})
    return Component(spec.calibration_key, t.bytes, t.launches)


def measurements(cases: Sequence[Case]) -> list[Measurement]:
    out = []
    for c in cases:
        fused, ind, parts, widen = CASES[c.case]
        x, w = Operand((c.M, c.N * widen), 2), Operand((c.N,), 2)
        out.append(Measurement((_traffic_component(fused, x, w),), c.us["fused"], f"{c.case} M={c.M} N={c.N} fused"))
        out.append(Measurement((_traffic_component(ind, x, w),), c.us["inductor"], f"{c.case} M={c.M} N={c.N} ind"))
        y = Operand((c.M, c.N), 2)  # what the first standalone kernel writes and the quant reads
        first, quant = parts
        out.append(Measurement((_traffic_component(first, x, w), _traffic_component(quant, y, w)), c.us["unfused"],
                               f"{c.case} M={c.M} N={c.N} unfused"))
    return out


def graph_for(c: Case) -> tuple[Callable[..., object], list[torch.Tensor]]:
    x = torch.zeros(8, c.N * CASES[c.case][3], dtype=BF16)
    w = torch.ones(c.N, dtype=BF16)
    if c.case == "rms+group_quant":
        return (lambda x, w: own.group_fp8_quant(own.rms_norm(x, w, 1e-6), 128, FP8)), [x, w]
    if c.case == "add+rms+group_quant":
        def add(x, r, w):
            n, res = own.fused_add_rms_norm(x, r, w, 1e-6)
            q, s = own.group_fp8_quant(n, 128, FP8)
            return q, s, res
        return add, [x, x.clone(), w]
    return (lambda x: own.group_fp8_quant(own.silu_and_mul(x), 128, FP8)), [x]


def choose(c: Case, profile: Profile) -> str:
    f, inputs = graph_for(c)
    report = eqsat.optimize(trace_tokens(f, *inputs), profile=profile, sizes=c.M, strict=True)
    chosen = set(report.kernels_chosen)
    if any(k.startswith("K_") for k in chosen):
        return "fused"
    if any(k.startswith("I_") for k in chosen):
        return "inductor"
    return "unfused"


def regret(cases: Sequence[Case], profile: Profile) -> tuple[float, list[tuple[Case, str]]]:
    picks = [(c, choose(c, profile)) for c in cases]
    return sum(c.us[p] for c, p in picks) / sum(c.oracle for c in cases), picks


def fixed_regret(cases: Sequence[Case], option: str) -> float:
    return sum(c.us[option] for c in cases) / sum(c.oracle for c in cases)


def cross_validated(cases: Sequence[Case], split: Callable[[Case], bool], base: Profile) -> float:
    """Calibrate on each half, score the other; regret over all cases."""
    halves = [[c for c in cases if split(c)], [c for c in cases if not split(c)]]
    chosen_us = oracle_us = 0.0
    for train, test in (halves, halves[::-1]):
        profile = fit(measurements(train), base)
        _, picks = regret(test, profile)
        chosen_us += sum(c.us[p] for c, p in picks)
        oracle_us += sum(c.oracle for c in test)
    return chosen_us / oracle_us


def main(argv: Sequence[str] = ()) -> int:
    cases = load_cases()
    base = load_profile("h200")
    profile = fit(measurements(cases), base)
    quality = evaluate(measurements(cases), profile)
    in_sample, picks = regret(cases, profile)
    ms = sorted({c.M for c in cases})
    cv_n = cross_validated(cases, lambda c: min(c.N for c in cases) == c.N, base)
    cv_m = cross_validated(cases, lambda c: ms.index(c.M) % 2 == 0, base)
    lines = [
        "# Decision regret on the H200 anchor table", "",
        "Command: `python -m benchmarks.decision` (writes this file). Fixture: `benchmarks/fixtures/h200_anchor.csv`.",
        "", "| policy | regret (Σ chosen / Σ oracle) |", "|---|---|",
        f"| always fuse (vLLM's passes) | {fixed_regret(cases, 'fused'):.3f} |",
        f"| never fuse | {fixed_regret(cases, 'unfused'):.3f} |",
        f"| leave all to Inductor | {fixed_regret(cases, 'inductor'):.3f} |",
        f"| eqsat, built-in h200 profile (fitted on an independent GPU run, out of sample) "
        f"| {regret(cases, base)[0]:.3f} |",
        f"| eqsat, calibrated on the table (in-sample) | {in_sample:.3f} |",
        f"| eqsat, cross-validated (calibrate on one N, score the other) | {cv_n:.3f} |",
        f"| eqsat, cross-validated (alternating M) | {cv_m:.3f} |",
        "", f"Calibration fit: median relative error {quality.median_rel_error:.1%}, "
        f"max {quality.max_rel_error:.1%}, Spearman {quality.spearman:.3f} over {quality.n} measurements.",
        "", "| case | M | N | fused | unfused | inductor | best | chosen |", "|---|---|---|---|---|---|---|---|",
    ]
    for c, p in picks:
        best = min(c.us, key=c.us.__getitem__)
        lines.append(f"| {c.case} | {c.M} | {c.N} | {c.us['fused']} | {c.us['unfused']} | {c.us['inductor']} "
                     f"| {best} | {p}{'' if p == best else ' ✗'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if "--no-write" not in argv:
        out = HERE / "results" / "decision_h200.md"
        out.write_text(text)
        print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
