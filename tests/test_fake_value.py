"""``eqsat.fx.fake_value``: each cheap way of making a new node's fake value gives the value torch gives
when the node's op runs plainly under the graph's fake mode (sizes, strides, storage offset, dtype,
device, a fake tensor of that mode, and for a view its storage and base), with the token dim
symbolic; the kernels' output layouts are reused only where that is sound."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import eqsat
from benchmarks.graphs import models
from eqsat.engine.engine import Engine
from eqsat.fx import fake_value as fake_value_module
from eqsat.fx import new_values
from eqsat.fx.capture import copy_graph
from eqsat.fx.fake_value import (
    contiguous_view,
    fake_value,
    is_contiguous,
    row_major_strides,
    slice_view,
    strided_view,
)

aten = torch.ops.aten


def _same(got: object, want: object) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)
        return
    assert isinstance(got, FakeTensor) and isinstance(want, FakeTensor) and got.fake_mode is want.fake_mode
    assert (got.shape, got.stride(), got.storage_offset(), got.dtype, got.device, got.requires_grad) == \
           (want.shape, want.stride(), want.storage_offset(), want.dtype, want.device, want.requires_grad)
    assert got._is_view() == want._is_view()
    if want._is_view():
        assert got._base is want._base
        assert got.untyped_storage()._cdata == want.untyped_storage()._cdata


@pytest.fixture
def mode() -> FakeTensorMode:
    return FakeTensorMode(shape_env=ShapeEnv())


_SOURCES = itertools.count()  # a source name per call: an id() is reused once a temporary tensor is freed


def _symbolic(mode: FakeTensorMode, t: torch.Tensor) -> torch.Tensor:
    """``t`` as a fake tensor whose first dim is a symbol (the token dim) of its own: a fresh source each call
    (a shape env makes one symbol per source, and names it by the source)."""
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] + [DimDynamic.STATIC] * (t.dim() - 1))
    return mode.from_tensor(t, source=ConstantSource(f"t{next(_SOURCES)}"), symbolic_context=ctx)


@pytest.mark.parametrize("shape", [(6,), (6, 1), (2, 3), (1, 6), (2, 1, 3), (4, 8, 1), (3, 0, 2), ()])
def test_row_major_strides_are_torchs(shape):
    assert row_major_strides(torch.Size(shape)) == torch.empty(shape).stride()


def test_row_major_strides_leave_a_symbolic_inner_dim_to_torch(mode):
    x = _symbolic(mode, torch.empty(4, 8))
    assert row_major_strides(x.shape) == (8, 1)  # the outermost dim never enters a stride
    assert row_major_strides(x.t().shape) is None


@pytest.mark.parametrize("src, dst", [((32, 128), (-1, 4096)), ((4096,), (-1, 32, 128)), ((32, 128), (-1, 1, 4096)),
                                      ((8, 1), (-1, 8))])
def test_a_reshape_of_a_contiguous_tensor_is_its_view(mode, src, dst):
    x = _symbolic(mode, torch.empty(5, *src))
    with mode:
        want = aten.reshape.default(x, [dst[0], *dst[1:]])
        known = torch.empty_like(want)  # what the original graph's value of the class would be
        base_offset = aten.slice.Tensor(x, 0, 1)  # a contiguous view at a nonzero offset
        want_offset = aten.reshape.default(base_offset, list(dst))
    _same(contiguous_view(x, known, mode), want)  # the cheap way is taken, and is torch's value
    _same(fake_value(aten.reshape.default, (x, list(dst)), {}, mode, known), want)
    _same(contiguous_view(base_offset, torch.empty_like(want_offset), mode), want_offset)
    _same(fake_value(aten.reshape.default, (base_offset, list(dst)), {}, mode, torch.empty_like(want_offset)),
          want_offset)


@pytest.mark.parametrize("view", [lambda x: x, lambda x: x.t(), lambda x: x[:, :3], lambda x: x[1:], lambda x: x[:, None],
                                  lambda x: x.view(-1, 2, 4)[:, :1], lambda x: x[:0], lambda x: x.unsqueeze(0).expand(2, -1, -1),
                                  lambda x: x.view(-1, 2, 4).permute(1, 0, 2), lambda x: x.view(-1, 2, 4).unsqueeze(0),
                                  lambda x: x.view(-1, 2, 4).permute(1, 0, 2).unsqueeze(1), lambda x: x[:, 2:6]])
def test_contiguity_read_off_strides_is_torchs(mode, view):
    x = _symbolic(mode, torch.empty(4, 8))
    with mode:
        v = view(x)
        kernel_out = x.new_empty(v.shape)  # a value torch has just made: its contiguity not worked out yet
    assert is_contiguous(v) == v.is_contiguous()
    assert is_contiguous(kernel_out) and kernel_out.is_contiguous()


def test_row_major_strides_spare_torch_the_contiguity_check():
    class Value:  # a tensor whose contiguity torch would have to work out
        shape, strides = (5, 32, 128), (4096, 128, 1)

        def stride(self) -> tuple[int, ...]:
            return self.strides

        def is_contiguous(self) -> bool:
            raise AssertionError("row-major strides are contiguous by definition")

    assert is_contiguous(Value())  # type: ignore[arg-type]


def test_symbolic_strides_decide_contiguity_without_torch(mode):
    """Strides equal to the row-major ones as expressions are contiguous; strides that are not
    contiguous at the hints are not: neither asks torch (its answer costs symbolic-int operations)."""
    s = _symbolic(mode, torch.empty(4, 8)).shape[0]

    class Value:
        def __init__(self, shape: tuple, strides: tuple) -> None:
            self.shape, self.strides = shape, strides

        def stride(self) -> tuple:
            return self.strides

        def is_contiguous(self) -> bool:
            raise AssertionError("decided without torch")

    assert is_contiguous(Value((1, 16, s, 192), (3072 * s, 192 * s, 192, 1)))  # type: ignore[arg-type]
    assert not is_contiguous(Value((16, s, 128), (256, 4096, 1)))  # type: ignore[arg-type]
    assert not is_contiguous(Value((s, 64), (2112, 1)))  # type: ignore[arg-type]


def test_a_reshape_of_a_strided_tensor_runs_the_op(mode):
    x = _symbolic(mode, torch.empty(4, 8)).t()  # not contiguous: reshape copies
    with mode:
        want = aten.reshape.default(x, [-1])
    assert contiguous_view(x, want, mode) is None
    got = fake_value(aten.reshape.default, (x, [-1]), {}, mode, want)
    assert not got._is_view() and got.shape == want.shape and got.stride() == want.stride()


def test_other_views_and_ops_run_the_op(mode):
    x = _symbolic(mode, torch.empty(4, 2944))
    with mode:
        want_slice = aten.slice.Tensor(x, -1, 0, 2880)
        want_add = aten.add.Tensor(x, x)
    _same(fake_value(aten.slice.Tensor, (x, -1, 0, 2880), {}, mode), want_slice)
    got = fake_value(aten.add.Tensor, (x, x), {}, mode)
    assert (got.shape, got.stride(), got._is_view()) == (want_add.shape, want_add.stride(), False)
    assert mode.cache_enabled  # the cache is back on after a view


@pytest.mark.parametrize("build", [models.qwen3_next_gated_norm, models.qwen3_next_gated_norm_3d,
                                   models.gpt_oss_router_pad])
def test_every_value_emit_computes_is_the_one_torch_computes(build, monkeypatch):
    """On the benchmark graphs where emit computes values (a kernel, reshapes of its outputs, a
    slice of a padded output), each equals the value the node's op gives run plainly under the
    graph's fake mode."""
    models.register_ops()
    made: list[tuple[object, tuple, dict, FakeTensorMode, object]] = []

    def observed(target, args, kwargs, mode, known=None, layouts=None):  # noqa: ANN001, ANN202
        got = fake_value(target, args, kwargs, mode, known, layouts)
        made.append((target, args, kwargs, mode, got))
        return got

    monkeypatch.setattr(new_values, "fake_value", observed)
    gm = build()
    engine = Engine(eqsat.Options().catalog, eqsat.Options().active_rules())
    # gpt-oss's router GEMM (a vLLM op) copies the kernel's strided slice: on the mi300x profile's uncalibrated
    # lines that costs what the kernel saves, on the H200's measured ones the kernel still wins at M = 8
    options = {"profile": "h200", "sizes": 8} if build is models.gpt_oss_router_pad else {"profile": "mi300x"}
    for _ in range(2):  # the second graph's kernel is made from the layouts the first one's left
        assert eqsat.optimize(copy_graph(gm), strict=True, recompile=False, engine=engine, **options).changed
    assert any(isinstance(t, torch._ops.OpOverload) and t.is_view for t, *_ in made)
    for target, args, kwargs, fmode, got in made:
        with fmode:
            want = target(*args, **kwargs)
        _same(got, want)


