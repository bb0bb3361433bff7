"""Shared test helpers: vLLM stand-ins registered once, symbolic tracing, random inputs."""

from __future__ import annotations

import torch

import eqsat  # noqa: F401  (registers the eqsat:: ops)
from eqsat.capture import trace_tokens
from eqsat.vocab.vllm_standins import register_vllm_standins

register_vllm_standins()

FP8 = torch.float8_e4m3fnuz
BF16 = torch.bfloat16


trace = trace_tokens


def targets(gm: torch.fx.GraphModule) -> list[str]:
    """The call targets of a graph, getitems excluded, sorted: a structural fingerprint."""
    return sorted(str(n.target) for n in gm.graph.nodes
                  if n.op == "call_function" and getattr(n.target, "__name__", "") != "getitem")


def rand(*shape: int, dtype: torch.dtype = BF16, seed: int | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed if seed is not None else hash(shape) % 2**31)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype)
