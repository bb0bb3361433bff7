"""Binding: an FX call's arguments as a catalog constructor's parameters, as a spelling says.

``bind`` reads a direct call (leading positional arguments, pinned ones compared, the rest at their
schema defaults); ``bind_functionalized`` reads ``auto_functionalized(op, **kwargs)`` (arguments by
name, output buffers skipped, a guard for what the spelling cannot pin). Both return the
constructor's arguments in parameter order (FX nodes for tensors, Python values for constants), or
None when the node is not this spelling's op.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from eqsat.core.ir import dtype_name
from eqsat.core.spelling import Const, op_schema


def fixed_key(name: str, value: object, rank: int | None) -> object:
    """How a pinned (``Spelling.fixed``) argument compares: lists as tuples, and a ``dim`` (int or
    ints) in its negative form modulo the rank of the op's first input, as ATen wraps it."""
    if isinstance(value, list):
        value = tuple(value)
    if name == "dim" and rank:
        def wrap(d: object) -> object:
            return d - rank if isinstance(d, int) and not isinstance(d, bool) and d >= 0 else d
        value = tuple(map(wrap, value)) if isinstance(value, tuple) else wrap(value)
    return value


def bind_arg(bound: dict[str, object], p: str | Const | tuple[str | int, ...], value: object) -> bool:
    """Bind one schema argument: a name takes it whole; a tuple takes a list argument of that length
    element by element, its ints being values the element must hold (``(0, "p")``: ``[0, p]``); a
    ``Const`` binds nothing and requires its value."""
    if isinstance(p, str):
        bound[p] = value
        return True
    if isinstance(p, Const):
        return p.holds(value)
    if not isinstance(value, (list, tuple)) or len(value) != len(p):
        return False
    for e, v in zip(p, value, strict=True):
        if isinstance(e, str):
            bound[e] = v
        elif type(v) is not int or v != e:
            return False
    return True


_ABSENT = object()  # an argument the call does not give


def bind(node: fx.Node, spelling, spec) -> tuple | None:
    """Constructor arguments for ``node`` spelled by ``spelling``, or None if it does not fit."""
    arguments = op_schema(node.target).arguments
    args, kwargs = node.args, node.kwargs
    n = len(args)

    def given(i: int, name: str) -> object:
        return args[i] if i < n else kwargs.get(name, _ABSENT)

    bound: dict[str, object] = {}
    for i, p in enumerate(spelling.args):
        v = given(i, arguments[i].name)
        if not bind_arg(bound, p, None if v is _ABSENT else v):
            return None
    fixed = dict(spelling.fixed) if spelling.fixed else {}
    rank: int | None | object = _ABSENT  # the rank of the op's first input, read only for a pinned dim
    for i in range(len(spelling.args), len(arguments)):
        a = arguments[i]
        v = given(i, a.name)
        if a.name in fixed:
            if rank is _ABSENT:
                first = args[0].meta.get("val") if args and isinstance(args[0], fx.Node) else None
                rank = first.dim() if isinstance(first, torch.Tensor) else None
            if fixed_key(a.name, a.default if v is _ABSENT else v, rank) != fixed_key(a.name, fixed[a.name], rank):
                return None
        elif v is not _ABSENT and v != a.default:
            return None
    for p in spelling.from_output_dtype:
        val = node.meta.get("val")
        first = val[0] if isinstance(val, (tuple, list)) else val
        if not isinstance(first, torch.Tensor):
            return None
        bound[p] = first.dtype
    return convert(bound, spec)


def bind_functionalized(node: fx.Node, op: torch._ops.OpOverload, spelling, spec) -> tuple | None:
    """Constructor arguments for ``auto_functionalized(op, **kwargs)`` spelled by ``spelling``."""
    given = dict(node.kwargs)
    bound: dict[str, object] = {p: given.get(n) for p, n in zip(spelling.args, spelling.names, strict=True)}
    fixed = dict(spelling.fixed)
    for a in op_schema(op).arguments:
        if a.name in spelling.names or a.name in spelling.mutated:
            continue
        if spelling.guard is not None and a.name not in fixed and not a.has_default:
            continue  # a required argument neither bound nor pinned: the guard checks it
        if given.get(a.name, a.default) != fixed.get(a.name, a.default):
            return None
    buffer = given.get(spelling.mutated[0])
    for p in spelling.from_output_dtype:
        if not isinstance(buffer, fx.Node) or not isinstance(buffer.meta.get("val"), torch.Tensor):
            return None
        bound[p] = buffer.meta["val"].dtype
    if spelling.guard is not None and not spelling.guard({**given, **bound}):
        return None
    return convert(bound, spec)


def convert(bound: dict[str, object], spec) -> tuple | None:
    """Bound parameter values as the constructor's arguments (FX nodes kept), or None if one does not fit."""
    out = []
    for name, sort in spec.params:
        v = bound.get(name)
        if sort == "T":
            if not isinstance(v, fx.Node):
                return None
            out.append(v)
        elif sort == "dtype":
            if not isinstance(v, torch.dtype):
                return None
            out.append(dtype_name(v))
        elif sort == "f64" and isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
        elif sort == "i64" and isinstance(v, int) and not isinstance(v, bool):
            out.append(int(v))
        elif sort in ("str", "bool") and isinstance(v, str if sort == "str" else bool):
            out.append(v)
        else:
            return None
    return tuple(out)
