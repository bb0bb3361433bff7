"""Fusion discovery on the benchmark graphs: what each kernel site does, and the memory-bound chains
no catalog kernel covers, ranked by the saving one fused kernel would bring (``eqsat.tools.explain``).

    python -m benchmarks.discovery      # writes benchmarks/results/discovery.md
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.graphs import models
from eqsat.options import Options
from eqsat.tools import explain

OUT = Path(__file__).resolve().parent / "results" / "discovery.md"
GRAPHS = {
    "deepseek_v3 (1 layer)": lambda: models.deepseek_v3(1),
    "deepseek_v3.2 indexer": models.deepseek_v32_indexer,
    "qwen3_next gated norm": models.qwen3_next_gated_norm,
    "qwen3_next gated norm (3-D)": models.qwen3_next_gated_norm_3d,
    "llama fp8 static": models.llama_fp8_static,
    "llama fp8 per-token": models.llama_fp8_per_token,
    "gpt-oss router + pad": models.gpt_oss_router_pad,
}


def main() -> int:
    options = Options(profile="mi300x", sizes=256)
    lines = ["# Fusion discovery on the benchmark graphs", "",
             "Command: `python -m benchmarks.discovery`; profile mi300x, token dim bound to 256. Sites: every "
             "place a catalog kernel could apply (`eqsat explain`); chains: connected ATen ops in the "
             "extracted graph that no kernel covers, with the predicted saving of fusing each into one kernel "
             "that moves only its boundary traffic.", ""]
    for name, build in GRAPHS.items():
        gm = build()
        sites = explain.explain(gm, options)
        chains = explain.discover(gm, options)
        lines += [f"## {name}", "", "```", explain.table(sites) if sites else "no kernel site", "```", ""]
        if chains:
            lines += ["| chain | now µs | fused µs | saving µs | nodes |", "|---|---|---|---|---|"]
            lines += [f"| {' → '.join(c.ops)} | {c.cost_us:.2f} | {c.fused_us:.2f} | {c.saving_us:.2f} | "
                      f"{', '.join(c.nodes[:6])}{' …' if len(c.nodes) > 6 else ''} |" for c in chains[:8]]
        else:
            lines.append("No uncovered chain of two or more ATen ops.")
        lines.append("")
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
