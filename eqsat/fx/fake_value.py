"""The fake value (``node.meta["val"]``) of a node emit writes, computed as cheaply as torch allows.

Symbolic FakeTensors and the fake mode's general dispatch are dear, so each kind is made its own way:
- a **strided window of its base** (a row-major ``Reshape`` of a contiguous tensor of known shape, or a
  step-1 slice along a dim of concrete size) is made as ``as_strided`` through :class:`_Strided`, which
  runs only the view's meta kernel and wraps the result as a FakeTensor of the graph's mode, recorded
  as a view of its base; should the meta kernel fail (an undecided bound), the view runs as below;
- **other view ops** run with torch's fake-tensor cache off (``disable_fake_tensor_cache``): a cache
  hit rebuilds a view with ``empty_strided`` + ``set_``, dearer than working the view out;
- a **custom op** runs under the fake mode the first time it meets given input layouts, then its
  outputs are made from the layouts it gave (``eqsat.fx.output_layouts``);
- **anything else** (an ATen op) runs under the graph's fake mode, where the cache helps.
Invariant: each is the value torch itself would give (sizes, strides, storage offset, dtype, device,
and for a view its storage and base; ``tests/test_fake_value.py``). Without a fake mode the op runs as is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, disable_fake_tensor_cache
from torch.utils._python_dispatch import TorchDispatchMode

from eqsat.fx.output_layouts import OutputLayouts, meta_kernel, sym_expr

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


def _hint(d: object) -> int | None:
    """A dim or stride at its hint (None for an unbacked SymInt)."""
    if isinstance(d, torch.SymInt):
        hint = d.node.hint
        return int(hint) if hint is not None else None
    return int(d)  # type: ignore[call-overload]


def _contiguous(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """torch's contiguity of concrete sizes and strides: each dim of size other than 1 steps by the
    product of the sizes after it; an empty tensor is contiguous."""
    if 0 in sizes:
        return True
    step = 1
    for size, stride in zip(reversed(sizes), reversed(strides), strict=True):
        if size != 1:
            if stride != step:
                return False
            step *= size
    return True


def is_contiguous(t: torch.Tensor, shape: torch.Size | None = None) -> bool:
    """``t.is_contiguous()``, decided without symbolic-int operations where that is exact: strides equal
    to the row-major ones (as expressions, a symbolic token dim included) are contiguous by definition;
    a value not contiguous at its sizes' hints is not contiguous (torch answers at the hints too, and
    guards on it: a False needs no guard here, as no rewrite relies on one). Otherwise torch decides.
    ``shape``: ``t.shape``, when the caller has it already."""
    sizes = t.shape if shape is None else shape
    strides = t.stride()
    if all(isinstance(s, int) for s in strides) and strides == row_major_strides(sizes):
        return True
    exprs = [sym_expr(d) for d in sizes]
    step: object = 1
    for size, stride in zip(reversed(exprs), reversed([sym_expr(s) for s in strides]), strict=True):
        if stride != step:
            break
        if not isinstance(size, int) or size > 1:  # row-major strides skip a dim of size 0 or 1
            step = step * size
    else:
        return True
    hinted = [_hint(d) for d in (*sizes, *strides)]
    if None not in hinted and not _contiguous(hinted[:len(sizes)], hinted[len(sizes):]):  # type: ignore[arg-type]
        return False
    return bool(t.is_contiguous())


class _Strided(TorchDispatchMode):
    """Dispatches ``as_strided`` on a fake tensor as the fake mode would, without its general
    dispatch: the meta kernel runs on the meta tensor and the result is wrapped as a FakeTensor of
    ``mode`` on the base's device. Any other op is handed to ``mode``."""

    def __init__(self, mode: FakeTensorMode) -> None:
        super().__init__()
        self.mode = mode

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: no Dynamo guard around each dispatch into this mode (``TorchDispatchMode`` wraps a
        mode's ``__torch_dispatch__`` in one that switches Dynamo's frame evaluation off and on
        again). This mode is entered only around one view inside emit, a compiler pass's code, never
        under a frame Dynamo compiles."""
        return False

    def __torch_dispatch__(self, func: Callable[..., object], types: Sequence[type], args: Sequence[object] = (),
                           kwargs: dict | None = None) -> object:
        kwargs = kwargs or {}
        base = args[0] if args else None
        if isinstance(base, FakeTensor) and base.fake_mode is self.mode:
            if func is torch.ops.prim.device.default:  # asked while the result is wrapped
                return base.fake_device
            if func is aten.as_strided.default:
                with meta_kernel(self.mode):
                    out = base.as_strided(*args[1:], **kwargs)  # the method: no boxed call
                return FakeTensor(self.mode, out, base.fake_device)
        with self.mode:
            return func(*args, **kwargs)


def strided_view(base: torch.Tensor, sizes: Sequence[object], strides: Sequence[object], offset: object,
                 mode: FakeTensorMode) -> torch.Tensor | None:
    """``base.as_strided(sizes, strides, offset)`` as the fake mode makes it, at a quarter of the cost;
    None when the meta kernel cannot decide its bounds check (an unbacked size: the op itself then runs
    through the fake mode, whose own rules for the view may not need that check)."""
    try:
        with _Strided(mode):
            return base.as_strided(sizes, strides, offset)  # the method: torch skips the boxed call
    except Exception:  # any failure of the shortcut leaves the value to torch
        return None


def contiguous_view(base: object, known: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor | None:
    """``base`` (a fake value) reshaped row-major to ``known``'s shape, made as ``as_strided``; None
    when ``base`` is not a contiguous tensor or a dim inside the outermost is symbolic (then the
    reshape must run)."""
    strides = row_major_strides(known.shape)
    if not isinstance(base, FakeTensor) or strides is None or not is_contiguous(base):
        return None
    return strided_view(base, known.shape, strides, base.storage_offset(), mode)


def slice_view(args: tuple, kwargs: dict, known: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor | None:
    """``aten.slice.Tensor(*args, **kwargs)`` made as ``as_strided`` when it is a window of its base:
    step 1, a start of 0 or more, concrete strides, and ``known`` (the slice's value in the original
    graph) that agrees with ``base`` outside the sliced dim and fits inside it; None otherwise."""
    base = args[0]
    params = dict(zip(("dim", "start", "end", "step"), args[1:], strict=False)) | kwargs
    dim, start = params.get("dim", 0), params.get("start")
    start = 0 if start is None else start  # not `or 0`: a symbolic start's truth value would add a guard
    if not isinstance(base, FakeTensor) or params.get("step", 1) != 1 or not isinstance(start, int) or start < 0:
        return None
    strides = base.stride()
    if not isinstance(dim, int) or not -base.dim() <= dim < base.dim() or known.dim() != base.dim() or \
            not all(isinstance(s, int) for s in strides):
        return None
    dim %= base.dim()
    sizes, base_sizes = known.shape, base.shape  # each read makes its symbolic sizes afresh: read once
    size, whole = sizes[dim], base_sizes[dim]
    if not (isinstance(size, int) and isinstance(whole, int) and start + size <= whole):
        return None
    if any(sym_expr(a) != sym_expr(b) for k, (a, b) in enumerate(zip(sizes, base_sizes, strict=True)) if k != dim):
        return None
    return strided_view(base, sizes, strides, base.storage_offset() + start * strides[dim], mode)


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
        view = slice_view(args, kwargs, known, mode)
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
