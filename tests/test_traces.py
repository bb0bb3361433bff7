"""``eqsat.fx.traces``: a function emit inlines is traced once per key; in another compile's fake mode its
values are made from what the trace recorded, and are the ones a fresh trace there gives (layouts, views
of the same bases, symbols of that shape environment); a trace that decided something on a symbol's value,
or meets other ranges, is made again."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.fx as fx
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import eqsat
from eqsat.fx.traces import Traces

IH = "IH_rms_gated_group_quant"
H, D = 4, 128


def _compile_env(heads: int = H, tokens: int = 8) -> tuple[FakeTensorMode, list[torch.Tensor]]:
    """A fresh fake mode (a compile's) and the twin's inputs in it: x and z rows (tokens x H, D) with the
    token count a symbol named as every compile of one program names it, and the weight (D,)."""
    mode = FakeTensorMode(shape_env=ShapeEnv())
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
    x, z = (mode.from_tensor(torch.empty(tokens, heads * D, dtype=torch.bfloat16), source=ConstantSource(f"in{k}"),
                             symbolic_context=ctx) for k in range(2))
    with mode:
        rows = [x.reshape(-1, D), z.reshape(x.shape[0] * heads, D)]
    return mode, [*rows, mode.from_tensor(torch.empty(D, dtype=torch.bfloat16), static_shapes=True)]


def _args(fakes: list[torch.Tensor]) -> list[object]:
    graph = fx.Graph()
    return [*(graph.placeholder(f"a{k}") for k in range(len(fakes))), 1e-6, 128, torch.float8_e4m3fn]


def _twin() -> object:
    return replace(next(r for r in eqsat.DEFAULT_CATALOG if r.name == IH).expand, heads=H)


def _same_values(got: fx.Graph, want: fx.Graph, mode: FakeTensorMode) -> None:
    """The same nodes, and the values emit copies (all but the placeholders') alike: layouts, tensor meta,
    symbols of ``mode``; and the same nodes' values share storage (a view op's with its argument's)."""
    g, w = list(got.nodes), list(want.nodes)
    assert [(n.op, n.target) for n in g] == [(n.op, n.target) for n in w]
    storage = {}
    for k, (a, b) in enumerate(zip(g, w, strict=True)):
        va, vb = a.meta.get("val"), b.meta.get("val")
        if a.op == "placeholder":
            storage[k] = (va.untyped_storage()._cdata, vb.untyped_storage()._cdata)
            continue
        if isinstance(vb, torch.SymInt):
            assert isinstance(va, torch.SymInt) and va.node.expr == vb.node.expr and va.node.shape_env is mode.shape_env
            continue
        assert isinstance(va, FakeTensor) == isinstance(vb, FakeTensor)
        if not isinstance(vb, FakeTensor):
            continue
        assert va.fake_mode is mode and vb.fake_mode is mode
        assert (va.shape, va.stride(), va.storage_offset(), va.dtype, va.device) == \
               (vb.shape, vb.stride(), vb.storage_offset(), vb.dtype, vb.device), a.name
        assert va._is_view() == vb._is_view(), a.name
        assert all(d.node.shape_env is mode.shape_env for d in va.shape if isinstance(d, torch.SymInt))
        storage[k] = (va.untyped_storage()._cdata, vb.untyped_storage()._cdata)
        assert a.meta["tensor_meta"] == b.meta["tensor_meta"]
    shared = {frozenset(k for k in storage if storage[k][side] == storage[j][side]) for j in storage for side in (0, 1)}
    assert len(shared) < len(storage)  # some share
    for j in storage:
        assert {k for k in storage if storage[k][0] == storage[j][0]} == {k for k in storage if storage[k][1] == storage[j][1]}


def test_a_trace_is_made_once_and_its_values_remade_in_another_compile():
    traces, twin = Traces(), _twin()
    m1, f1 = _compile_env()
    first = traces.graph(twin, _args(f1), f1, m1)
    assert traces.graph(twin, _args(f1), f1, m1) is first  # the next layer of the same compile
    m2, f2 = _compile_env()
    assert str(f2[0].shape[0]) == str(f1[0].shape[0])
    again = traces.graph(twin, _args(f2), f2, m2)
    assert (traces.made, traces.remade) == (1, 1)
    assert sum(isinstance(n.meta.get("val"), torch.SymInt) for n in again.nodes) >= 1  # reshapes read the token dim
    _same_values(again, Traces().graph(twin, _args(f2), f2, m2), m2)


def test_other_layouts_or_arguments_trace_again():
    traces, twin = Traces(), _twin()
    m1, f1 = _compile_env()
    traces.graph(twin, _args(f1), f1, m1)
    m2, f2 = _compile_env(heads=8)  # other layouts
    traces.graph(replace(twin, heads=8), _args(f2), f2, m2)
    args = _args(f1)
    args[-2] = 64  # another group size
    traces.graph(twin, args, f1, m1)
    assert (traces.made, traces.remade) == (3, 0)


def _branchy(x: torch.Tensor, z: torch.Tensor, w: torch.Tensor, eps: float, g: int, dt: torch.dtype) -> torch.Tensor:
    return x * 2 if x.shape[0] > 64 else x + 1  # a guard on the token dim: its answer holds in that env only


def test_a_trace_that_guards_or_meets_other_ranges_is_made_in_each_compile():
    traces = Traces()
    (m1, f1), (m2, f2) = _compile_env(tokens=8), _compile_env(tokens=32)
    traces.graph(_branchy, _args(f1), f1, m1)
    got = traces.graph(_branchy, _args(f2), f2, m2)
    assert (traces.made, traces.remade) == (2, 0)
    assert [n.target for n in got.nodes if n.op == "call_function"] == [torch.ops.aten.mul.Tensor]
    twin = _twin()
    (m3, f3), (m4, f4) = _compile_env(), _compile_env()
    torch._check(f4[0].shape[0] >= 16)  # narrows the symbol's range in that compile's shape env
    traces.graph(twin, _args(f3), f3, m3)
    traces.graph(twin, _args(f4), f4, m4)
    assert (traces.made, traces.remade) == (4, 0)
