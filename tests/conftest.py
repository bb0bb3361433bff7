"""Shared test helpers: vLLM stand-ins registered once, symbolic tracing, random inputs."""

from __future__ import annotations

import operator

import torch

import eqsat  # noqa: F401  (registers the eqsat:: ops)
from eqsat.fx.capture import trace_tokens
from eqsat.kernels.torch_ops import register_vllm_standins

# vLLM's platform fp8 for the stand-ins: e4m3fnuz (MI300X), as the suite's expectations are written; on a
# CUDA GPU e4m3fn, the only fp8 AITER's Triton kernels make there (``pytest -m gpu`` on the device)
FP8 = torch.float8_e4m3fn if torch.cuda.is_available() and torch.version.hip is None else torch.float8_e4m3fnuz
register_vllm_standins(FP8)
BF16 = torch.bfloat16


trace = trace_tokens


@torch.library.custom_op("eqsat_test::scaled_gemm", mutates_args=())
def scaled_gemm(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A GEMM of group-quantized rows as a model calls one (an opaque op reading q and its scales): the
    dequantized rows times a fixed 64-column ones matrix."""
    g = q.shape[-1] // scale.shape[-1]
    x = (q.float().unflatten(-1, (scale.shape[-1], g)) * scale.unsqueeze(-1)).flatten(-2)
    return (x @ x.new_ones(x.shape[-1], 64)).to(torch.bfloat16)


@scaled_gemm.register_fake
def _(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.new_empty((*q.shape[:-1], 64), dtype=torch.bfloat16)


def targets(gm: torch.fx.GraphModule) -> list[str]:
    """The call targets of a graph, getitems excluded, sorted: a structural fingerprint."""
    return sorted(str(n.target) for n in gm.graph.nodes
                  if n.op == "call_function" and getattr(n.target, "__name__", "") != "getitem")


def rand(*shape: int, dtype: torch.dtype = BF16, seed: int | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed if seed is not None else hash(shape) % 2**31)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype)


_VIEWS = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.squeeze.dim",
          "aten.squeeze.dims", "aten.squeeze.default", "aten.unsqueeze.default"}


def _dims(shape) -> tuple:
    return tuple(d if isinstance(d, int) else "s" for d in shape)


def structure(gm: torch.fx.GraphModule) -> list[str]:
    """The graph as the expressions its outputs compute, one line per call reached from the outputs in
    the order a walk from them meets it: ``%k = target(args; kwargs)`` with placeholders as ``in<i>``
    (symbol placeholders ``sym``), constants as written (eps, G, dtypes, flags), a ``getitem`` as
    ``%k[i]`` and every view op as ``reshape(x, <its result shape>)`` (symbolic dims ``s``). Two graphs
    with equal structures call the same ops on the same arguments, wired the same way, whatever the
    order or names of their nodes."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    tensors = [p for p in placeholders if isinstance(p.meta.get("val"), torch.Tensor)]
    ids: dict[torch.fx.Node, str] = {p: f"in{k}" for k, p in enumerate(tensors)}
    ids.update({p: "sym" for p in placeholders if p not in tensors})
    lines: list[str] = []

    def arg(a: object) -> str:
        if isinstance(a, torch.fx.Node):
            return ref(a)
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(map(arg, a)) + "]"
        return repr(a)

    def ref(n: torch.fx.Node) -> str:
        got = ids.get(n)
        if got is not None:
            return got
        target = str(n.target)
        if n.target is operator.getitem:
            text = f"{ref(n.args[0])}[{n.args[1]}]"
        elif target in _VIEWS:
            text = f"reshape({ref(n.args[0])}, {_dims(n.meta['val'].shape)})"
        elif target == "aten.sym_size.int":
            text = f"size({ref(n.args[0])}, {n.args[1]})"
        elif isinstance(n.target, torch._ops.OpOverload):  # every schema argument by name, defaults filled in
            given = dict(zip((a.name for a in n.target._schema.arguments), n.args, strict=False)) | dict(n.kwargs)
            parts = [f"{a.name}={arg(given.get(a.name, a.default_value))}"
                     for a in n.target._schema.arguments if a.name in given or a.has_default_value()]
            text = f"{target}({', '.join(parts)})"
        else:
            kwargs = "; " + ", ".join(f"{k}={arg(v)}" for k, v in sorted(n.kwargs.items())) if n.kwargs else ""
            text = f"{target}({', '.join(map(arg, n.args))}{kwargs})"
        ids[n] = f"%{len(lines)}"
        lines.append(f"{ids[n]} = {text}")
        return ids[n]

    out = gm.graph.output_node()
    lines.append("return " + arg(out.args[0]))
    return lines


def assert_same_structure(got: torch.fx.GraphModule, want: torch.fx.GraphModule) -> None:
    """``got`` has ``want``'s :func:`structure`; the failure lists both."""
    g, w = structure(got), structure(want)
    assert g == w, "\n".join(["got:", *g, "want:", *w])
