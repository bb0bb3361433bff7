"""The pass on saved graphs whose residual stream stays in fp32 from layer to layer, as torch <= 2.11 on CUDA
leaves a model compiled whole.

    python -m benchmarks.residual_chain GRAPH.json ... [--profile h100] [--rounds 2]

Inductor up to 2.11 drops ``float32(bf16(s))`` as a pointless conversion (``joint_graph.pointless_convert``;
2.13, this CPU's, keeps a narrowing one), so in a stack of decoder layers each residual add reads the previous
layer's fp32 sum. ``lift-add-rms-norm-fp32-residual`` puts the rounding back one layer at a time: its match needs
the previous sum in the form its own firing there makes. Here each graph (a CPU capture, e.g.
``benchmarks/gpu/capture_graphs.py --layers N``, where the round trips stay) has them dropped as 2.11 drops them
(``drop_round_trips``), then one ``EqSatPass`` runs it ``--rounds`` times; printed for the last round: the
round trips dropped, the pass's and saturation's ms, saturation's iterations and why it stopped, the fused
kernels. A graph a device compile saved (``probe_model_compile.py --save``) has none left to drop.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.fx as fx

import eqsat
from eqsat import graphfile
from eqsat.kernels.torch_ops import register_vllm_standins

CONVERT = torch.ops.prims.convert_element_type.default
NARROW = (torch.bfloat16, torch.float16)


def drop_round_trips(graph: fx.Graph) -> int:
    """Replace each ``convert(convert(s, 16-bit), float32)`` of an fp32 ``s`` by ``s``, then drop dead nodes;
    how many were replaced."""
    dropped = 0
    for node in list(graph.nodes):
        inner = node.args[0] if node.target is CONVERT and node.args[1] == torch.float32 else None
        if not isinstance(inner, fx.Node) or inner.target is not CONVERT or inner.args[1] not in NARROW:
            continue
        src = inner.args[0]
        if isinstance(src, fx.Node) and getattr(src.meta.get("val"), "dtype", None) == torch.float32:
            node.replace_all_uses_with(src)
            graph.erase_node(node)
            dropped += 1
    graph.eliminate_dead_code()
    return dropped


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graphs", nargs="+", type=Path)
    ap.add_argument("--profile", default="h100")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    register_vllm_standins(torch.float8_e4m3fn)
    p = eqsat.EqSatPass(profile=args.profile, sizes=(1, 8, 64, 256, 1024, 4096, 8192))
    for path in args.graphs:
        for _ in range(args.rounds):
            gm = graphfile.load(path)
            dropped = drop_round_trips(gm.graph)
            start = time.perf_counter()
            p(gm.graph)
            ms = (time.perf_counter() - start) * 1e3
        rep = p.last_report
        assert rep is not None
        kernels = " ".join(f"{k}x{v}" for k, v in sorted(rep.kernels_chosen.items()))
        print(f"{path.stem:24s} {len(gm.graph.nodes):5d} nodes after, {dropped:3d} round trips dropped: pass {ms:6.0f} ms, "
              f"saturate {rep.stage_ms.get('saturate', 0.0):5.0f} ms, {rep.iterations} iterations ({rep.stop_reason}) | "
              f"{kernels}", flush=True)


if __name__ == "__main__":
    main()
