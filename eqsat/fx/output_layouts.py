"""The output layouts of the kernels emit has written, kept so that a kernel's fake value is made once
per layout (``eqsat.fx.fake_value``).

A custom op's fake value, dispatched through torch's fake mode with the token dim symbolic, is dear
even when torch's own cache hits (hashing its key, then rebuilding each output). :class:`OutputLayouts` keeps, per fake mode (held weakly) and per the inputs' layouts
(sizes, strides, offset, dtype, device; symbolic ones as their expressions) and other arguments, the
layouts of the outputs torch made the first time; a later call with the same key (the next layer, the
next graph of one compile) gets fresh outputs of those layouts, made as torch's cache makes them on a
hit (``empty_strided`` on the meta device inside the fake mode's kernel context, wrapped as
FakeTensors). Sound because the op's outputs are a function of that key: an entry
is kept only for an op that neither mutates nor aliases, whose every output is a plain fake tensor at
offset 0 without symbols of its own (an unbacked size must be fresh each call), and whose outputs made
again from their layouts match the ones torch made (a check that fails to run keeps nothing).

Across fake modes (each compile has its own, with its own shape environment) an entry is kept as
expressions and serves a mode whose key is the same and whose symbols in it have the same value ranges,
if the first run left its shape environment as it found it (no guard, runtime assert, replacement or
range added): then the outputs were worked out from the key and those ranges alone. Its sizes are made
in the new mode's shape environment (a symbol as the input's own SymInt).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext

import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, in_kernel_invocation_manager

from eqsat.core.spelling import op_schema
from eqsat.fx.symbolic import hints


@contextmanager
def meta_kernel(mode: FakeTensorMode) -> Iterator[None]:
    """Where torch's fake mode runs a meta kernel: fake tensors dispatch as their meta tensors, and a
    symbolic comparison inside adds no guard."""
    with in_kernel_invocation_manager(mode), mode.shape_env.suppress_guards() if mode.shape_env else nullcontext():
        yield


def sym_expr(d: object) -> object:
    """A size, stride or offset as a hashable value: a symbolic one as its expression."""
    return d.node.expr if isinstance(d, torch.SymInt) else d


def tensor_layout(t: torch.Tensor) -> tuple:
    """A tensor's sizes, strides, offset, dtype and device, symbolic ones as expressions (a key's part)."""
    return (tuple(map(sym_expr, t.shape)), tuple(map(sym_expr, t.stride())), sym_expr(t.storage_offset()), t.dtype,
            t.device)


def sizes_in(mode: FakeTensorMode, inputs: Iterable[object]) -> Callable[[object], object]:
    """What makes a size of ``mode`` from an expression kept across modes: an integer as an int, an
    expression one of the tensors ``inputs`` has (a size, stride or offset) as that tensor's own SymInt,
    any other made once in the mode's shape environment at its hint."""
    own = {d.node.expr: d for a in inputs if isinstance(a, torch.Tensor)
           for d in (*a.shape, *a.stride(), a.storage_offset()) if isinstance(d, torch.SymInt)}
    env = mode.shape_env

    def made(e: object) -> object:
        if not isinstance(e, sympy.Basic):
            return e
        if isinstance(e, sympy.Integer):
            return int(e)
        if e not in own:
            own[e] = env.create_symintnode(e, hint=int(e.xreplace(hints(env))))  # type: ignore[union-attr]
        return own[e]

    return made


_Layout = tuple[tuple[object, ...], tuple[object, ...], object, torch.dtype, torch.device, object]
_Entry = tuple[type | None, tuple[_Layout, ...]]


def key_symbols(obj: object, into: set[sympy.Symbol]) -> set[sympy.Symbol]:
    """The free symbols of the sympy expressions anywhere in ``obj`` (a key: nested tuples)."""
    if isinstance(obj, sympy.Basic):
        into |= obj.free_symbols  # type: ignore[arg-type]
    elif isinstance(obj, tuple):
        for x in obj:
            key_symbols(x, into)
    return into


def env_state(env: object, symbols: tuple[sympy.Symbol, ...]) -> tuple | None:
    """What a fake could change in a shape environment (its version counter covers replacements and
    runtime asserts; guards and value ranges apart), or None where torch keeps it otherwise."""
    if env is None:
        return ()
    try:
        ranges = env.var_to_range  # type: ignore[attr-defined]
        return env._version_counter, len(env.guards), tuple(ranges.get(x) for x in symbols)  # type: ignore[attr-defined]
    except AttributeError:
        return None


def _layout(t: object) -> _Layout | None:
    """What a fresh output's value is made from (sizes, strides, offset, dtype, device, storage bytes),
    or None for anything but a plain fake tensor (a view, a tensor needing grad, a non-strided one)."""
    if not isinstance(t, FakeTensor) or t._is_view() or t.requires_grad or t.layout != torch.strided:
        return None
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.fake_device,
            sym_expr(t.untyped_storage().nbytes()))


def _keyed(layout: _Layout | None) -> tuple | None:
    """``layout`` with its symbolic values as expressions, to compare by value."""
    return None if layout is None else tuple(tuple(map(sym_expr, x)) if isinstance(x, tuple) else sym_expr(x) for x in layout)


