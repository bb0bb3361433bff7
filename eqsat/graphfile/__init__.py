"""Saved graphs: a post-grad FX graph as a JSON file, and back, with fake ``meta["val"]`` rebuilt.

Entry points: ``save(gm, path)`` / ``dumps(gm)`` write one JSON object (``"format": "eqsat-fx-graph"``,
``"version": 2``, ``"symbols"`` with size hints, ``"schemas"`` holding ``str(op._schema)`` of every op
used, ``"nodes"`` with names, targets, args and output specs ``"val"``); ``load(path)`` / ``loads(text)``
rebuild the nodes and propagate fake tensors (``FakeTensorProp`` under a ``ShapeEnv`` recreating each
saved symbol). An op this process lacks becomes an opaque stand-in from its saved schema
(:mod:`eqsat.graphfile.ops`); an op the optimizer rewrites is never stood in (``_REWRITTEN``).

Invariants: nothing in a file is imported, unpickled or evaluated (targets resolve only as
``torch.ops.<ns>.<op>.<overload>``, ``torch.ops.higher_order.<name>`` or ``OPERATORS``); symbolic sizes
are sums of products of ints and ``s<digits>`` symbols, anything else is refused on save; ``get_attr``
nodes are unsupported; an unsavable output spec is left out, failing only a load that needs its
stand-in; every error is a :class:`GraphFileError` naming the file, version, node or op.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch._dispatch.python import enable_python_dispatcher
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from eqsat.graphfile.ops import OPERATORS, GraphFileError, MissingOpError, StandIns, resolve, target_name
from eqsat.graphfile.sizes import expr_text, parse_terms
from eqsat.kernels.vocabularies import DEFAULT_VOCABULARIES

log = logging.getLogger("eqsat")
_REWRITTEN = frozenset(s.target.split(".")[0] for vocab in DEFAULT_VOCABULARIES for s in vocab)
"""``ns::op`` of every op a built-in vocabulary spells: missing at load time, these are an error, never
an opaque stand-in (the optimizer would silently see nothing to rewrite)."""

__all__ = ["OPERATORS", "GraphFileError", "dump_value", "dumps", "load", "loads", "resolve", "save"]

FORMAT, VERSION, READS = "eqsat-fx-graph", 2, (1, 2)
_SYMBOL = re.compile(r"s(\d+)")
_DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}
_LAYOUTS = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.layout)}
_FORMATS = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.memory_format)}
_NO_VAL = object()  # a node entry without "val" (JSON null is the spec of None)


# -- saving -----------------------------------------------------------------------------------------


def _encode(value: object) -> object:
    if isinstance(value, fx.Node):
        return {"node": value.name}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, torch.SymInt):
        return {"symint": expr_text(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return {"op": target_name(value)}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    raise GraphFileError(f"cannot save an argument of type {type(value).__name__}: {value!r}")


def dump_value(val: object, symbols: dict[str, int]) -> object:
    """A fake value as JSON: tensors by shape, stride, dtype and device; SymInts by their expression;
    tuples, lists, None and scalars as :func:`_encode` writes them. Adds the symbols it uses (with
    their size hints) to ``symbols``."""
    if isinstance(val, torch.Tensor):
        _note_symbols([*val.shape, *val.stride()], symbols)
        return {"tensor": {"shape": [expr_text(d) for d in val.shape], "stride": [expr_text(s) for s in val.stride()],
                           "dtype": str(val.dtype).removeprefix("torch."), "device": str(val.device)}}
    if isinstance(val, torch.SymInt):
        _note_symbols([val], symbols)
        return {"symint": expr_text(val)}
    if val is None or isinstance(val, (bool, int, float)):
        return _encode(val)
    if isinstance(val, (tuple, list)):
        items = [dump_value(v, symbols) for v in val]
        return {"tuple": items} if isinstance(val, tuple) else items
    raise GraphFileError(f"cannot save a value of type {type(val).__name__}")


def _note_symbols(sizes: list[int | torch.SymInt], symbols: dict[str, int]) -> None:
    for size in sizes:
        if not isinstance(size, torch.SymInt):
            continue
        for sym in size.node.expr.free_symbols:
            if not _SYMBOL.fullmatch(str(sym)):
                raise GraphFileError(f"symbol {sym}: only backed sizes named s<N> can be saved")
            env = size.node.shape_env
            hint = getattr(env, "guarding_hint_or_throw", None) or env.size_hint  # torch < 2.13: size_hint
            symbols[str(sym)] = int(hint(sym))


def _ops_in(value: object) -> Iterator[torch._ops.OpOverload]:
    if isinstance(value, torch._ops.OpOverload):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _ops_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _ops_in(v)


def _output(node: fx.Node, symbols: dict[str, int]) -> object:
    """The node's output spec, or ``_NO_VAL`` when it has none or it cannot be saved."""
    if "val" not in node.meta:
        return _NO_VAL
    used: dict[str, int] = {}
    try:
        spec = dump_value(node.meta["val"], used)
    except GraphFileError:
        return _NO_VAL
    symbols.update(used)
    return spec


