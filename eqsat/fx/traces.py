"""The ATen traces of the functions emit inlines (an Inductor twin's composition of references,
``eqsat.kernels.inductor``), kept so that a function is traced once per key, not once per site.

Tracing with ``make_fx`` over fake tensors with a symbolic token dim costs tens of milliseconds, and so
does running the trace's nodes again in another fake mode (each op a miss of torch's fake-tensor cache,
its sizes and strides worked out symbolically). :class:`Traces` keeps, per fake mode (held weakly) and
per key (the function, its other arguments, and its tensor inputs' sizes, strides, offset, dtype and
device, symbolic ones as expressions), the traced graph with its fake values: a later call in that mode
(the next layer) copies it and shares those values.

Across fake modes (each compile has its own, with its own shape environment) an entry is kept as the
graph without values and, per node, what its value is made from (``_Recipe``), and serves a mode whose
key is the same and whose symbols in it have the same value ranges, if tracing left its shape
environment as it found it (no guard, runtime assert, replacement or range added): the traced code then
decided nothing on a symbol's value, so every value is a function of the key. The values are then made
as torch's fake-tensor cache makes an op's outputs on a hit (a meta tensor of the recorded layout made
inside the mode's kernel context, set on its argument's storage for a view op, wrapped as a
``FakeTensor``), their sizes as ``OutputLayouts`` makes a kernel's (``sizes_in``). A trace is shared only
if it holds placeholders, ATen calls, ``getitem`` and its output alone, and every value is a plain strided
tensor without grad and no view (as ``make_fx`` records values: each its own snapshot), or a tuple of
them, a SymInt of the key's symbols, or a constant.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy
import torch
import torch.fx as fx
from torch._inductor.decomposition import select_decomp_table
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.shape_prop import TensorMetadata

from eqsat.fx.output_layouts import env_state, key_symbols, meta_kernel, sizes_in, tensor_layout

_DERIVED = ("val", "tensor_meta")  # what a node's meta holds of its fake value


def trace_key(fn: Callable[..., object], args: Sequence[object], fakes: Sequence[torch.Tensor]) -> tuple | None:
    """What a trace of ``fn`` depends on: the function, its arguments that are no graph values (by
    ``repr``), its tensor inputs' layouts; None when that is not hashable."""
    key = (fn, repr([a for a in args if not isinstance(a, fx.Node)]), tuple(tensor_layout(v) for v in fakes))
    try:
        hash(key)
    except TypeError:
        return None
    return key


@dataclass(frozen=True)
class _Recipe:
    """What one node's value is made from in another mode. ``kind``: ``"tensor"`` (a tensor of ``layout``,
    on the storage of the value of node ``base``, an index into the graph's nodes, if it is set: a view
    op's), ``"tensors"`` (a tuple of fresh tensors, ``layout`` one per item), ``"getitem"`` (item
    ``layout`` of node ``base``'s value), ``"sym"`` (the SymInt of expression ``layout``), ``"const"``
    (``layout`` itself), ``"input"`` (the next input)."""

    kind: str
    layout: object = None
    base: int = -1
    memory_format: tuple = ()  # a tensor's, as the trace's tensor meta gave it: () where the node had none


def _plain(v: object) -> bool:
    return isinstance(v, FakeTensor) and not v.requires_grad and v.layout == torch.strided


def _recipes(graph: fx.Graph, symbols: set[sympy.Symbol]) -> tuple[_Recipe, ...] | None:
    """Each node's recipe, or None when some value cannot be made from one (see the module docstring)."""
    nodes = list(graph.nodes)
    index = {n: k for k, n in enumerate(nodes)}
    out: list[_Recipe] = []
    for n in nodes:
        v = n.meta.get("val")
        if n.op == "placeholder":
            out.append(_Recipe("input"))
        elif n.op == "output":
            out.append(_Recipe("const"))
        elif n.op != "call_function":
            return None
        elif n.target is operator.getitem:
            out.append(_Recipe("getitem", n.args[1], index[n.args[0]]))  # type: ignore[index]
        elif not isinstance(n.target, torch._ops.OpOverload):
            return None
        elif isinstance(v, torch.SymInt):
            if not v.node.expr.free_symbols <= symbols:
                return None
            out.append(_Recipe("sym", v.node.expr))
        elif isinstance(v, (int, float, bool)) or v is None:
            out.append(_Recipe("const", v))
        elif isinstance(v, (tuple, list)):
            if not all(_plain(t) and not t._is_view() for t in v):
                return None
            out.append(_Recipe("tensors", tuple(tensor_layout(t) for t in v)))
        elif not _plain(v) or v._is_view():  # type: ignore[union-attr]
            return None
        else:
            storage = v.untyped_storage()._cdata  # type: ignore[union-attr]
            bases = [index[a] for a in n.all_input_nodes if isinstance(b := a.meta.get("val"), torch.Tensor)
                     and b.untyped_storage()._cdata == storage]
            tm = n.meta.get("tensor_meta")
            if tm is not None and (tm.is_quantized or tm.requires_grad):
                return None
            out.append(_Recipe("tensor", tensor_layout(v), bases[0] if bases else -1,  # type: ignore[arg-type]
                               () if tm is None else (tm.memory_format,)))
        layouts = out[-1].layout if out[-1].kind == "tensors" else (out[-1].layout,) if out[-1].kind == "tensor" else ()
        if any(not sympy.sympify(d).free_symbols <= symbols for x in layouts for d in (*x[0], *x[1], x[2])):
            return None  # a size of its own (unbacked): fresh every call
    return tuple(out)


