"""Capture a post-grad-like FX graph of a function: fake-tensor meta, one symbolic token dim.

``trace_tokens(f, *inputs)`` traces ``f`` with ``make_fx`` over fake tensors in which dim 0 of
every input of rank >= 2 is a symbolic token count (inputs with the same dim 0 share one symbol,
as in a vLLM or ``torch.compile(dynamic=True)`` graph) and every other dim is static. The result
carries ``node.meta["val"]`` on every node, as Inductor's post-grad graphs do; ``decompositions`` (e.g.
``core_aten_decompositions()``) is make_fx's decomposition table. ``copy_graph`` gives
a fresh module over a copy of a graph (meta dicts copied, fake values shared): one graph, many runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.fx as fx
from torch._dispatch.python import enable_python_dispatcher
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv


def trace_tokens(f: Callable[..., object], *inputs: torch.Tensor,
                 decompositions: Mapping[object, Callable[..., object]] | None = None) -> torch.fx.GraphModule:
    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    token_sizes = {t.shape[0] for t in inputs if t.dim() >= 2}
    tokens = {n: shape_env.create_symintnode(shape_env.create_symbol(n, ConstantSource(f"tokens{n}")), hint=n)
              for n in token_sizes}
    with mode, enable_python_dispatcher():  # SymInt-aware decompositions, as torch.compile traces: some C++
        # meta kernels (constant_pad_nd's) read sizes as ints and would specialize the token symbol
        fakes = [torch.empty_strided((tokens[t.shape[0]], *t.shape[1:]), t.stride(), dtype=t.dtype)
                 if t.dim() >= 2 else mode.from_tensor(t, static_shapes=True) for t in inputs]
        return make_fx(f, decomposition_table=decompositions, tracing_mode="real")(*fakes)


def copy_graph(graph_or_module: fx.Graph | fx.GraphModule) -> fx.GraphModule:
    """A fresh GraphModule over a copy of the graph (meta dicts copied, fake values shared)."""
    source = graph_or_module.graph if isinstance(graph_or_module, fx.GraphModule) else graph_or_module
    owner = graph_or_module if isinstance(graph_or_module, fx.GraphModule) else source.owning_module
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(source, env))
    for old, new in env.items():
        new.meta = dict(old.meta)
    return fx.GraphModule(owner or torch.nn.Module(), graph)