def test_a_strided_view_is_the_one_the_fake_mode_makes(mode):
    x = _symbolic(mode, torch.empty(4, 2944))
    with mode:
        want = aten.as_strided.default(x, (x.shape[0], 2880), (2944, 1), 64)
        want_of_view = aten.as_strided.default(want, (x.shape[0], 100), (2944, 1), 128)
    _same(strided_view(x, (x.shape[0], 2880), (2944, 1), 64, mode), want)
    _same(strided_view(want, (x.shape[0], 100), (2944, 1), 128, mode), want_of_view)  # the base is x's


@pytest.mark.parametrize("shape, args, kwargs", [
    ((4, 2944), (-1, 0, 2880), {"step": 1}), ((4, 2944), (1, 64, 2944), {}), ((4, 2944), (1, 64), {}),
    ((4, 6, 8), (1, 2, 5), {}), ((4, 6, 8), (-2, None, 3), {}), ((4, 2944), (-1, 2944, 2944), {}),
])
def test_a_slice_window_is_the_slice_torch_makes(mode, shape, args, kwargs):
    x = _symbolic(mode, torch.empty(*shape))
    with mode:
        base = aten.slice.Tensor(x, -1, 0)  # a view: the window's base is x
        want = aten.slice.Tensor(base, *args, **kwargs)
    known = torch.empty_like(want)  # the original graph's value of the class
    _same(slice_view((base, *args), kwargs, known, mode), want)
    _same(fake_value(aten.slice.Tensor, (base, *args), kwargs, mode, known), want)


