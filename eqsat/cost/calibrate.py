"""Calibration: fit a device profile's per-kernel lines to measured kernel times.

A measurement is a time in µs for a sum of kernel calls, each call a (calibration key, bytes,
launches, rows) component, so a row can be one kernel (``fused``) or several run back to back (an
``unfused`` row can be an rms_norm kernel plus a quant kernel). The
model per key is ``launches * launch_us + rows * row_us + bytes / bandwidth``, linear in the unknowns
``launch_us``, ``row_us`` and ``1/bandwidth``, so all keys are fitted at once by non-negative least
squares on relative errors (every row weighs the same whether it takes 2 µs or 200 µs); a key measured
on both sides of the device's L2 gets a line for each side. A profile for another card whose table
measures only some keys can take the rest from the base profile, moved (``move_unmeasured``): their
bandwidths scaled by how the measured keys' bandwidths moved between the two cards.

Table format (CSV, one row per measured kernel): ``key,M,N,G,dtype,device,us,bytes,launches``
(extra columns are ignored). ``fit`` returns a new :class:`~eqsat.cost.roofline.Profile`; ``evaluate``
reports median relative error and Spearman rank correlation of predicted against measured time.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import nnls
from scipy.stats import spearmanr

from eqsat.core.spec import Traffic
from eqsat.cost.roofline import KernelTiming, Profile

MIN_BANDWIDTH_GBPS = 1.0


MIN_REGIME_ROWS = 4  # measurements a key needs on each side of the device's L2 for a line on each
WIDTH_SPREAD = 1.5  # how far apart a key's bytes per row must range for rows and bytes to be fitted apart


@dataclass(frozen=True)
class Component:
    key: str
    bytes: float
    launches: int = 1
    rows: float = 0


@dataclass(frozen=True)
class Measurement:
    components: tuple[Component, ...]
    us: float
    label: str = ""

    def predict(self, profile: Profile) -> float:
        return sum(profile.time_us(Traffic(c.bytes, 0, c.launches, c.rows), c.key) for c in self.components)


def read_table(*paths: str | Path) -> list[Measurement]:
    """Measurements from calibration CSVs (one kernel per row; its rows are the ``rows`` column, else
    ``M``), all tables together; rows with check=fail are skipped."""
    return [m for p in paths for m in _read_one(p)]


def _read_one(path: str | Path) -> list[Measurement]:
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("check", "") == "fail" or not row.get("us"):
                continue
            rows = float(row.get("rows") or row.get("M") or 0)
            comp = Component(row["key"], float(row["bytes"]), int(float(row.get("launches") or 1)), rows)
            out.append(Measurement((comp,), float(row["us"]), f"{row['key']} M={row.get('M')} N={row.get('N')}"))
    if not out:
        raise ValueError(f"{path}: no usable measurements (need columns key, us, bytes)")
    return out


def fit(measurements: Sequence[Measurement], base: Profile) -> Profile:
    """``base`` with a fitted line for every key the measurements mention: its latency, bandwidth and, where
    its calls' bytes per row range past ``WIDTH_SPREAD`` (else rows and bytes are one unknown), a per-row
    term; and a ``past_l2`` line of its own where ``base`` knows its L2 and the key is measured
    ``MIN_REGIME_ROWS`` times on each side of it."""
    comps = [c for m in measurements for c in m.components]
    counts: dict[tuple[str, bool], int] = {}
    for c in comps:
        counts[c.key, base.beyond_l2(c.bytes)] = counts.get((c.key, base.beyond_l2(c.bytes)), 0) + 1
    split = {k for k, _ in counts if min(counts.get((k, True), 0), counts.get((k, False), 0)) >= MIN_REGIME_ROWS}

    def group(c: Component) -> tuple[str, bool]:
        return c.key, c.key in split and base.beyond_l2(c.bytes)

    widths: dict[tuple[str, bool], list[float]] = {}
    for c in comps:
        widths.setdefault(group(c), []).append(c.bytes / c.rows if c.rows > 0 else 0.0)
    col: dict[tuple[tuple[str, bool], str], int] = {}
    for g in sorted(widths):
        w = [v for v in widths[g] if v > 0]
        terms = ("launch", "row", "bytes") if w and len(w) == len(widths[g]) and max(w) > WIDTH_SPREAD * min(w) \
            else ("launch", "bytes")
        for term in terms:
            col[g, term] = len(col)
    a = np.zeros((len(measurements), len(col)))
    b = np.ones(len(measurements))
    for r, m in enumerate(measurements):
        for c in m.components:
            g = group(c)
            a[r, col[g, "launch"]] += c.launches / m.us
            a[r, col[g, "bytes"]] += c.bytes / 1e3 / m.us  # unknown: 1 / bandwidth in GB/s
            if (g, "row") in col:
                a[r, col[g, "row"]] += c.rows / m.us
    x, _ = nnls(a, b)

    def line(g: tuple[str, bool]) -> KernelTiming:
        inv_bw = x[col[g, "bytes"]]
        bw = 1.0 / inv_bw if inv_bw > 1.0 / 1e9 else 1e9
        row = float(x[col[g, "row"]]) if (g, "row") in col else 0.0
        return KernelTiming(float(x[col[g, "launch"]]), float(max(bw, MIN_BANDWIDTH_GBPS)), row)

    kernels = dict(base.kernels)
    for key in sorted({c.key for c in comps}):
        kernels[key] = replace(line((key, False)), past_l2=line((key, True)) if key in split else None)
    return replace(base, kernels=kernels)


@dataclass(frozen=True)
class Moved:
    """How ``move_unmeasured`` moved the base profile's other lines: the median ratio of the measured keys'
    fitted bandwidth to the base's, within L2 (their main lines) and past it (where both have a line), and
    the keys moved."""

    within_l2: float
    past_l2: float
    keys: tuple[str, ...]


def move_unmeasured(base: Profile, fitted: Profile, measured: Iterable[str]) -> tuple[Profile, Moved]:
    """``fitted`` (``base`` refitted on a table of another card measuring keys ``measured``) with every other
    line of ``base`` moved to that card: its bandwidths scaled by the median ratio of the measured keys'
    fitted bandwidth to ``base``'s in the same regime, its latency and row term kept; the profile's
    default bandwidth (a streaming figure) scaled as the lines past L2."""
    measured = set(measured)
    common = sorted(k for k in measured if k in base.kernels)
    if not common:
        raise ValueError("the table measures no key the base profile has a line for: nothing says how lines move")
    within = statistics.median(fitted.kernels[k].bandwidth_gbps / base.kernels[k].bandwidth_gbps for k in common)
    both = [(f, b) for f, b in ((fitted.kernels[k].past_l2, base.kernels[k].past_l2) for k in common)
            if f is not None and b is not None]
    past = statistics.median(f.bandwidth_gbps / b.bandwidth_gbps for f, b in both) if both else within

    def moved(line: KernelTiming, ratio: float) -> KernelTiming:
        return replace(line, bandwidth_gbps=line.bandwidth_gbps * ratio,
                       past_l2=None if line.past_l2 is None else moved(line.past_l2, past))

    rest = tuple(sorted(set(base.kernels) - measured))
    kernels = {**fitted.kernels, **{k: moved(base.kernels[k], within) for k in rest}}
    return replace(fitted, kernels=kernels, bandwidth_gbps=base.bandwidth_gbps * past), Moved(within, past, rest)


@dataclass(frozen=True)
class Fit:
    median_rel_error: float
    max_rel_error: float
    spearman: float
    n: int


def evaluate(measurements: Iterable[Measurement], profile: Profile) -> Fit:
    ms = list(measurements)
    pred = np.array([m.predict(profile) for m in ms])
    meas = np.array([m.us for m in ms])
    rel = np.abs(pred - meas) / meas
    rho = float(spearmanr(pred, meas).statistic) if len(ms) > 2 else float("nan")
    return Fit(float(np.median(rel)), float(rel.max()), rho, len(ms))


def plot(measurements: Sequence[Measurement], profile: Profile, path: str | Path, title: str = "") -> None:
    """Predicted against measured time, log-log, one colour per first component key."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    keys = sorted({m.components[0].key for m in measurements})
    for k in keys:
        pts = [(m.us, m.predict(profile)) for m in measurements if m.components[0].key == k]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, label=k)
    lo = min(min(m.us, m.predict(profile)) for m in measurements) * 0.8
    hi = max(max(m.us, m.predict(profile)) for m in measurements) * 1.2
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="measured (µs)", ylabel="predicted (µs)", title=title or profile.name)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