def dumps(graph_module: fx.GraphModule | fx.Graph) -> str:
    """The JSON text of a graph (see the module docstring); raises :class:`GraphFileError`."""
    graph = graph_module.graph if isinstance(graph_module, fx.GraphModule) else graph_module
    symbols: dict[str, int] = {}
    schemas: dict[str, str] = {}
    nodes: list[dict[str, object]] = []
    for n in graph.nodes:
        entry: dict[str, object] = {"name": n.name, "op": n.op}
        out: object = _NO_VAL
        if n.op == "placeholder":
            try:
                entry["val"] = dump_value(n.meta.get("val"), symbols)
            except GraphFileError as exc:
                raise GraphFileError(f"placeholder {n.name!r}: {exc}") from None
        elif n.op == "call_function":
            entry["target"] = target_name(n.target)
            ops = [*_ops_in(n.target), *_ops_in(n.args), *_ops_in(n.kwargs)]
            schemas.update((target_name(op), str(op._schema)) for op in ops)
            out = _output(n, symbols) if ops else _NO_VAL
        elif n.op != "output":
            raise GraphFileError(f"node {n.name!r}: {n.op} nodes are not supported (only placeholder, "
                                 "call_function and output)")
        if n.op != "placeholder":
            entry["args"] = [_encode(a) for a in n.args]
            entry["kwargs"] = {k: _encode(v) for k, v in n.kwargs.items()}
        if out is not _NO_VAL:
            entry["val"] = out
        if n.meta.get("stack_trace"):
            entry["stack_trace"] = n.meta["stack_trace"]
        nodes.append(entry)
    head = json.dumps({"format": FORMAT, "version": VERSION, "symbols": symbols, "schemas": schemas})[:-1]
    return head + ', "nodes": [\n' + ",\n".join(json.dumps(n) for n in nodes) + "\n]}"  # a node a line


def save(graph_module: fx.GraphModule | fx.Graph, path: str | Path) -> None:
    Path(path).write_text(dumps(graph_module) + "\n")


# -- loading ----------------------------------------------------------------------------------------


