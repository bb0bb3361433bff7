"""``eqsat.fx.output_layouts``: a kernel's fake outputs made from the layouts it gave before are the ones
torch makes; they are reused only for the same op, inputs' layouts, arguments and fake mode, and
never for an op with fresh (unbacked) output sizes or side effects."""

from __future__ import annotations

import gc

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from eqsat.fx.fake_value import fake_value
from eqsat.fx.output_layouts import OutputLayouts
from tests.test_fake_value import _same, _symbolic

aten = torch.ops.aten


@pytest.fixture
def mode() -> FakeTensorMode:
    return FakeTensorMode(shape_env=ShapeEnv())


_CALLS: list[str] = []


@torch.library.custom_op("eqsat_fake_test::pair", mutates_args=())
def _pair(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x.clone(), x.new_zeros(x.shape[0], x.shape[1] // group)


@_pair.register_fake
def _(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    _CALLS.append("pair")
    return torch.empty_like(x, dtype=torch.float8_e4m3fn), x.new_empty(x.shape[0], x.shape[1] // group,
                                                                     dtype=torch.float32)


@torch.library.custom_op("eqsat_fake_test::one", mutates_args=())
def _one(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_one.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    _CALLS.append("one")
    return torch.empty_like(x)


@torch.library.custom_op("eqsat_fake_test::nonzero", mutates_args=())
def _nonzero(x: torch.Tensor) -> torch.Tensor:
    return x.nonzero()


@_nonzero.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    _CALLS.append("nonzero")
    return x.new_empty(torch.library.get_ctx().new_dynamic_size(), x.dim(), dtype=torch.int64)


@torch.library.custom_op("eqsat_fake_test::scale_", mutates_args=("x",))
def _scale_(x: torch.Tensor) -> torch.Tensor:
    x.mul_(2)
    return x.new_ones(1)


@_scale_.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    _CALLS.append("scale_")
    return x.new_empty(1)


def test_a_kernels_outputs_are_made_from_the_layouts_it_gave_before(mode):
    layouts = OutputLayouts()
    x = _symbolic(mode, torch.empty(4, 256))
    pair, one = torch.ops.eqsat_fake_test.pair.default, torch.ops.eqsat_fake_test.one.default
    _CALLS.clear()
    first = fake_value(pair, (x, 128), {}, mode, layouts=layouts)
    second = fake_value(pair, (x, 128), {}, mode, layouts=layouts)
    assert _CALLS == ["pair"]  # torch ran the kernel's fake function once
    with mode:
        want = pair(x, 128)
    _same(second, want)
    _same(first, want)
    assert second[0].untyped_storage()._cdata != first[0].untyped_storage()._cdata  # fresh values
    fake_value(one, (x,), {}, mode, layouts=layouts)
    _same(fake_value(one, (x,), {}, mode, layouts=layouts), _run(mode, one, x))  # one output, not a tuple
    assert _CALLS.count("one") == 2  # the first call, and the reference just above


def test_outputs_at_hand_are_kept_and_only_the_others_made(mode):
    layouts = OutputLayouts()
    x = _symbolic(mode, torch.empty(4, 256))
    pair = torch.ops.eqsat_fake_test.pair.default
    want = _run(mode, pair, x, 128)
    _CALLS.clear()
    for _ in range(2):  # the kernel run, then a value made from its layouts
        got = layouts.value(pair, (x, 128), {}, mode, given=(want[0], None))
        assert got[0] is want[0]
        _same(got, want)
        assert got[1] is not want[1] and got[1].untyped_storage()._cdata != want[1].untyped_storage()._cdata
    assert _CALLS == ["pair"]


def _run(mode: FakeTensorMode, op: object, *args: object) -> object:
    with mode:
        return op(*args)  # type: ignore[operator]


def test_other_layouts_another_mode_or_other_arguments_run_the_kernel_again(mode):
    layouts = OutputLayouts()
    pair = torch.ops.eqsat_fake_test.pair.default
    x = _symbolic(mode, torch.empty(4, 256))
    y = _symbolic(mode, torch.empty(4, 256))  # another symbol for the token dim
    with mode:
        x_cols = aten.as_strided.default(x, x.shape, (1, x.shape[0]))  # x's shape, column-major
    other = FakeTensorMode(shape_env=ShapeEnv())
    z = _symbolic(other, torch.empty(4, 256))
    _CALLS.clear()
    calls = [((x, 128), mode), ((x, 64), mode), ((y, 128), mode), ((x_cols, 128), mode), ((z, 128), other),
             ((x, 128), mode), ((y, 128), mode), ((x_cols, 128), mode), ((z, 128), other)]
    for args, m in calls:
        _same(fake_value(pair, args, {}, m, layouts=layouts), _run(m, pair, *args))
    assert _CALLS.count("pair") == 5 + len(calls)  # five layouts met the first time, and every reference run


def test_kernels_with_fresh_sizes_or_side_effects_always_run(mode):
    """An unbacked output size must be a new symbol each call; a mutating op's value is not a
    function of its inputs' layouts alone."""
    layouts = OutputLayouts()
    x = _symbolic(mode, torch.empty(4, 8))
    _CALLS.clear()
    sizes = [fake_value(torch.ops.eqsat_fake_test.nonzero.default, (x,), {}, mode, layouts=layouts).shape[0]
             for _ in range(2)]
    assert _CALLS == ["nonzero", "nonzero"] and str(sizes[0]) != str(sizes[1])
    for _ in range(2):
        fake_value(torch.ops.eqsat_fake_test.scale_.default, (x,), {}, mode, layouts=layouts)
    assert _CALLS.count("scale_") == 2


def test_the_layouts_of_a_fake_mode_go_with_it():
    """An engine outlives compiles: what it keeps for one compile's fake mode must not keep that mode alive."""
    layouts = OutputLayouts()
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = _symbolic(mode, torch.empty(4, 256))
    fake_value(torch.ops.eqsat_fake_test.pair.default, (x, 128), {}, mode, layouts=layouts)
    assert len(layouts._seen) == 1
    del mode, x
    gc.collect()
    assert len(layouts._seen) == 0


def test_a_kernel_whose_layouts_cannot_be_checked_keeps_running(mode, monkeypatch):
    """Should remaking the outputs fail, the kernel's value still comes from torch, each time."""
    from eqsat.fx import output_layouts

    def failing(*args: object, **kwargs: object) -> object:
        raise RuntimeError("cannot remake")

    layouts = OutputLayouts()
    x = _symbolic(mode, torch.empty(4, 256))
    pair = torch.ops.eqsat_fake_test.pair.default
    monkeypatch.setattr(output_layouts.OutputLayouts, "_made", staticmethod(failing))
    _CALLS.clear()
    for _ in range(2):
        _same(fake_value(pair, (x, 128), {}, mode, layouts=layouts), _run(mode, pair, x, 128))
    assert _CALLS.count("pair") == 4  # two values and two references: nothing was kept


@torch.library.custom_op("eqsat_fake_test::branchy", mutates_args=())
def _branchy(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_branchy.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    _CALLS.append("branchy")
    rows = 1 if x.shape[0] > 16 else x.shape[0]  # a guard on the token dim: its answer holds in this env only
    return x.new_empty(rows, x.shape[1])


def _compile_env(t: torch.Tensor) -> tuple[FakeTensorMode, torch.Tensor]:
    """A fresh fake mode and ``t`` in it with its first dim symbolic, the symbol named as every compile of
    one program names it (the same source)."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] + [DimDynamic.STATIC] * (t.dim() - 1))
    return mode, mode.from_tensor(t, source=ConstantSource("tokens"), symbolic_context=ctx)


def test_another_compiles_kernel_of_the_same_layouts_is_made_in_its_own_shape_env():
    """Each compile has its own fake mode and shape environment: a kernel whose fake left the first one as
    it found it is not run again for the same layouts; its outputs are the ones torch makes in the new
    mode, their symbolic sizes of the new shape environment."""
    layouts = OutputLayouts()
    pair = torch.ops.eqsat_fake_test.pair.default
    (m1, x1), (m2, x2) = _compile_env(torch.empty(4, 256)), _compile_env(torch.empty(4, 256))
    assert str(x1.shape[0]) == str(x2.shape[0])
    _CALLS.clear()
    fake_value(pair, (x1, 128), {}, m1, layouts=layouts)
    got = fake_value(pair, (x2, 128), {}, m2, layouts=layouts)
    assert _CALLS == ["pair"]
    _same(got, _run(m2, pair, x2, 128))
    assert all(t.shape[0].node.shape_env is m2.shape_env for t in got)


def test_a_kernel_whose_fake_guards_or_meets_other_ranges_runs_in_each_shape_env():
    """A fake that adds a guard decided its outputs on the hint of one compile; a symbol whose range
    another compile has narrowed may decide a fake otherwise: both run again."""
    layouts = OutputLayouts()
    branchy, pair = torch.ops.eqsat_fake_test.branchy.default, torch.ops.eqsat_fake_test.pair.default
    (m1, x1), (m2, x2) = _compile_env(torch.empty(4, 256)), _compile_env(torch.empty(32, 256))
    _CALLS.clear()
    fake_value(branchy, (x1,), {}, m1, layouts=layouts)
    got = fake_value(branchy, (x2,), {}, m2, layouts=layouts)
    assert _CALLS == ["branchy", "branchy"]
    assert got.shape[0] == 1  # the second compile's own answer (32 rows > 16), not the first's
    (m3, x3), (m4, x4) = _compile_env(torch.empty(4, 256)), _compile_env(torch.empty(4, 256))
    torch._check(x4.shape[0] >= 64 // 16)  # narrows the symbol's range in that compile's shape env
    _CALLS.clear()
    fake_value(pair, (x3, 128), {}, m3, layouts=layouts)
    fake_value(pair, (x4, 128), {}, m4, layouts=layouts)
    assert _CALLS == ["pair", "pair"]
