"""Capture the graph ``torch.compile(dynamic=True)`` hands a post-grad pass, without compiling it.

``post_grad_graph(f, specs)`` wraps ``f`` in a module whose weights are parameters (static
shapes, as a model's are) and whose activations are inputs with every dim but the first marked
static (the token dim is the one symbol, as vLLM marks it). Python floats such as eps stay
constants, as a model's module attributes do; ``dynamic=True`` alone would make ``f``'s closure
floats graph inputs. It runs ``torch.compile(dynamic=True)`` on CPU with a custom post-grad pass
that copies the graph and stops Inductor there (nothing is code-generated or run, so weights and
activations are never read), and returns the copy: what vLLM's passes and eqsat see inside
Inductor (decompositions, functionalization with ``auto_functionalized`` v1 as vLLM configures
it, views as reshapes, Inductor's own post-grad patterns applied, mutated inputs copied back at
the end, one ``SymInt`` placeholder per symbol). Placeholders are renamed to ``f``'s parameter
names (the symbol's to ``tokens``) and put in ``f``'s order, the symbol first.

Each capture resets TorchDynamo (``torch._dynamo.reset``): captures of one module class would
otherwise pile up as recompilations of one frame and hit Dynamo's cache limit.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence

import torch
import torch.fx as fx
from torch._inductor.compile_fx import compile_fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from eqsat.fx.capture import copy_graph

Spec = tuple[tuple[int, ...], torch.dtype, bool]  # shape, dtype, whether a token dim leads the shape


class _Captured(Exception):
    """Stops Inductor once the post-grad graph is copied."""


class _Grab(CustomGraphPass):
    def __init__(self) -> None:
        self.graph: fx.Graph | None = None

    def __call__(self, graph: fx.Graph) -> None:
        self.graph = copy_graph(graph).graph
        raise _Captured

    def uuid(self) -> None:
        return None


class _Model(torch.nn.Module):
    """``f`` with its weight arguments as parameters and its token arguments as inputs."""

    def __init__(self, f: Callable[..., object], tensors: Sequence[torch.Tensor], tokens: Sequence[bool]) -> None:
        super().__init__()
        self.f, self.tokens = f, tuple(tokens)
        for i, (t, is_tok) in enumerate(zip(tensors, tokens, strict=True)):
            if not is_tok:
                self.register_parameter(f"w{i}", torch.nn.Parameter(t, requires_grad=False))

    def forward(self, *activations: torch.Tensor) -> object:
        it = iter(activations)
        return self.f(*(next(it) if is_tok else getattr(self, f"w{i}") for i, is_tok in enumerate(self.tokens)))


def post_grad_graph(f: Callable[..., object], specs: Sequence[Spec], tokens_hint: int) -> fx.GraphModule:
    """The post-grad graph of ``f`` over ``specs`` (see the module docstring); the token dim's
    example size is ``tokens_hint``."""
    names = list(inspect.signature(f).parameters)
    if len(names) != len(specs):
        raise ValueError(f"{len(specs)} specs for {len(names)} parameters {names}")
    tensors = [torch.empty((tokens_hint, *shape) if is_tok else shape, dtype=dt) for shape, dt, is_tok in specs]
    model = _Model(f, tensors, [is_tok for _, _, is_tok in specs])
    activations = [t for t, (_, _, is_tok) in zip(tensors, specs, strict=True) if is_tok]
    grab, inputs = _Grab(), []

    def backend(gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., object]:
        inputs.extend(n.name for n in gm.graph.nodes if n.op == "placeholder")  # AOT keeps their order
        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    for t in activations:  # the token dim is the one symbol, as vLLM marks it
        for d in range(1, t.dim()):
            torch._dynamo.mark_static(t, d)
    with torch._inductor.config.patch(post_grad_custom_post_pass=grab, enable_auto_functionalized_v2=False,
                                      fx_graph_cache=False), torch._dynamo.config.patch(specialize_float=True):
        try:
            torch.compile(model, dynamic=True, backend=backend)(*activations)
        except Exception:
            if grab.graph is None:
                raise
    torch._dynamo.reset()
    if grab.graph is None:
        raise RuntimeError("torch.compile ran no post-grad pass on the graph")
    tokens = [i for i, (_, _, is_tok) in enumerate(specs) if is_tok]
    return _renamed(grab.graph, [_argument(name, tokens) for name in inputs], names)


def _argument(dynamo_name: str, tokens: list[int]) -> int | None:
    """The index into ``f``'s parameters of a Dynamo graph input (``None``: a symbol); Dynamo
    names a parameter ``l_self_parameters_w<i>_`` and an input ``l_activations_<k>_``."""
    if m := re.fullmatch(r"l_self_parameters_w(\d+)_", dynamo_name):
        return int(m[1])
    if m := re.fullmatch(r"l_activations_(\d+)_", dynamo_name):
        return tokens[int(m[1])]
    if re.fullmatch(r"s\d+", dynamo_name):
        return None
    raise RuntimeError(f"cannot tell which argument Dynamo's graph input {dynamo_name!r} is")


def _renamed(graph: fx.Graph, arguments: list[int | None], names: list[str]) -> fx.GraphModule:
    """``graph`` with its placeholders (``arguments[j]``: the parameter index of the j-th, ``None``
    for a symbol) named as ``f``'s parameters and ordered as they are, the symbol first as ``tokens``;
    a parameter the graph does not read has no placeholder."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(arguments):
        raise RuntimeError(f"{len(placeholders)} post-grad inputs for {len(arguments)} Dynamo graph inputs")
    symbols = [p for p, a in zip(placeholders, arguments, strict=True) if a is None]
    out = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for k, p in enumerate(symbols):
        env[p] = out.placeholder("tokens" if len(symbols) == 1 else f"tokens_{k}")
    for p, a in sorted(((p, a) for p, a in zip(placeholders, arguments, strict=True) if a is not None),
                       key=lambda pa: pa[1]):
        env[p] = out.placeholder(names[a])
    for p in placeholders:
        env[p].meta = dict(p.meta)
    for node in graph.nodes:
        if node.op != "placeholder":
            env[node] = out.node_copy(node, env.__getitem__)
    return fx.GraphModule(torch.nn.Module(), out)