@pytest.mark.parametrize("args, kwargs", [((1, 0, 8, 2), {}), ((1, 0, 8), {"step": 2}), ((1, -8, None), {}),
                                          ((0, 1, 3), {}), ((5, 0, 3), {})])
def test_other_slices_are_left_to_torch(mode, args, kwargs):
    """A step other than 1, a negative start, a slice of the symbolic dim, a dim out of range: no window."""
    x = _symbolic(mode, torch.empty(4, 16))
    with mode:
        want = aten.slice.Tensor(x, *args, **kwargs) if args[0] < 2 else None
    known = torch.empty_like(want) if want is not None else torch.empty_like(x)
    assert slice_view((x, *args), kwargs, known, mode) is None
    if want is not None:
        _same(fake_value(aten.slice.Tensor, (x, *args), kwargs, mode, known), want)


def test_a_slice_whose_known_shape_disagrees_is_left_to_torch(mode):
    x = _symbolic(mode, torch.empty(4, 16))
    with mode:
        other = torch.empty(3, 8)
        too_long = torch.empty_like(aten.slice.Tensor(x, 1, 0, 16))
    assert slice_view((x, 1, 0, 8), {}, other, mode) is None  # another outer size
    assert slice_view((x, 1, 4, 16), {}, too_long, mode) is None  # 4 + 16 runs past the end


def test_a_strided_view_skips_the_fake_modes_dispatch(mode, monkeypatch):
    x = _symbolic(mode, torch.empty(4, 2944))

    def refused(*args: object, **kwargs: object) -> object:
        raise AssertionError("went through the fake mode's dispatch")

    monkeypatch.setattr(FakeTensorMode, "dispatch", refused)
    assert strided_view(x, (x.shape[0], 2880), (2944, 1), 0, mode).shape[1] == 2880


def test_a_window_torch_cannot_check_is_left_to_the_fake_mode(mode, monkeypatch):
    """Should the meta kernel fail (an unbacked size it cannot bound), the op runs through the fake mode."""
    x = _symbolic(mode, torch.empty(4, 2944))
    with mode:
        want = aten.slice.Tensor(x, -1, 0, 2880)

    def undecidable(*args: object, **kwargs: object) -> object:
        raise RuntimeError("could not guard on data-dependent expression")

    monkeypatch.setattr(fake_value_module, "meta_kernel", undecidable)
    assert strided_view(x, (x.shape[0], 2880), (2944, 1), 0, mode) is None
    _same(fake_value(aten.slice.Tensor, (x, -1, 0, 2880), {}, mode, torch.empty_like(want)), want)
