"""The end-to-end benchmark's reports (``benchmarks/gpu/e2e.py``): from its rows (one per block, variant,
round and M, ``e2e.FIELDS``) and its per-variant compile records (``VariantStats``), the markdown file, the
compact table it logs and the plot. Over several rounds a cell is the median over the rounds, with the
rounds' range beside it."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_timing import log


@dataclass
class VariantStats:
    """One block and variant in one round: its compiles and their seconds, the pass's seconds, calls and
    stages, the kernels and ops it wrote, and the post-grad graphs after it."""

    block: str
    variant: str
    round: int = 0
    compiles: int = 0
    compile_s: float = 0.0
    backend_s: float = 0.0
    pass_s: float = 0.0
    pass_calls: int = 0
    pass_stages_ms: dict[str, float] = field(default_factory=dict)  # the calls' stages (Report.stage_ms), summed
    kernels: str = "-"
    eqsat_ops: str = "-"
    error: str = ""
    graphs: list[str] = field(default_factory=list)

    cold_s: float = math.nan  # the block's inductor variant's compile s (compiled first: the cold caches)

    @property
    def share(self) -> float:
        """The pass's time over this variant's own compile time (warm kernel caches after the first variant)."""
        return self.pass_s / self.compile_s if self.compile_s > 0 else math.nan

    @property
    def share_cold(self) -> float:
        """The pass's time over Inductor's own (cold) compile of the block: the model's compile time."""
        return self.pass_s / self.cold_s if self.cold_s > 0 else math.nan



# -- the tables and the plot --------------------------------------------------------------------------------------------------