class _Loader:
    """One file being loaded: its symbols as SymInts, its op schemas, its nodes by name, the stand-ins
    it defined."""

    def __init__(self, symbols: Mapping[str, int], schemas: Mapping[str, object] | None = None) -> None:
        self.shape_env = ShapeEnv()
        self.mode = FakeTensorMode(shape_env=self.shape_env, allow_non_fake_inputs=True)
        self.symbols: dict[str, torch.SymInt] = {}
        for name, hint in symbols.items():
            m = _SYMBOL.fullmatch(str(name))
            if m is None or not isinstance(hint, int) or isinstance(hint, bool):
                raise GraphFileError(f"bad symbol {name!r}: {hint!r} (expected s<N>: int hint)")
            self.symbols[name] = self._symbol(int(m.group(1)), hint)
        self.schemas = dict(schemas or {})
        self.standins = StandIns(self.value)
        self.env: dict[str, fx.Node] = {}
        self.warned: set[str] = set()

    def _symbol(self, index: int, hint: int) -> torch.SymInt:
        """A backed size symbol named ``s<index>`` (ShapeEnv would name it from a hash of its source)."""
        if hint < 2:
            raise GraphFileError(f"symbol s{index}: size hint {hint} < 2 (0 and 1 would be specialized)")
        self.shape_env._generate_unique_id = lambda _source: index  # type: ignore[method-assign]
        try:
            sym = self.shape_env.create_symbol(hint, ConstantSource(f"eqsat_graphfile_s{index}"),
                                               dynamic_dim=DimDynamic.DYNAMIC)
        finally:
            del self.shape_env._generate_unique_id
        self.shape_env.unique_ids.add(index)
        node = self.shape_env.create_symintnode(sym, hint=hint)
        assert isinstance(node, torch.SymInt)
        return node

    def size(self, value: object) -> int | torch.SymInt:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if not isinstance(value, str):
            raise GraphFileError(f"bad size {value!r}")
        total: int | torch.SymInt = 0
        for coeff, names in parse_terms(value):
            term: int | torch.SymInt = coeff
            for name in names:
                if name not in self.symbols:
                    raise GraphFileError(f"size {value!r} uses {name!r}, which is not in the file's symbols")
                term = term * self.symbols[name]
            total = total + term
        return total

    def op(self, name: str, out: object = _NO_VAL, called: bool = False) -> Any:
        """The op ``name``: the registered one, or else a stand-in made from the file's schema and
        ``out``, the saved output of the node that calls it (``called``) or passes it to
        ``auto_functionalized``."""
        try:
            target = resolve(name)
        except MissingOpError as exc:
            if name.rsplit(".", 1)[0].replace(".", "::", 1) in _REWRITTEN:
                raise GraphFileError(f"{exc}; it is an op the optimizer rewrites, so it is not stood in as an "
                                     "opaque op (that would hide every fusion through it)") from None
            if name not in self.schemas:
                raise GraphFileError(f"{exc} (the file carries no schema to stand in for it)") from None
            if out is _NO_VAL:
                raise GraphFileError(f"{exc} (the file carries its schema but no output for this node)") from None
            make = self.standins.op if called else self.standins.functionalized
            return make(name, self.schemas[name], out)
        saved = self.schemas.get(name)
        if saved is not None and isinstance(target, torch._ops.OpOverload) and str(target._schema) != saved \
                and name not in self.warned:
            self.warned.add(name)  # e.g. a dump from another vLLM version than the ops registered here
            log.warning("eqsat: op %s is registered here as %r but was saved as %r", name, str(target._schema), saved)
        return target

    def decode(self, value: object, out: object = _NO_VAL) -> object:
        """A saved argument; ``out`` is the saved output of its node (for the stand-in of an op value)."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [self.decode(v, out) for v in value]
        if not isinstance(value, dict) or len(value) != 1:
            raise GraphFileError(f"bad value {value!r}")
        ((kind, body),) = value.items()
        tables = {"dtype": _DTYPES, "layout": _LAYOUTS, "memory_format": _FORMATS}
        if kind in tables and body in tables[kind]:
            return tables[kind][body]
        if kind == "node" and body in self.env:
            return self.env[body]
        if kind == "float" and body in ("inf", "-inf", "nan"):
            return float(body)
        if kind == "device" and isinstance(body, str):
            return torch.device(body)
        if kind == "symint":
            return self.size(body)
        if kind == "op" and isinstance(body, str):
            return self.op(body, out)
        if kind == "tuple" and isinstance(body, list):
            return tuple(self.decode(v, out) for v in body)
        if kind == "dict" and isinstance(body, dict):
            return {k: self.decode(v, out) for k, v in body.items()}
        raise GraphFileError(f"bad value {value!r}" + (" (a node used before it is defined)" if kind == "node" else ""))

    def value(self, spec: object) -> object:
        """A fake value (a placeholder's input, a stand-in's output) from its saved spec: tensors are
        made by ``empty_strided`` in the load's fake mode."""
        if isinstance(spec, list):
            return [self.value(v) for v in spec]
        if isinstance(spec, dict) and set(spec) == {"tuple"} and isinstance(spec["tuple"], list):
            return tuple(self.value(v) for v in spec["tuple"])
        if not (isinstance(spec, dict) and set(spec) == {"tensor"}):
            return self.decode(spec)
        t = spec["tensor"]
        if not isinstance(t, dict) or not {"shape", "stride", "dtype"} <= set(t):
            raise GraphFileError(f"bad tensor spec {t!r}")
        dtype = self.decode({"dtype": t["dtype"]})
        device = torch.device(str(t.get("device", "cpu")))
        with self.mode:
            return torch.empty_strided([self.size(d) for d in t["shape"]], [self.size(s) for s in t["stride"]],
                                       dtype=dtype, device=device)


