"""What an optimizer made of a model graph: where each fp8 activation a GEMM, attention or the graph
output reads comes from (``fusion_sites``), and which fused vLLM ops a graph holds (``fused_op``).

A *site* is ``"<consumer>.<k>"``, the k-th fp8 input of an opaque consumer; opaque consumers keep their
names through both optimizers, so the sites of two results of one graph compare. A site is *fused*
when a fused kernel produces it: an AITER op, or Inductor's native chain (eqsat's "leave it to
Inductor" rows); ``"unfused"`` when the unfused quant still does.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

UNFUSED = {"rocm_aiter_group_fp8_quant", "rocm_aiter_per_token_quant", "rocm_aiter_per_tensor_quant",
           "auto_functionalized"}
NOT_FUSED = UNFUSED | {"rocm_unquantized_gemm"}
VIEWS = (operator.getitem, torch.ops.aten.reshape.default, torch.ops.aten.view.default)


def _name(target: object) -> str:
    for attr in ("_opname", "_name", "__name__"):
        if isinstance(getattr(target, attr, None), str):
            return getattr(target, attr)
    return str(target)


def _label(node: fx.Node) -> str:
    while node.op == "call_function" and node.target in VIEWS:  # e.g. the gated op's q reshaped back
        node = node.args[0]
    if node.op != "call_function":
        return "input"
    name = _name(node.target)
    if name in UNFUSED:
        return "unfused"
    return fused_op(node) or "inductor native chain"


def fused_op(node: fx.Node) -> str | None:
    """The short name of a fused vLLM op node (``rmsnorm_fp8_group_quant``), else None."""
    name = _name(node.target)
    if node.op != "call_function" or getattr(node.target, "namespace", "") != "vllm" or name in NOT_FUSED:
        return None
    return name.removeprefix("rocm_aiter_")


def _is_fp8(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype in (torch.float8_e4m3fnuz, torch.float8_e4m3fn)


def fusion_sites(gm: fx.GraphModule) -> dict[str, str]:
    """``"<consumer>.<k>"`` -> what produces the k-th fp8 input of each opaque consumer (a GEMM or
    other ``eqsat_bench`` stand-in, ``rocm_unquantized_gemm``, the graph output). Opaque consumers
    keep their names through both optimizers, so sites of two results of one graph compare."""
    sites: dict[str, str] = {}
    for n in gm.graph.nodes:
        opaque = n.op == "call_function" and (getattr(n.target, "namespace", "") == "eqsat_bench"
                                              or _name(n.target) == "rocm_unquantized_gemm")
        if n.op == "output" or opaque:
            labels = [_label(a) for a in n.all_input_nodes if _is_fp8(a)]
            for k, label in enumerate(x for x in labels if x != "input"):  # fp8 weights are inputs
                sites[f"{n.name}.{k}"] = label
    return sites


def fused(sites: dict[str, str]) -> dict[str, str]:
    """The fused sites of ``sites``."""
    return {k: v for k, v in sites.items() if v != "unfused"}
