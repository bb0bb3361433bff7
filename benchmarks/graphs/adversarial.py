"""Adversarial graphs for saturation and extraction budgets.

- ``chains(n)``: n independent rms_norm -> fp8 group quant chains (distinct weights);
- ``reshape_chain(n)``: a value reshaped n times back and forth, then rms_norm -> group quant;
- ``fan_out(k)``: one rms_norm output read by k identical group quants (computed once after CSE).

Built by tracing one small piece and replicating its nodes (meta shared), so that a 2,000-chain
graph takes seconds, not the minutes ``make_fx`` would need.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from eqsat.fx.capture import trace_tokens
from eqsat.kernels.torch_ops import register_vllm_standins

BF16 = torch.bfloat16


def _ops():
    register_vllm_standins()
    return torch.ops.vllm, torch.ops.vllm_ir


def replicate(gm: fx.GraphModule, copies: int) -> fx.GraphModule:
    """A graph holding ``copies`` disjoint copies of ``gm`` (own placeholders), outputs concatenated."""
    graph = fx.Graph()
    outputs: list[object] = []
    for i in range(copies):
        val_map: dict[fx.Node, fx.Node] = {}
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                val_map[node] = graph.placeholder(f"{node.name}_{i}")
                val_map[node].meta = dict(node.meta)
            elif node.op == "output":
                outs = node.args[0]
                outputs.extend(fx.map_arg(outs if isinstance(outs, (list, tuple)) else [outs], val_map.__getitem__))
            else:
                val_map[node] = graph.node_copy(node, val_map.__getitem__)
    graph.output(tuple(outputs))
    return fx.GraphModule(gm, graph)


def chains(n: int, hidden: int = 512) -> fx.GraphModule:
    vllm, vir = _ops()
    one = trace_tokens(lambda x, w: vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x, w, 1e-6), 128),
                       torch.zeros(8, hidden, dtype=BF16), torch.ones(hidden, dtype=BF16))
    return replicate(one, n)


def reshape_chain(n: int, hidden: int = 512) -> fx.GraphModule:
    vllm, vir = _ops()

    def f(x, w):
        for i in range(n):
            x = x.reshape(-1, 8, hidden // 8) if i % 2 == 0 else x.reshape(-1, hidden)
        return vllm.rocm_aiter_group_fp8_quant(vir.rms_norm(x.reshape(-1, hidden), w, 1e-6), 128)

    return trace_tokens(f, torch.zeros(8, hidden, dtype=BF16), torch.ones(hidden, dtype=BF16))


def fan_out(k: int, hidden: int = 512) -> fx.GraphModule:
    vllm, vir = _ops()

    def f(x, w):
        y = vir.rms_norm(x, w, 1e-6)
        return [t for _ in range(k) for t in vllm.rocm_aiter_group_fp8_quant(y, 128)]

    return trace_tokens(f, torch.zeros(8, hidden, dtype=BF16), torch.ones(hidden, dtype=BF16))
