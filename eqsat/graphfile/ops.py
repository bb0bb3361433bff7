"""Ops in saved graphs (:mod:`eqsat.graphfile`): how a call target is named in a file, how a name
resolves back, and the opaque stand-in an op gets when no library in this process defines it.

A target is ``ns.op.overload``, ``higher_order.name`` or ``operator.name``; :func:`resolve` turns a
name back into the callable. An op that does not resolve gets a stand-in from :class:`StandIns`: one
per load and (op, output spec), in a namespace ``eqsat_opaque<k>`` the load claims with a ``DEF``
library (smallest free k: loads never clash), named ``<ns>__<op>`` (``__v<j>`` for a further output
spec); its schema is the saved one renamed (alias / mutation annotations kept), its fake impl returns
fresh tensors of the saved spec, its kernel raises. A reloaded stand-in is stood in anew.

Invariants: nothing is imported or evaluated (``torch.ops`` attributes and ``torch._C.parse_schema``
only); the only module state is ``_LIBRARIES``, kept for the process's life (dropping a ``Library``
unregisters ops loaded graphs still call); a schema that does not parse, names another op or returns
an alias of an argument, or an output spec that does not fit it, is a :class:`GraphFileError`.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from collections.abc import Callable
from typing import Any

import torch

OPERATORS: dict[str, Callable[..., Any]] = {
    f.__name__: f for f in (operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
                            operator.mod, operator.neg, operator.truediv)}
PREFIX = "eqsat_opaque"
_STANDIN_NS = re.compile(PREFIX + r"\d+")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STANDINS = "import vLLM, or call eqsat.kernels.torch_ops.register_vllm_standins()"
_LIBRARIES: list[torch.library.Library] = []


class GraphFileError(ValueError):
    """A graph that cannot be saved, or a file that cannot be loaded; the message says why."""


class MissingOpError(GraphFileError):
    """An ``ns.op.overload`` that no library in this process defines."""


def target_name(target: object) -> str:
    """The name a call target is saved under (see the module docstring)."""
    if isinstance(target, torch._ops.OpOverload):
        ns, _, op = target._schema.name.partition("::")
        return f"{ns}.{op}.{target._overloadname}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    if callable(target) and OPERATORS.get(getattr(target, "__name__", "")) is target:
        return f"operator.{target.__name__}"
    raise GraphFileError(f"cannot save a call to {target!r}: only torch.ops overloads, torch.ops.higher_order "
                         f"operators and operator.{{{', '.join(OPERATORS)}}} are supported")


def resolve(name: str) -> Callable[..., Any]:
    """``"ns.op.overload"`` / ``"higher_order.name"`` / ``"operator.name"`` -> the callable; nothing
    else (no imports). An op no library defines raises :class:`MissingOpError`."""
    parts = name.split(".")
    if not all(NAME.fullmatch(p) and not p.startswith("__") for p in parts):
        raise GraphFileError(f"bad op name {name!r}")
    if len(parts) == 2 and parts[0] == "operator" and parts[1] in OPERATORS:
        return OPERATORS[parts[1]]
    if len(parts) == 2 and parts[0] == "higher_order":
        hop = getattr(torch.ops.higher_order, parts[1], None)
        if isinstance(hop, torch._ops.HigherOrderOperator):
            return hop
        raise GraphFileError(f"unknown higher-order op torch.ops.higher_order.{parts[1]}")
    if len(parts) != 3:
        raise GraphFileError(f"bad op name {name!r}: expected ns.op.overload")
    ns, op, overload = parts
    if _STANDIN_NS.fullmatch(ns):
        raise MissingOpError(f"op torch.ops.{name} is the opaque stand-in of another load")
    try:
        target = getattr(getattr(getattr(torch.ops, ns), op), overload)
    except (AttributeError, RuntimeError):
        hint = _STANDINS if ns in ("vllm", "vllm_ir", "_C") else "import the library that defines them"
        raise MissingOpError(f"unknown op torch.ops.{name}: the {ns!r} ops must be registered before loading "
                             f"this graph ({hint})") from None
    if not isinstance(target, torch._ops.OpOverload):
        raise GraphFileError(f"torch.ops.{name} is not an op overload")
    return target


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def parse_schema(name: str, text: object) -> torch._C.FunctionSchema:
    """The saved schema of op ``name`` (``ns.op.overload``), parsed by torch and checked to be that op's."""
    if not isinstance(text, str):
        raise GraphFileError(f"op {name}: bad saved schema {text!r}")
    try:
        schema = torch._C.parse_schema(text)
    except RuntimeError as exc:
        raise GraphFileError(f"op {name}: cannot rebuild its saved schema {text!r} ({_first_line(exc)})") from None
    ns, op, overload = name.split(".")
    if schema.name != f"{ns}::{op}" or (schema.overload_name or "default") != overload:
        raise GraphFileError(f"op {name}: the saved schema {text!r} is another op's")
    if any(r.alias_info is not None for r in schema.returns):
        raise GraphFileError(f"op {name}: returns an alias of an argument ({text!r}); it cannot be stood in")
    return schema


