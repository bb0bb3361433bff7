"""Calibration: fit a device profile's per-kernel lines to measured kernel times.

A measurement is a time in µs for a sum of kernel calls, each call a (calibration key, bytes,
launches) component, so a row can be one kernel (``fused``) or several run back to back (an
``unfused`` row can be an rms_norm kernel plus a quant kernel). The
model per key is ``launches * launch_us + bytes / bandwidth``; both are linear in the unknowns
``launch_us`` and ``1/bandwidth``, so all keys are fitted at once by non-negative least squares on
relative errors (every row weighs the same whether it takes 2 µs or 200 µs).

Table format (CSV, one row per measured kernel): ``key,M,N,G,dtype,device,us,bytes,launches``
(extra columns are ignored). ``fit`` returns a new :class:`~eqsat.cost.roofline.Profile`; ``evaluate``
reports median relative error and Spearman rank correlation of predicted against measured time.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import nnls
from scipy.stats import spearmanr

from eqsat.core.spec import Traffic
from eqsat.cost.roofline import KernelTiming, Profile

MIN_BANDWIDTH_GBPS = 1.0


@dataclass(frozen=True)
class Component:
    key: str
    bytes: float
    launches: int = 1


@dataclass(frozen=True)
class Measurement:
    components: tuple[Component, ...]
    us: float
    label: str = ""

    def predict(self, profile: Profile) -> float:
        return sum(profile.time_us(Traffic(c.bytes, 0, c.launches), c.key) for c in self.components)


def read_table(path: str | Path) -> list[Measurement]:
    """Measurements from a calibration CSV (one kernel per row); rows with check=fail are skipped."""
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("check", "") == "fail" or not row.get("us"):
                continue
            comp = Component(row["key"], float(row["bytes"]), int(float(row.get("launches") or 1)))
            out.append(Measurement((comp,), float(row["us"]), f"{row['key']} M={row.get('M')} N={row.get('N')}"))
    if not out:
        raise ValueError(f"{path}: no usable measurements (need columns key, us, bytes)")
    return out


def fit(measurements: Sequence[Measurement], base: Profile) -> Profile:
    """``base`` with a fitted (latency, bandwidth) for every key the measurements mention."""
    keys = sorted({c.key for m in measurements for c in m.components})
    col = {k: i for i, k in enumerate(keys)}
    a = np.zeros((len(measurements), 2 * len(keys)))
    b = np.ones(len(measurements))
    for r, m in enumerate(measurements):
        for c in m.components:
            a[r, 2 * col[c.key]] += c.launches / m.us
            a[r, 2 * col[c.key] + 1] += c.bytes / 1e3 / m.us  # unknown: 1 / bandwidth in GB/s
    x, _ = nnls(a, b)
    kernels = dict(base.kernels)
    for k, i in col.items():
        inv_bw = x[2 * i + 1]
        bw = 1.0 / inv_bw if inv_bw > 1.0 / 1e9 else 1e9
        kernels[k] = KernelTiming(launch_us=float(x[2 * i]), bandwidth_gbps=float(max(bw, MIN_BANDWIDTH_GBPS)))
    return replace(base, kernels=kernels)


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