class Traces:
    """The traces emit has made (the module docstring says what is kept and when it is reused);
    ``graph`` gives a function's trace with fake values in the caller's mode either way."""

    def __init__(self) -> None:
        self._seen: weakref.WeakKeyDictionary[FakeTensorMode, dict[tuple, fx.Graph]] = weakref.WeakKeyDictionary()
        # (key, the ranges of its symbols) -> the graph without values, and each node's recipe
        self._shared: dict[tuple, tuple[fx.Graph, tuple[_Recipe, ...]]] = {}
        self.made = self.remade = 0  # traces made; shared traces whose values were made in another mode

    def graph(self, fn: Callable[..., object], args: Sequence[object], fakes: Sequence[torch.Tensor],
              mode: FakeTensorMode | None) -> fx.Graph:
        """``fn(*args)``, its ``fx.Node`` arguments standing for ``fakes`` (in order), as an ATen graph
        (one placeholder per node argument, in order) whose nodes carry fake values in ``mode`` (None: a
        fake mode of the trace's own, nothing kept)."""
        key = trace_key(fn, args, fakes) if mode is not None else None
        if mode is None or key is None:
            return self._trace(fn, args, fakes, mode)
        seen = self._seen.setdefault(mode, {})
        got = seen.get(key)
        if got is not None:
            return got
        symbols = tuple(sorted(key_symbols(key, set()), key=str))
        before = env_state(mode.shape_env, symbols)
        shared = (key, before[2:]) if before is not None else None
        if shared is not None and shared in self._shared:
            got = seen[key] = _remade(*self._shared[shared], fakes, mode)
            self.remade += 1
            return got
        got = seen[key] = self._trace(fn, args, fakes, mode)
        if shared is not None and env_state(mode.shape_env, symbols) == before:
            recipes = _recipes(got, set(symbols))
            if recipes is not None:
                self._shared[shared] = (_without_values(got), recipes)
        return got

    def _trace(self, fn: Callable[..., object], args: Sequence[object], fakes: Sequence[torch.Tensor],
               mode: FakeTensorMode | None) -> fx.Graph:
        def on_tensors(*tensors: torch.Tensor) -> object:
            it = iter(tensors)
            return fn(*(next(it) if isinstance(a, fx.Node) else a for a in args))

        decompositions = select_decomp_table()  # the ATen a post-grad graph holds (no _to_copy)
        self.made += 1
        if mode is None:
            return make_fx(on_tensors, decompositions, tracing_mode="fake")(*fakes).graph
        with mode:
            return make_fx(on_tensors, decompositions, tracing_mode="real")(*fakes).graph


def _remade(bare: fx.Graph, recipes: tuple[_Recipe, ...], fakes: Sequence[torch.Tensor], mode: FakeTensorMode) -> fx.Graph:
    """A copy of ``bare`` whose nodes' values are made in ``mode`` from ``recipes``, ``fakes`` its inputs."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(bare, {}))
    sym = sizes_in(mode, fakes)
    inputs = iter(fakes)
    vals: list[object] = []
    with meta_kernel(mode):
        for r in recipes:
            if r.kind == "input":
                val: object = next(inputs)
            elif r.kind == "getitem":
                val = vals[r.base][r.layout]  # type: ignore[index]
            elif r.kind == "sym":
                val = sym(r.layout)
            elif r.kind == "const":
                val = r.layout
            else:
                made = []
                for x in (r.layout if r.kind == "tensors" else (r.layout,)):  # type: ignore[union-attr]
                    shape, stride, offset = tuple(map(sym, x[0])), tuple(map(sym, x[1])), sym(x[2])
                    meta = torch.empty_strided(shape, stride, dtype=x[3], device="meta")
                    if r.base >= 0:  # a view op's value: its argument's storage (as torch's cache makes it)
                        meta.set_(vals[r.base].untyped_storage(), offset, shape, stride)  # type: ignore[union-attr]
                    made.append(FakeTensor(mode, meta, x[4]))
                val = tuple(made) if r.kind == "tensors" else made[0]
            vals.append(val)
    for node, val, r in zip(graph.nodes, vals, recipes, strict=True):
        if node.op != "output":
            node.meta["val"] = val
            if r.memory_format:  # what shape_prop would extract, its contiguity read off the trace
                node.meta["tensor_meta"] = TensorMetadata(val.shape, val.dtype, False, val.stride(),  # type: ignore[union-attr]
                                                          r.memory_format[0], False, {})
    return graph


def _without_values(graph: fx.Graph) -> fx.Graph:
    """A copy of ``graph`` whose nodes hold no fake values (which would keep their mode alive)."""
    bare = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    bare.output(bare.graph_copy(graph, env))
    for new in env.values():
        new.meta = {k: v for k, v in new.meta.items() if k not in _DERIVED}
    return bare