class OutputLayouts:
    """The output layouts of the custom ops emit has run (the module docstring says what is kept, and
    when an op's value is made from them); ``value`` is the op's fake value either way."""

    def __init__(self) -> None:
        # mode -> key -> (tuple or list for a multi-output op, None for one tensor; the layouts), or
        # None when the op's value cannot be made from layouts
        self._seen: weakref.WeakKeyDictionary[FakeTensorMode, dict[tuple, _Entry | None]] = weakref.WeakKeyDictionary()
        # mode -> key -> the outputs' (shape, strides, dtype) with symbols as expressions, or the
        # exception the op's fake raised (see ``check``)
        self._checked: weakref.WeakKeyDictionary[FakeTensorMode, dict[tuple, tuple | Exception]] = \
            weakref.WeakKeyDictionary()
        # (op, its inputs' facts, constants) -> the facts of the outputs its fake gave on such inputs
        # (``fx_out``: the same check without reading a fake tensor, where facts fix the layouts)
        self.facts_checked: dict[tuple, tuple] = {}
        # (key, the ranges of its symbols) -> layouts as expressions, for any mode (the module docstring)
        self._shared: dict[tuple, _Entry] = {}

    def check(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict, mode: FakeTensorMode) -> tuple | None:
        """Run ``op``'s registered fake on these inputs once per key (raising what it raises, every time it
        is asked again) and return each output's (shape, strides, dtype), symbolic ones as expressions;
        None when the arguments make no key (then nothing is remembered)."""
        key = self._key(op, args, kwargs)
        seen = self._checked.setdefault(mode, {})
        got = seen.get(key) if key is not None else None
        if got is None:
            try:
                out = self.value(op, args, kwargs, mode)
                got = layout_summary(out)
            except Exception as exc:  # the fake refused these inputs: so will every later call
                got = exc
            if key is not None:
                seen[key] = got
        if isinstance(got, Exception):
            raise got
        return got if key is not None else None

    @staticmethod
    def _key(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple | None:
        def arg(a: object) -> object:
            if isinstance(a, torch.Tensor):
                return tensor_layout(a)
            if isinstance(a, (list, tuple)):
                return type(a), tuple(map(arg, a))
            return type(a), a  # 1, 1.0 and True are equal keys: the type tells them apart

        key = (op, tuple(map(arg, args)), tuple(sorted((k, arg(v)) for k, v in kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def value(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict, mode: FakeTensorMode,
              given: tuple | None = None) -> object:
        """``op``'s fake value on these inputs. ``given``: a multi-output op's outputs already at hand, None
        where not (values of the layouts the op gives, as the caller checked): only the others are made."""
        key = self._key(op, args, kwargs)
        seen = self._seen.setdefault(mode, {})
        entry = seen.get(key) if key is not None else None
        if entry is not None:
            return self._made(entry, mode, given)
        symbols = tuple(sorted(key_symbols(key, set()), key=str)) if key is not None and key not in seen else None
        before = env_state(mode.shape_env, symbols) if symbols is not None else None
        shared = (key, before[2:]) if before is not None else None
        if shared is not None and shared in self._shared:
            entry = seen[key] = self._in_mode(self._shared[shared], args, mode)
            return self._made(entry, mode, given)
        with mode:
            out = op(*args, **kwargs)
        if key is not None and key not in seen:
            try:
                seen[key] = entry = self._reusable(op, args, out, mode)
            except Exception:  # the check failed to run: the op keeps running under the fake mode
                seen[key] = entry = None
            if entry is not None and shared is not None and env_state(mode.shape_env, symbols) == before:  # type: ignore[arg-type]
                self._shared[shared] = (entry[0], tuple(_keyed(x) for x in entry[1]))  # type: ignore[misc]
        if given is not None and isinstance(out, (tuple, list)):
            return type(out)(o if g is None else g for o, g in zip(out, given, strict=True))
        return out

    @staticmethod
    def _in_mode(entry: _Entry, args: tuple, mode: FakeTensorMode) -> _Entry:
        """A shared entry's layouts with their sizes in ``mode``: a symbol as the inputs' own SymInt, any
        other expression made in the mode's shape environment at its hint."""
        made = sizes_in(mode, args)
        kind, layouts = entry
        return kind, tuple((tuple(map(made, x[0])), tuple(map(made, x[1])), made(x[2]), x[3], x[4], x[5])
                           for x in layouts)

    @staticmethod
    def _made(entry: _Entry, mode: FakeTensorMode, given: tuple | None = None) -> object:
        """Fresh fake outputs of ``entry``'s layouts, as torch's fake-tensor cache makes them on a hit; those
        ``given`` (not None there) as they are."""
        kind, layouts = entry
        given = given if given is not None and kind is not None else (None,) * len(layouts)
        with meta_kernel(mode):
            metas = [torch.empty_strided(x[0], x[1], dtype=x[3], device="meta") if g is None else None
                     for x, g in zip(layouts, given, strict=True)]
        made = [FakeTensor(mode, m, x[4]) if g is None else g for m, x, g in zip(metas, layouts, given, strict=True)]
        return made[0] if kind is None else kind(made)

    def _reusable(self, op: torch._ops.OpOverload, args: tuple, out: object, mode: FakeTensorMode) -> _Entry | None:
        schema = op_schema(op)
        if schema.returns_alias or any(a.written for a in schema.arguments):
            return None
        kind = type(out) if type(out) in (tuple, list) else None
        got = [_layout(t) for t in (out if kind is not None else (out,))]  # type: ignore[union-attr]
        if any(x is None or sym_expr(x[2]) != 0 for x in got):
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


def layout_summary(val: object) -> tuple:
    """(shape, strides, dtype) of each tensor of ``val``, symbolic ones as expressions (what
    ``OutputLayouts.check`` reports of an op's outputs)."""
    outs = val if isinstance(val, (tuple, list)) else (val,)
    return tuple((tuple(map(sym_expr, t.shape)), tuple(map(sym_expr, t.stride())), t.dtype)
                 if isinstance(t, torch.Tensor) else None for t in outs)


def shown(summary: tuple) -> str:
    """``summary`` for an error message: each output's shape and dtype."""
    return ", ".join("-" if s is None else f"{list(s[0])} {str(s[2]).removeprefix('torch.')}" for s in summary)
