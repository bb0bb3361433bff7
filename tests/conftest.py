"""Shared test helpers: vLLM stand-ins registered once, symbolic tracing, random inputs."""

from __future__ import annotations

import torch
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import eqsat  # noqa: F401  (registers the eqsat:: ops)
from eqsat.vocab.vllm_standins import register_vllm_standins

register_vllm_standins()

FP8 = torch.float8_e4m3fnuz
BF16 = torch.bfloat16


def trace(f, *inputs: torch.Tensor) -> torch.fx.GraphModule:
    """The FX graph of ``f`` with fake-tensor meta where dim 0 of every input of rank >= 2 is one
    shared symbolic token dim (as in a vLLM or ``torch.compile(dynamic=True)`` graph), the rest static."""
    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    token_sizes = {t.shape[0] for t in inputs if t.dim() >= 2}
    tokens = {n: shape_env.create_symintnode(shape_env.create_symbol(n, ConstantSource(f"tokens{n}")), hint=n)
              for n in token_sizes}
    with mode:
        fakes = [torch.empty_strided((tokens[t.shape[0]], *t.shape[1:]), t.stride(), dtype=t.dtype)
                 if t.dim() >= 2 else mode.from_tensor(t, static_shapes=True) for t in inputs]
        return make_fx(f, tracing_mode="real")(*fakes)


def targets(gm: torch.fx.GraphModule) -> list[str]:
    """The call targets of a graph, getitems excluded, sorted: a structural fingerprint."""
    return sorted(str(n.target) for n in gm.graph.nodes
                  if n.op == "call_function" and getattr(n.target, "__name__", "") != "getitem")


def rand(*shape: int, dtype: torch.dtype = BF16, seed: int | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed if seed is not None else hash(shape) % 2**31)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype)
