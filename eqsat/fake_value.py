"""The fake value (``node.meta["val"]``) of a node emit writes, computed as cheaply as torch allows.

With the token dim symbolic, every FakeTensor torch makes costs tens of symbolic-int operations
(15-30 us each), and torch's fake mode adds its general dispatch (flattening the arguments, its
cache key, device checks: ~0.2 ms a call) on top, so how a value is made matters more than anything
else emit does:
- a **view that is a strided window of its base** is made as ``as_strided`` through
  :class:`_Strided`, which runs only the view's meta kernel inside and wraps the result as a
  FakeTensor of the graph's mode (~0.06 against ~0.25 ms through the fake mode); the dispatcher
  records it as a view of its base outside, as it does for the fake mode's own results. Two views
  are such windows: a **row-major reshape of a contiguous tensor** (eqsat's one view form,
  ``Reshape``) whose shape is known (an original FX value of its e-class has it) is the base's
  contiguous view at the same storage offset (``reshape`` itself decomposes to ``view`` and works
  its strides out symbolically, ~0.8 ms); a **slice** of step 1 along a dim of concrete size, whose
  shape is known, is the base's strides at the start's offset;
- **other view ops** run with torch's fake-tensor cache off (``disable_fake_tensor_cache``): a cache
  hit rebuilds a view with ``empty_strided`` + ``set_``, which costs twice what working the view
  out does (~1.0 against ~0.45 ms);
- a **custom op** (a kernel) that neither mutates nor aliases runs under the graph's fake mode the
  first time it meets inputs of given layouts; :class:`OutputLayouts` remembers its outputs'
  layouts, and the next call on inputs of the same layouts in the same fake mode (the next layer,
  the next graph of one compile) gets fresh outputs of those layouts made directly (~0.3 ms an
  output, where torch's dispatch, cache hit included, costs ~1.2-1.5 ms for a two-output kernel);
- **anything else** (an ATen op) runs under the graph's fake mode as it is; there the cache helps.
Each is the value torch itself would give the node: same sizes, strides, storage offset, dtype,
device, and for a view the same storage and base (``tests/test_fake_value.py`` checks them against
the op run plainly). Without a fake mode (a graph traced without one) the op runs as it is.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch
from torch._subclasses.fake_tensor import (
    FakeTensor,
    FakeTensorMode,
    disable_fake_tensor_cache,
    in_kernel_invocation_manager,
)
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def row_major_strides(sizes: torch.Size | tuple[object, ...]) -> tuple[int, ...] | None:
    """The strides a contiguous tensor of ``sizes`` has (a size-0 or size-1 dim counts as 1, as
    torch counts it), or None when a dim inside the outermost is symbolic (then only torch works
    them out)."""
    strides, step = [], 1
    for d in reversed(tuple(sizes)[1:]):
        if not isinstance(d, int):
            return None
        strides.append(step)
        step *= max(d, 1)
    return (step, *reversed(strides)) if sizes else ()


def is_contiguous(t: torch.Tensor) -> bool:
    """``t.is_contiguous()``, read off concrete strides where they are row-major: on a value torch has
    just made (a kernel's output) with the token dim symbolic, torch works contiguity out in ~10
    symbolic-int operations (~0.15 ms); strides equal to the row-major ones are contiguous by definition."""
    strides = t.stride()
    if all(isinstance(s, int) for s in strides) and tuple(strides) == row_major_strides(t.shape):
        return True
    return bool(t.is_contiguous())


@contextmanager
def _in_kernel(mode: FakeTensorMode) -> Iterator[None]:
    """Where torch's fake mode runs a meta kernel: fake tensors dispatch as their meta tensors, and a
    symbolic comparison inside adds no guard."""
    with in_kernel_invocation_manager(mode), mode.shape_env.suppress_guards() if mode.shape_env else nullcontext():
        yield


class _Strided(TorchDispatchMode):
    """Dispatches ``as_strided`` on a fake tensor as the fake mode would, without its general
    dispatch: the meta kernel runs on the meta tensor and the result is wrapped as a FakeTensor of
    ``mode`` on the base's device. Any other op is handed to ``mode``."""

    def __init__(self, mode: FakeTensorMode) -> None:
        super().__init__()
        self.mode = mode

    def __torch_dispatch__(self, func: Callable[..., object], types: Sequence[type], args: Sequence[object] = (),
                           kwargs: dict | None = None) -> object:
        kwargs = kwargs or {}
        base = args[0] if args else None
        if isinstance(base, FakeTensor) and base.fake_mode is self.mode:
            if func is torch.ops.prim.device.default:  # asked while the result is wrapped
                return base.fake_device
            if func is aten.as_strided.default:
                with _in_kernel(self.mode):
                    out = func(*args, **kwargs)
                return FakeTensor(self.mode, out, base.fake_device)
        with self.mode:
            return func(*args, **kwargs)


def strided_view(base: torch.Tensor, sizes: Sequence[object], strides: Sequence[object], offset: object,
                 mode: FakeTensorMode) -> torch.Tensor:
    """``base.as_strided(sizes, strides, offset)`` as the fake mode makes it, at a quarter of the cost."""
    with _Strided(mode):
        return aten.as_strided.default(base, sizes, strides, offset)


def contiguous_view(base: object, known: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor | None:
    """``base`` (a fake value) reshaped row-major to ``known``'s shape, made as ``as_strided``; None
    when ``base`` is not a contiguous tensor or a dim inside the outermost is symbolic (then the
    reshape must run)."""
    strides = row_major_strides(known.shape)
    if not isinstance(base, FakeTensor) or strides is None or not is_contiguous(base):
        return None
    return strided_view(base, known.shape, strides, base.storage_offset(), mode)


def _expr(d: object) -> object:
    """A size, stride or offset as a hashable value: a symbolic one as its expression."""
    return d.node.expr if isinstance(d, torch.SymInt) else d


def slice_view(base: object, args: tuple, kwargs: dict, known: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor | None:
    """``aten.slice.Tensor(base, *args[1:], **kwargs)`` made as ``as_strided`` when it is a window:
    step 1, a start of 0 or more, concrete strides, and ``known`` (the slice's value in the original
    graph) that agrees with ``base`` outside the sliced dim and fits inside it; None otherwise."""
    params = dict(zip(("dim", "start", "end", "step"), args[1:], strict=False)) | kwargs
    dim, start = params.get("dim", 0), params.get("start", None) or 0
    if not isinstance(base, FakeTensor) or params.get("step", 1) != 1 or not isinstance(start, int) or start < 0:
        return None
    strides = base.stride()
    if not isinstance(dim, int) or not -base.dim() <= dim < base.dim() or known.dim() != base.dim() or \
            not all(isinstance(s, int) for s in strides):
        return None
    dim %= base.dim()
    size, whole = known.shape[dim], base.shape[dim]
    if not (isinstance(size, int) and isinstance(whole, int) and start + size <= whole):
        return None
    if any(_expr(a) != _expr(b) for k, (a, b) in enumerate(zip(known.shape, base.shape, strict=True)) if k != dim):
        return None
    return strided_view(base, known.shape, strides, base.storage_offset() + start * strides[dim], mode)


_Layout = tuple[tuple[object, ...], tuple[object, ...], object, torch.dtype, torch.device, object]
_Entry = tuple[type | None, tuple[_Layout, ...]]


def _layout(t: object) -> _Layout | None:
    """What a fresh output's value is made from (sizes, strides, offset, dtype, device, storage bytes),
    or None for anything but a plain fake tensor (a view, a tensor needing grad, a non-strided one)."""
    if not isinstance(t, FakeTensor) or t._is_view() or t.requires_grad or t.layout != torch.strided:
        return None
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.fake_device,
            _expr(t.untyped_storage().nbytes()))


def _keyed(layout: _Layout | None) -> tuple | None:
    """``layout`` with its symbolic values as expressions, to compare by value."""
    return None if layout is None else tuple(tuple(map(_expr, x)) if isinstance(x, tuple) else _expr(x) for x in layout)


class OutputLayouts:
    """The output layouts of the custom ops emit has run, per fake mode (held weakly) and per inputs'
    layouts and other arguments (see the module docstring). An entry is kept only for an op that
    neither mutates nor aliases, whose every output is a plain fake tensor without symbols of its own
    (an unbacked size must be fresh each call), and whose outputs made again from their layouts match
    the ones torch made; otherwise the op runs under the fake mode every time."""

    def __init__(self) -> None:
        # mode -> key -> (tuple or list for a multi-output op, None for one tensor; the layouts), or
        # None when the op's value cannot be made from layouts
        self._seen: weakref.WeakKeyDictionary[FakeTensorMode, dict[tuple, _Entry | None]] = weakref.WeakKeyDictionary()

    @staticmethod
    def _key(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple | None:
        def arg(a: object) -> object:
            if isinstance(a, torch.Tensor):
                return (tuple(map(_expr, a.shape)), tuple(map(_expr, a.stride())), _expr(a.storage_offset()), a.dtype,
                        a.device)
            if isinstance(a, (list, tuple)):
                return type(a), tuple(map(arg, a))
            return type(a), a  # 1, 1.0 and True are equal keys: the type tells them apart

        key = (op, tuple(map(arg, args)), tuple(sorted((k, arg(v)) for k, v in kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def value(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict, mode: FakeTensorMode) -> object:
        key = self._key(op, args, kwargs)
        seen = self._seen.setdefault(mode, {})
        entry = seen.get(key) if key is not None else None
        if entry is not None:
            return self._made(entry, mode)
        with mode:
            out = op(*args, **kwargs)
        if key is not None and key not in seen:
            seen[key] = self._reusable(op, args, out, mode)
        return out

    @staticmethod
    def _made(entry: _Entry, mode: FakeTensorMode) -> object:
        """Fresh fake outputs of ``entry``'s layouts, as torch's fake-tensor cache makes them on a hit."""
        kind, layouts = entry
        with _in_kernel(mode):
            metas = [torch.empty_strided(s, st, dtype=dt, device="meta") for s, st, _, dt, _, _ in layouts]
        made = [FakeTensor(mode, m, layout[4]) for m, layout in zip(metas, layouts, strict=True)]
        return made[0] if kind is None else kind(made)

    def _reusable(self, op: torch._ops.OpOverload, args: tuple, out: object, mode: FakeTensorMode) -> _Entry | None:
        schema = op._schema
        if any(a.alias_info is not None for a in (*schema.arguments, *schema.returns)):
            return None
        kind = type(out) if type(out) in (tuple, list) else None
        got = [_layout(t) for t in (out if kind is not None else (out,))]  # type: ignore[union-attr]
        if any(x is None or _expr(x[2]) != 0 for x in got):
            return None
        layouts: tuple[_Layout, ...] = tuple(got)  # type: ignore[arg-type]
        inputs: set[object] = set()
        for a in args:
            if isinstance(a, torch.Tensor):
                for d in (*a.shape, *a.stride()):
                    if isinstance(d, torch.SymInt):
                        inputs |= d.node.expr.free_symbols
        own = {s for x in layouts for d in (*x[0], *x[1]) if isinstance(d, torch.SymInt) for s in d.node.expr.free_symbols}
        if not own <= inputs:
            return None
        entry = (kind, layouts)
        again = self._made(entry, mode)
        if [_keyed(_layout(t)) for t in (again if kind is not None else (again,))] != list(map(_keyed, layouts)):
            return None
        return entry


def fake_value(target: object, args: tuple, kwargs: dict, mode: FakeTensorMode | None,
               known: torch.Tensor | None = None, layouts: OutputLayouts | None = None) -> object:
    """The value ``target(*args, **kwargs)`` has on fake inputs (``args`` hold fake values already);
    ``known``: a value of the same e-class from the original graph, whose shape the result has;
    ``layouts``: the output layouts kept for custom ops (a pass keeps one across graphs)."""
    if mode is None:
        return target(*args, **kwargs)  # type: ignore[operator]
    if known is not None and target is aten.reshape.default and not kwargs:
        view = contiguous_view(args[0], known, mode)
        if view is not None:
            return view
    if known is not None and target is aten.slice.Tensor:
        view = slice_view(args[0], args, kwargs, known, mode)
        if view is not None:
            return view
    if isinstance(target, torch._ops.OpOverload):
        if layouts is not None and target.namespace not in ("aten", "prims", "prim") and not target.is_view:
            return layouts.value(target, args, kwargs, mode)
        # a reshape left to run keeps the cache: uncached, its decomposition costs more than a hit
        if target.is_view and target is not aten.reshape.default:
            with mode, disable_fake_tensor_cache(mode):
                return target(*args, **kwargs)
    with mode:
        return target(*args, **kwargs)  # type: ignore[operator]
