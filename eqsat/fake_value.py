"""The fake value (``node.meta["val"]``) of a node emit writes, computed as cheaply as torch allows.

With the token dim symbolic, every FakeTensor torch makes costs tens of symbolic-int operations
(15-30 us each), so how a value is made matters more than anything else emit does:
- a **row-major reshape of a contiguous tensor** (eqsat's one view form, ``Reshape``) whose shape is
  known (an original FX value of its e-class has it) is that tensor's contiguous view at the same
  storage offset. It is made as ``as_strided`` to that shape and its row-major strides: the view
  ``reshape`` would make, at ~0.3 ms where ``reshape`` (which decomposes to ``view`` and works
  its strides out symbolically) costs ~0.8 ms;
- **other view ops** (a ``slice``) run with torch's fake-tensor cache off
  (``disable_fake_tensor_cache``): a cache hit rebuilds a view with ``empty_strided`` + ``set_``,
  which costs twice what working the view out does (~1.0 against ~0.45 ms);
- **anything else** (a kernel, an ATen op) runs under the graph's fake mode as it is; there the
  cache helps.
Each is the value torch itself would give the node: same sizes, strides, storage offset, dtype,
and for a view the same storage and base (``tests/test_fake_value.py`` checks them against the op
run plainly). Without a fake mode (a graph traced without one) the op runs as it is.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode, disable_fake_tensor_cache

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


def _contiguous(t: torch.Tensor) -> bool:
    """``t.is_contiguous()``, read off concrete strides where they are row-major: on a value torch has
    just made (a kernel's output) with the token dim symbolic, torch works contiguity out in ~10
    symbolic-int operations (~0.15 ms); strides equal to the row-major ones are contiguous by definition."""
    strides = t.stride()
    if all(isinstance(s, int) for s in strides) and tuple(strides) == row_major_strides(t.shape):
        return True
    return bool(t.is_contiguous())


def contiguous_view(base: object, known: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor | None:
    """``base`` (a fake value) reshaped row-major to ``known``'s shape, made as ``as_strided``; None
    when ``base`` is not a contiguous tensor or a dim inside the outermost is symbolic (then the
    reshape must run)."""
    strides = row_major_strides(known.shape)
    if not isinstance(base, torch.Tensor) or strides is None or not _contiguous(base):
        return None
    with mode, disable_fake_tensor_cache(mode):
        return aten.as_strided.default(base, known.shape, strides, base.storage_offset())


def fake_value(target: object, args: tuple, kwargs: dict, mode: FakeTensorMode | None,
               known: torch.Tensor | None = None) -> object:
    """The value ``target(*args, **kwargs)`` has on fake inputs (``args`` hold fake values already);
    ``known``: a value of the same e-class from the original graph, whose shape the result has."""
    if mode is None:
        return target(*args, **kwargs)  # type: ignore[operator]
    if target is aten.reshape.default and known is not None and not kwargs:
        view = contiguous_view(args[0], known, mode)
        if view is not None:
            return view
    with mode:
        # a reshape left to run keeps the cache: uncached, its decomposition costs more than a hit
        if isinstance(target, torch._ops.OpOverload) and target.is_view and target is not aten.reshape.default:
            with disable_fake_tensor_cache(mode):
                return target(*args, **kwargs)
        return target(*args, **kwargs)  # type: ignore[operator]