def _no_kernel(original: str, standin: str) -> Callable[..., Any]:
    def run(*args: object, **kwargs: object) -> Any:
        raise RuntimeError(f"{standin} is an opaque stand-in for torch.ops.{original}, loaded from a saved graph "
                           "without its library: it has output shapes, no kernel")
    return run


class StandIns:
    """The stand-ins of one load (see the module docstring); ``build(spec)`` makes a saved output spec's
    fake value in the load's fake mode."""

    def __init__(self, build: Callable[[object], object]) -> None:
        self.build = build
        self.lib: torch.library.Library | None = None
        self.ops: dict[tuple[str, str], torch._ops.OpOverload] = {}

    def op(self, name: str, schema_text: object, spec: object) -> torch._ops.OpOverload:
        """The stand-in for op ``name`` at a node whose saved output spec is ``spec``."""
        key = (name, json.dumps(spec, sort_keys=True))
        if key in self.ops:
            return self.ops[key]
        schema = parse_schema(name, schema_text)
        returns = len(schema.returns)
        if (returns == 0 and spec is not None) or (returns > 1 and not _is_tuple(spec, returns)):
            raise GraphFileError(f"op {name}: saved output {spec!r} does not fit its {returns} returns")
        ns, op, overload = name.split(".")
        base = op if _STANDIN_NS.fullmatch(ns) else f"{ns}__{op}"
        taken = {(t._schema.name.partition("::")[2], t._overloadname) for t in self.ops.values()}
        new, j = base, 0
        while (new, overload) in taken:
            j += 1
            new = f"{base}__v{j}"
        text = str(schema)
        lib = self._library()
        try:
            lib.define(new + (f".{schema.overload_name}" if schema.overload_name else "") + text[text.index("("):])
        except RuntimeError as exc:
            raise GraphFileError(f"op {name}: cannot define a stand-in with its schema {text!r} "
                                 f"({_first_line(exc)})") from None
        target = getattr(getattr(getattr(torch.ops, lib.ns), new), schema.overload_name or "default")
        lib.impl(target, _no_kernel(name, f"torch.ops.{target_name(target)}"), "CompositeExplicitAutograd")
        torch.library.register_fake(target, lambda *args, **kwargs: self.build(spec), lib=lib)
        self.ops[key] = target
        return target

    def functionalized(self, name: str, schema_text: object, spec: object) -> torch._ops.OpOverload:
        """The stand-in for op ``name`` called by ``auto_functionalized`` at a node whose output spec is ``spec``."""
        returns = len(parse_schema(name, schema_text).returns)
        items = spec.get("tuple") if isinstance(spec, dict) else None
        if not isinstance(items, list) or len(items) < max(returns, 1):
            raise GraphFileError(f"op {name}: saved output {spec!r} is not (op outputs, *mutated values)")
        return self.op(name, schema_text, items[0] if returns <= 1 else {"tuple": items[:returns]})

    def _library(self) -> torch.library.Library:
        for k in itertools.count():
            if self.lib is not None:
                break
            try:
                self.lib = torch.library.Library(f"{PREFIX}{k}", "DEF")
            except RuntimeError:  # claimed by an earlier load
                continue
            _LIBRARIES.append(self.lib)
        assert self.lib is not None
        return self.lib


def _is_tuple(spec: object, n: int) -> bool:
    return isinstance(spec, dict) and isinstance(spec.get("tuple"), list) and len(spec["tuple"]) == n