def loads(text: str) -> fx.GraphModule:
    """The graph of a JSON text written by :func:`dumps`, every node with ``meta["val"]``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphFileError(f"not a saved graph: invalid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GraphFileError(f"not a saved graph: expected a JSON object with \"format\": \"{FORMAT}\"")
    if data.get("version") not in READS:
        raise GraphFileError(f"saved graph version {data.get('version')!r} is not supported (this eqsat reads "
                             f"versions {', '.join(map(str, READS))})")
    if not isinstance(data.get("symbols"), dict) or not isinstance(data.get("nodes"), list):
        raise GraphFileError("saved graph lacks \"symbols\" (an object) or \"nodes\" (a list)")
    if not isinstance(data.get("schemas", {}), dict):
        raise GraphFileError("saved graph's \"schemas\" is not an object")
    loader = _Loader(data["symbols"], data.get("schemas", {}))
    graph = fx.Graph()
    inputs: list[object] = []
    for entry in data["nodes"]:
        try:
            _add_node(graph, loader, entry, inputs)
        except GraphFileError as exc:
            name = entry.get("name") if isinstance(entry, dict) else None
            raise GraphFileError(f"node {name!r}: {exc}") from None
    gm = fx.GraphModule(torch.nn.Module(), graph)
    with enable_python_dispatcher():  # as capture.trace_tokens: keeps constant_pad_nd from specializing symbols
        FakeTensorProp(gm, loader.mode).propagate_dont_convert_inputs(*inputs)
    graph.output_node().meta.pop("val", None)  # post-grad graphs carry no value on the output node
    return gm


def _add_node(graph: fx.Graph, loader: _Loader, entry: object, inputs: list[object]) -> None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise GraphFileError(f"bad node entry {entry!r}")
    op, name = entry.get("op"), entry["name"]
    if op == "placeholder":
        node = graph.placeholder(name)
        inputs.append(loader.value(entry.get("val")))
    elif op in ("call_function", "output"):
        out = entry.get("val", _NO_VAL)
        args, kwargs = loader.decode(entry.get("args", []), out), loader.decode({"dict": entry.get("kwargs", {})}, out)
        assert isinstance(args, list) and isinstance(kwargs, dict)
        if op == "output":
            node = graph.output(args[0] if args else None)
        else:
            target = loader.op(str(entry.get("target")), out, called=True)
            node = graph.create_node("call_function", target, tuple(args), kwargs, name)
    else:
        raise GraphFileError(f"unsupported node op {op!r}")
    if node.name != name:
        raise GraphFileError(f"duplicate or invalid node name {name!r}")
    if isinstance(entry.get("stack_trace"), str):
        node.meta["stack_trace"] = entry["stack_trace"]
    loader.env[name] = node


def load(path: str | Path) -> fx.GraphModule:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise GraphFileError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return loads(text)
    except GraphFileError as exc:
        raise GraphFileError(f"{path}: {exc}") from None