def _by(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """(block, variant, M) -> its row; over several rounds, the last round's row with ``us`` and ``speedup``
    the medians over the rounds and ``spread`` the per-round speedups' range."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        if r["M"] != "" and r["us"] != "":
            groups.setdefault((r["block"], r["variant"], int(r["M"])), []).append(r)
    out = {}
    for key, rs in groups.items():
        row = dict(rs[-1])
        if len(rs) > 1:
            row["us"] = f"{statistics.median(float(r['us']) for r in rs):.2f}"
            sp = [float(r["speedup"]) for r in rs if r["speedup"] != ""]
            if sp:
                row["speedup"] = f"{statistics.median(sp):.3f}"
                row["spread"] = f"{min(sp):.3f}-{max(sp):.3f}"
        out[key] = row
    return out


def _range(values: Sequence[float] | None) -> str:
    """``values``' median and range, or "-" for none."""
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def markdown(rows: Sequence[dict[str, Any]], stats: Sequence[VariantStats], args: argparse.Namespace,
             env: list[str], total_s: float, setup: dict[str, float] | None = None) -> str:
    by = _by(rows)
    every = {(r["block"], r["variant"], int(r["M"])): r for r in rows if r["M"] != ""}  # error rows too
    aa: dict[tuple[str, int], list[float]] = {}  # (block, M) -> each round's A/A ratio (interleaved timing)
    for r in rows:
        if r.get("aa_ratio"):
            aa.setdefault((r["block"], int(r["M"])), []).append(float(r["aa_ratio"]))
    out = [f"# End-to-end blocks inside torch.compile ({args.tag})", "",
           "`python benchmarks/gpu/e2e.py " + " ".join(args.argv) + "`"
           f" — {'CPU dry run (tiny widths, wall clock: the times mean nothing)' if args.dry_run else 'CUDA graphs'};"
           f" compile {args.compile}; eqsat sizes {args.eqsat_sizes}; total {total_s:.0f} s.", "",
           *(f"- {e}" for e in env), ""]
    for block in args.blocks:
        ms = sorted({m for (b, _, m) in every if b == block})
        if not ms:
            continue
        out += [f"## {block}", "", "| M | " + " | ".join(f"{v} µs" for v in args.variants)
                + " | " + " | ".join(f"{v} x" for v in args.variants if v != "inductor")
                + " | eqsat predicted x (whole / region) | launches | checks | kernels (eqsat at M) |"
                + (" Inductor A/A (rounds' range) |" if aa else ""),
                "|---:|" + "---:|" * (2 * len(args.variants) - (1 if "inductor" in args.variants else 0))
                + "---|---|---|---|" + ("---|" if aa else "")]
        for m in ms:
            cells = [by.get((block, v, m), {}).get("us", "-") for v in args.variants]
            sp = [_speedup_cell(by.get((block, v, m), {})) for v in args.variants if v != "inductor"]
            e = by.get((block, "eqsat", m), {})
            pred = f"{e.get('pred_speedup_whole', '-') or '-'} / {e.get('pred_speedup_region', '-') or '-'}"
            launches = " / ".join(str(by.get((block, v, m), {}).get("launches", "") or "-") for v in args.variants)
            checks = " ".join(f"{v[:3]}:{every.get((block, v, m), {}).get('check', '-')}" for v in args.variants)
            out.append(f"| {m} | " + " | ".join(cells) + " | " + " | ".join(sp) + f" | {pred} | {launches} | "
                       f"{checks} | {e.get('kernels_at_M', '-') or '-'} |" + (f" {_range(aa.get((block, m)))} |" if aa else ""))
        out.append("")
    out += ["## Compile time and the pass's share", "",
            "Each variant's pass is made once per run and first runs on the warm-up graph (its one-off set-up: "
            + (", ".join(f"{v} {t:.2f} s" for v, t in (setup or {}).items()) or "-")
            + "); the times below are its calls on the blocks' graphs.", "",
            "| block | variant | round | compiles | compile s | pass s | pass / own compile | pass / Inductor's compile "
            "| fused kernels emitted | eqsat ops in the graphs |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for s in stats:
        out.append(f"| {s.block} | {s.variant} | {s.round + 1} | {s.compiles} | {s.compile_s:.2f} | {s.pass_s:.3f} | "
                   f"{_pct(s.share)} | {_pct(s.share_cold)} | {s.kernels} | {s.eqsat_ops}"
                   + (f" (error: {s.error})" if s.error else "") + " |")
    fails = [r for r in rows if r["check"] in ("FAIL", "error")]
    out += ["", f"Checks: {sum(r['check'] == 'ok' for r in rows)} ok, {len(fails)} failed or errored"
            f", {sum(r['check'] == 'skipped' for r in rows)} skipped."]
    out += [f"- {r['block']} {r['variant']} M={r['M']}: {r['check']} {r['detail']}" for r in fails]
    out += ["", "Speedups are against `inductor` at the same M" + (
        f" in the same round, the median over {args.rounds} rounds (each a fresh compile of every variant) with "
        "the rounds' range in brackets; µs the median over the rounds" if args.rounds > 1 else "") + ". Predicted: `eqsat.optimize` at sizes = M on the "
            "graph the pass saw; whole = t_inductor / (t_inductor - (before - after)).", ""]
    return "\n".join(out)


def _speedup_cell(row: dict[str, Any]) -> str:
    sp = row.get("speedup", "") or "-"
    return f"{sp} ({row['spread']})" if row.get("spread") else sp


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.2f}%"


def compact_table(rows: Sequence[dict[str, Any]], stats: Sequence[VariantStats]) -> str:
    by = _by(rows)
    blocks = list(dict.fromkeys(b for (b, _, _) in by))
    variants = list(dict.fromkeys(v for (_, v, _) in by))
    lines = [f"{'block':10s} {'M':>5s} " + " ".join(f"{v + ' us':>14s}" for v in variants)
             + " " + " ".join(f"{v[:6] + ' x':>9s}" for v in variants if v != "inductor") + f" {'pred x':>7s}  check"]
    for b in blocks:
        for m in sorted({m for (bb, _, m) in by if bb == b}):
            r = {v: by.get((b, v, m), {}) for v in variants}
            lines.append(f"{b:10s} {m:5d} " + " ".join(f"{r[v].get('us', '-'):>14s}" for v in variants) + " "
                         + " ".join(f"{r[v].get('speedup', '-') or '-':>9s}" for v in variants if v != "inductor")
                         + f" {r.get('eqsat', {}).get('pred_speedup_whole', '-') or '-':>7s}  "
                         + ",".join(r[v].get("check", "-") for v in variants))
    lines.append("")
    for s in stats:
        lines.append(f"{s.block:10s} {s.variant:11s} compiles {s.compiles} in {s.compile_s:7.2f} s; pass "
                     f"{s.pass_s * 1e3:7.1f} ms ({_pct(s.share)} of it, {_pct(s.share_cold)} of Inductor's)"
                     f" {s.kernels}; ops {s.eqsat_ops}" + (f" ERROR {s.error}" if s.error else ""))
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        log("matplotlib not available: no plot")
        return
    by = _by(rows)
    blocks = list(dict.fromkeys(b for (b, _, _) in by))
    if not blocks:
        return
    fig, axes = plt.subplots(1, len(blocks), figsize=(4.2 * len(blocks), 3.6), squeeze=False)
    for ax, b in zip(axes[0], blocks, strict=True):
        ax.axhline(1.0, color="gray", lw=1, label="inductor")
        for v, color in (("eqsat", "C0"), ("always_fuse", "C1")):
            pts = sorted((m, float(r["speedup"])) for (bb, vv, m), r in by.items() if bb == b and vv == v and r["speedup"])
            if pts:
                ax.plot(*zip(*pts, strict=True), "o-", color=color, label=v)
            if v == "eqsat":
                pred = sorted((m, float(r["pred_speedup_whole"])) for (bb, vv, m), r in by.items()
                              if bb == b and vv == v and r["pred_speedup_whole"])
                if pred:
                    ax.plot(*zip(*pred, strict=True), "x--", color=color, alpha=0.7, label="eqsat predicted")
        ax.set_xscale("log", base=2)
        ax.set_title(b)
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("speedup vs Inductor alone")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
