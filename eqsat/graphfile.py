"""Saved graphs: a post-grad FX graph as a JSON file, and back, with fake ``meta["val"]`` rebuilt.

``save(gm, path)`` / ``dumps(gm)`` write the graph the optimizer sees inside ``torch.compile`` or
vLLM — ATen ops, ``torch.ops.vllm.*`` / ``vllm_ir.*`` / ``_C.*`` (under
``torch.ops.higher_order.auto_functionalized``), ``operator.getitem`` — as one JSON object::

    {"format": "eqsat-fx-graph", "version": 1, "symbols": {"s77": 16},
     "nodes": [{"name": "arg1_1", "op": "placeholder",
                "val": {"tensor": {"shape": ["s77", 512], "stride": [512, 1],
                                   "dtype": "bfloat16", "device": "cpu"}}},
               {"name": "rms_norm", "op": "call_function", "target": "vllm_ir.rms_norm.default",
                "args": [{"node": "arg1_1"}, {"node": "arg2_1"}, 1e-06], "kwargs": {}}, ...]}

``load(path)`` / ``loads(text)`` rebuild the nodes (same names, targets, args) and then propagate
fake tensors through them from the placeholder specs (``FakeTensorProp`` under a ``ShapeEnv`` in
which each saved symbol is recreated with its own name and size hint), so every node carries
``meta["val"]`` again and ``eqsat.optimize`` / ``explain`` / ``check_equiv`` see the same graph.

Invariants:
- Nothing in a file is imported, unpickled or evaluated. A target resolves only as
  ``torch.ops.<ns>.<op>.<overload>`` (an op some library already registered),
  ``torch.ops.higher_order.<name>``, or one of the ``operator`` functions in ``OPERATORS``.
- Symbolic sizes are written as sums of products of ints and symbol names (``"512*s77 + 7"``);
  symbols are named ``s<digits>`` as Inductor names them. Anything else is refused when saving.
- Values: node refs, None / bool / int / float (inf and nan included) / str, dtypes, devices,
  layouts, memory formats, ops (the first argument of ``auto_functionalized``), lists, tuples,
  dicts with str keys, SymInts. ``get_attr`` nodes (constants) are not supported.
- Every error is a :class:`GraphFileError` naming what is wrong: the file, the version, the node,
  or the op and the namespace whose library must be registered first.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

FORMAT, VERSION = "eqsat-fx-graph", 1
OPERATORS: dict[str, Callable[..., Any]] = {
    f.__name__: f for f in (operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
                            operator.mod, operator.neg, operator.truediv)}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOL = re.compile(r"s(\d+)")
_TOKEN = re.compile(r"\s*(\d+|[A-Za-z_][A-Za-z0-9_]*|\*\*|[+\-*])")
_DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}
_LAYOUTS = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.layout)}
_FORMATS = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.memory_format)}
_STANDINS = "import vLLM, or call eqsat.vocab.vllm_standins.register_vllm_standins()"


class GraphFileError(ValueError):
    """A graph that cannot be saved, or a file that cannot be loaded; the message says why."""


# -- saving -----------------------------------------------------------------------------------------


def _expr(value: torch.SymInt | int) -> str | int:
    """A size as JSON: an int, or its expression when symbolic (checked to parse back)."""
    if isinstance(value, int):
        return value
    text = str(value.node.expr)
    try:
        _parse_terms(text)
    except GraphFileError:
        raise GraphFileError(f"symbolic size {text!r} is not a sum of products of ints and s<N> symbols; "
                             "it cannot be saved") from None
    return text


def _target_name(target: object) -> str:
    if isinstance(target, torch._ops.OpOverload):
        ns, _, op = target._schema.name.partition("::")
        return f"{ns}.{op}.{target._overloadname}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    if callable(target) and OPERATORS.get(getattr(target, "__name__", "")) is target:
        return f"operator.{target.__name__}"
    raise GraphFileError(f"cannot save a call to {target!r}: only torch.ops overloads, torch.ops.higher_order "
                         f"operators and operator.{{{', '.join(OPERATORS)}}} are supported")


def _encode(value: object) -> object:
    if isinstance(value, fx.Node):
        return {"node": value.name}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, torch.SymInt):
        return {"symint": _expr(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return {"op": _target_name(value)}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    raise GraphFileError(f"cannot save an argument of type {type(value).__name__}: {value!r}")


def _placeholder_val(node: fx.Node, symbols: dict[str, int]) -> object:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        sizes = [*val.shape, *val.stride()]
        spec = {"shape": [_expr(d) for d in val.shape], "stride": [_expr(s) for s in val.stride()],
                "dtype": str(val.dtype).removeprefix("torch."), "device": str(val.device)}
        encoded: object = {"tensor": spec}
    elif isinstance(val, torch.SymInt):
        sizes, encoded = [val], {"symint": _expr(val)}
    elif val is None or isinstance(val, (bool, int, float)):
        return _encode(val)
    else:
        raise GraphFileError(f"placeholder {node.name!r}: cannot save a value of type {type(val).__name__}")
    for size in sizes:
        if isinstance(size, torch.SymInt):
            for sym in size.node.expr.free_symbols:
                symbols[str(sym)] = int(size.node.shape_env.guarding_hint_or_throw(sym))
    return encoded


def dumps(graph_module: fx.GraphModule | fx.Graph) -> str:
    """The JSON text of a graph (see the module docstring); raises :class:`GraphFileError`."""
    graph = graph_module.graph if isinstance(graph_module, fx.GraphModule) else graph_module
    symbols: dict[str, int] = {}
    nodes: list[dict[str, object]] = []
    for n in graph.nodes:
        entry: dict[str, object] = {"name": n.name, "op": n.op}
        if n.op == "placeholder":
            entry["val"] = _placeholder_val(n, symbols)
        elif n.op == "call_function":
            entry["target"] = _target_name(n.target)
        elif n.op != "output":
            raise GraphFileError(f"node {n.name!r}: {n.op} nodes are not supported (only placeholder, "
                                 "call_function and output)")
        if n.op != "placeholder":
            entry["args"] = [_encode(a) for a in n.args]
            entry["kwargs"] = {k: _encode(v) for k, v in n.kwargs.items()}
        if n.meta.get("stack_trace"):
            entry["stack_trace"] = n.meta["stack_trace"]
        nodes.append(entry)
    for name in symbols:
        if not _SYMBOL.fullmatch(name):
            raise GraphFileError(f"symbol {name!r}: only backed sizes named s<N> can be saved")
    head = json.dumps({"format": FORMAT, "version": VERSION, "symbols": symbols})[:-1]
    return head + ', "nodes": [\n' + ",\n".join(json.dumps(n) for n in nodes) + "\n]}"  # a node a line


def save(graph_module: fx.GraphModule | fx.Graph, path: str | Path) -> None:
    Path(path).write_text(dumps(graph_module) + "\n")


# -- loading ----------------------------------------------------------------------------------------


def _parse_terms(text: str) -> list[tuple[int, list[str]]]:
    """``"2*s0**2 - s1 + 7"`` -> ``[(2, ["s0", "s0"]), (-1, ["s1"]), (7, [])]``; no eval.

    Grammar: ``expr := ["-"] term (("+" | "-") term)*``, ``term := factor ("*" factor)*``,
    ``factor := INT | NAME ["**" INT]``."""
    tokens: list[str] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise GraphFileError(f"bad size expression {text!r}")
        tokens.append(m.group(1))
        pos = m.end()
    tokens.append("")

    def bad() -> GraphFileError:
        return GraphFileError(f"bad size expression {text!r}")

    terms: list[tuple[int, list[str]]] = []
    i, sign = 0, 1
    if tokens[0] == "-":
        i, sign = 1, -1
    while True:
        coeff, names = sign, []
        while True:
            tok = tokens[i]
            if tok.isdigit():
                coeff, i = coeff * int(tok), i + 1
            elif _NAME.fullmatch(tok):
                power, i = 1, i + 1
                if tokens[i] == "**":
                    if not tokens[i + 1].isdigit():
                        raise bad()
                    power, i = int(tokens[i + 1]), i + 2
                names += [tok] * power
            else:
                raise bad()
            if tokens[i] != "*":
                break
            i += 1
        terms.append((coeff, names))
        if tokens[i] == "":
            return terms
        if tokens[i] not in ("+", "-"):
            raise bad()
        sign, i = (1 if tokens[i] == "+" else -1), i + 1


class _Loader:
    """One file being loaded: its symbols as SymInts, its nodes by name."""

    def __init__(self, symbols: Mapping[str, int]) -> None:
        self.shape_env = ShapeEnv()
        self.mode = FakeTensorMode(shape_env=self.shape_env, allow_non_fake_inputs=True)
        self.symbols: dict[str, torch.SymInt] = {}
        for name, hint in symbols.items():
            m = _SYMBOL.fullmatch(str(name))
            if m is None or not isinstance(hint, int) or isinstance(hint, bool):
                raise GraphFileError(f"bad symbol {name!r}: {hint!r} (expected s<N>: int hint)")
            self.symbols[name] = self._symbol(int(m.group(1)), hint)
        self.env: dict[str, fx.Node] = {}

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
        for coeff, names in _parse_terms(value):
            term: int | torch.SymInt = coeff
            for name in names:
                if name not in self.symbols:
                    raise GraphFileError(f"size {value!r} uses {name!r}, which is not in the file's symbols")
                term = term * self.symbols[name]
            total = total + term
        return total

    def decode(self, value: object) -> object:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [self.decode(v) for v in value]
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
            return resolve(body)
        if kind == "tuple" and isinstance(body, list):
            return tuple(self.decode(v) for v in body)
        if kind == "dict" and isinstance(body, dict):
            return {k: self.decode(v) for k, v in body.items()}
        raise GraphFileError(f"bad value {value!r}" + (" (a node used before it is defined)" if kind == "node" else ""))

    def example(self, spec: object) -> object:
        """The fake input of a placeholder from its saved spec."""
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


def resolve(name: str) -> Callable[..., Any]:
    """``"ns.op.overload"`` / ``"higher_order.name"`` / ``"operator.name"`` -> the callable; nothing
    else (no imports)."""
    parts = name.split(".")
    if not all(_NAME.fullmatch(p) and not p.startswith("__") for p in parts):
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
    try:
        target = getattr(getattr(getattr(torch.ops, ns), op), overload)
    except (AttributeError, RuntimeError):
        hint = _STANDINS if ns in ("vllm", "vllm_ir", "_C") else "import the library that defines them"
        raise GraphFileError(f"unknown op torch.ops.{name}: the {ns!r} ops must be registered before loading "
                             f"this graph ({hint})") from None
    if not isinstance(target, torch._ops.OpOverload):
        raise GraphFileError(f"torch.ops.{name} is not an op overload")
    return target


def loads(text: str) -> fx.GraphModule:
    """The graph of a JSON text written by :func:`dumps`, every node with ``meta["val"]``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphFileError(f"not a saved graph: invalid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GraphFileError(f"not a saved graph: expected a JSON object with \"format\": \"{FORMAT}\"")
    if data.get("version") != VERSION:
        raise GraphFileError(f"saved graph version {data.get('version')!r} is not supported (this eqsat reads "
                             f"version {VERSION})")
    if not isinstance(data.get("symbols"), dict) or not isinstance(data.get("nodes"), list):
        raise GraphFileError("saved graph lacks \"symbols\" (an object) or \"nodes\" (a list)")
    loader = _Loader(data["symbols"])
    graph = fx.Graph()
    inputs: list[object] = []
    for entry in data["nodes"]:
        try:
            _add_node(graph, loader, entry, inputs)
        except GraphFileError as exc:
            name = entry.get("name") if isinstance(entry, dict) else None
            raise GraphFileError(f"node {name!r}: {exc}") from None
    gm = fx.GraphModule(torch.nn.Module(), graph)
    FakeTensorProp(gm, loader.mode).propagate_dont_convert_inputs(*inputs)
    graph.output_node().meta.pop("val", None)  # post-grad graphs carry no value on the output node
    return gm


def _add_node(graph: fx.Graph, loader: _Loader, entry: object, inputs: list[object]) -> None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise GraphFileError(f"bad node entry {entry!r}")
    op, name = entry.get("op"), entry["name"]
    if op == "placeholder":
        node = graph.placeholder(name)
        inputs.append(loader.example(entry.get("val")))
    elif op in ("call_function", "output"):
        args, kwargs = loader.decode(entry.get("args", [])), loader.decode({"dict": entry.get("kwargs", {})})
        assert isinstance(args, list) and isinstance(kwargs, dict)
        if op == "output":
            node = graph.output(args[0] if args else None)
        else:
            node = graph.create_node("call_function", resolve(str(entry.get("target"))), tuple(args), kwargs, name)
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
