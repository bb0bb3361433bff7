"""Import: an FX graph becomes terms (pure Python), facts and roots. Nothing here touches egglog.

Entry point: :func:`import_graph`. Each FX node becomes exactly one of:
- a **term**: a catalog op, a view op (``Reshape`` to its output shape), a ``getitem`` (``Get``), or a
  pure ATen/prims op with at most three tensor inputs (``A0..A3``, constants in a side table);
- an **opaque leaf** (``Leaf i``): placeholders, attributes, anything unknown, mutating, random or
  impure, or reading / producing a value some node mutates (or an alias of one); it is a term only
  where a term reads it, and never a root.
The **epilogue** is the run of ``copy_(input, value)`` nodes just before the output, each the only
write to a graph input (functionalization's write-back); it does not make the input mutable earlier.

Invariants: every value a term reads is immutable up to the epilogue, so emitted code may compute it
anywhere its inputs exist before the epilogue; opaque nodes are never moved, copied or removed (an
epilogue self-copy may be erased); the values opaque nodes and the output read are extraction's roots.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.fx as fx
from torch._library.utils import get_layout_constraint_tag
from torch.fx.node import map_aggregate

from eqsat.core.egraph import TensorFacts
from eqsat.core.errors import EqSatInputError
from eqsat.core.ir import LEAF, MAX_GENERIC_TENSOR_ARGS, dim_key, dtype_name, shape_key
from eqsat.core.spelling import VocabIndex, op_schema
from eqsat.fx.bind import bind, bind_functionalized
from eqsat.fx.fake_value import is_contiguous
from eqsat.fx.output_layouts import sym_expr
from eqsat.fx.preconditions import tie_dims
from eqsat.kernels.catalog import Catalog

aten = torch.ops.aten
AUTO_FUNCTIONALIZED = torch.ops.higher_order.auto_functionalized
BUDGET_EVERY = 256
VIEW_OPS = frozenset({
    aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.squeeze.dim,
    aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default,
})
ALLOCATIONS = frozenset({aten.empty.memory_format, aten.empty_like.default, aten.empty_strided.default,
                         aten.new_empty.default, aten.new_empty_strided.default})  # pure, may be erased when dead
NEVER_TERMS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                         "sym_size", "sym_stride", "sym_numel", "sym_storage_offset"})


@dataclass(frozen=True, slots=True)
class Arg:
    """A term argument that is the value of FX node number ``node``."""

    node: int


@dataclass(frozen=True)
class Slot:
    """Where the ``i``-th tensor input goes in a generic op's argument template."""

    i: int


@dataclass(frozen=True)
class GenericOp:
    """A pure ATen/prims call with its tensor inputs cut out (``Slot``s), shared by equal calls."""

    target: torch._ops.OpOverload
    args: tuple
    kwargs: dict


Term = tuple[str, tuple]
ABSORBED = object()  # an auto_functionalized node whose one output its getitem carries as a term


@dataclass
class Imported:
    graph: fx.Graph
    nodes: list[fx.Node]
    terms: dict[int, Term]
    facts: dict[int, TensorFacts]
    roots: list[int]
    uses: list[tuple[fx.Node, int]]  # (opaque or output consumer, index of the value it reads)
    generic: list[GenericOp] = field(default_factory=list)
    shape_args: dict[str, object] = field(default_factory=dict)
    vocabularies: list[str] = field(default_factory=list)
    opaque: dict[int, str] = field(default_factory=dict)  # node index -> why it is opaque
    fixed_layout: set[int] = field(default_factory=set)  # values read with their strides fixed (fixes_strides)
    absorbed: set[int] = field(default_factory=set)  # auto_functionalized nodes folded into their getitem
    projection_index: dict[int, dict[int, int]] = field(default_factory=dict)  # node -> output j -> getitem k
    epilogue: list[fx.Node] = field(default_factory=list)  # see the module docstring
    shape_env: object | None = None  # the graph's ShapeEnv (of its fake values), if it has symbols
    facts_exact: bool = True  # the facts are the fake values' own (no dim tied or specialized since)

    def read_by_opaque(self) -> set[int]:
        """The values an opaque op reads (not the output): a kernel Inductor calls, as a GEMM."""
        return {j for consumer, j in self.uses if consumer.op != "output"}


def graph_of(obj: object) -> fx.Graph:
    if isinstance(obj, fx.GraphModule):
        return obj.graph
    if isinstance(obj, fx.Graph):
        return obj
    raise EqSatInputError(
        f"expected a torch.fx.GraphModule or torch.fx.Graph, got {type(obj).__name__}; "
        "trace the model first (torch.fx.symbolic_trace, make_fx, or a torch.compile custom pass)")


def _val(node: fx.Node) -> object:
    if "val" not in node.meta:
        raise EqSatInputError(
            f"node {node.name!r} ({node.op} {node.target}) has no meta['val']; the optimizer needs the "
            "fake-tensor values Inductor attaches to post-grad graphs (or run "
            "torch.fx.passes.fake_tensor_prop.FakeTensorProp on the module first)")
    return node.meta["val"]


def _shape_env(nodes: Sequence[fx.Node]) -> object | None:
    """The shape environment of the graph's symbolic values (a SymInt placeholder's, or a fake value's)."""
    for n in nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt):
            return v.node.shape_env
        mode = getattr(v, "fake_mode", None)
        if mode is not None and mode.shape_env is not None:
            return mode.shape_env
        if n.op != "placeholder":
            break
    return None


def facts_of(val: object, memo: dict[tuple, TensorFacts]) -> TensorFacts | None:
    """The facts of a value (``None`` for a non-tensor). ``memo``: the facts of one graph's values by layout
    (dtype, sizes and strides, symbolic ones as expressions): its layers repeat a few layouts."""
    if not isinstance(val, torch.Tensor):
        return None
    shape = val.shape
    key = (val.dtype, *map(sym_expr, shape), None, *map(sym_expr, val.stride()))
    got = memo.get(key)
    if got is None:
        try:
            contiguous = is_contiguous(val, shape)
        except Exception:  # data-dependent symbolic strides: say nothing we cannot prove
            contiguous = False
        got = memo[key] = TensorFacts(dtype_name(val.dtype), tuple(map(dim_key, shape)), contiguous)
    return got


def _mutated_args(node: fx.Node) -> list[fx.Node]:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return []
    out = []
    for i, a in enumerate(op_schema(target).arguments):
        if not a.written:
            continue
        value = node.kwargs.get(a.name, node.args[i] if i < len(node.args) else None)
        out.extend(x for x in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(x, fx.Node))
    return out


def _aliases_input(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and op_schema(target).returns_alias


def epilogue(nodes: Sequence[fx.Node], writes: dict[fx.Node, list[fx.Node]]) -> list[fx.Node]:
    """The trailing ``copy_(placeholder, value)`` nodes of a graph's ``nodes``, each the only write to
    its placeholder; ``writes``: the values each node writes (``_mutated_args``; none for a node left out)."""
    end = len(nodes) - 1 if nodes and nodes[-1].op == "output" else len(nodes)
    start = end
    while start > 0 and nodes[start - 1].target is aten.copy_.default \
            and isinstance(nodes[start - 1].args[0], fx.Node) and nodes[start - 1].args[0].op == "placeholder":
        start -= 1
    tail = nodes[start:end]
    written = [n.args[0] for n in tail]
    others = {m for n, w in writes.items() if n not in tail for m in w}
    return [n for n in tail if written.count(n.args[0]) == 1 and n.args[0] not in others]


def mutated_values(nodes: Sequence[fx.Node], writes: dict[fx.Node, list[fx.Node]],
                   after_all: Sequence[fx.Node] = ()) -> set[fx.Node]:
    """Values some node of ``nodes`` writes (``writes``, as ``epilogue`` takes it), closed over aliasing
    (a view of a mutated value, or its base); the writes of ``after_all`` (the epilogue) are not counted."""
    mutated: set[fx.Node] = set()
    skip = set(after_all)
    for n, w in writes.items():
        if n not in skip:
            mutated.update(w)
    changed = bool(mutated)
    while changed:
        changed = False
        for n in nodes:
            if not _aliases_input(n) or n.op != "call_function":
                continue
            bases = [a for a in n.all_input_nodes]
            if n in mutated and not mutated.issuperset(bases):
                mutated.update(bases)
                changed = True
            elif n not in mutated and any(b in mutated for b in bases):
                mutated.add(n)
                changed = True
    return mutated


def _opaque_reason(node: fx.Node, mutated: set[fx.Node], by_target: dict[object, str | None]) -> str | None:
    """Why ``node`` stays opaque, or None; ``by_target`` memoises what depends on an op alone."""
    if node.op != "call_function":
        return f"{node.op} node"
    if mutated and (node in mutated or any(a in mutated for a in node.all_input_nodes)):
        return "reads or produces a value that is mutated in place"
    target = node.target
    if target is operator.getitem or target is AUTO_FUNCTIONALIZED:
        return None
    if target not in by_target:
        by_target[target] = _op_reason(node)
    return by_target[target]


def _op_reason(node: fx.Node) -> str | None:
    """What makes an op opaque whatever its arguments (``Node.is_impure`` reads only the op of an
    ``OpOverload``: its schema, tags and torch's side-effect registries)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return f"unknown callable {getattr(target, '__name__', target)!r}"
    if target._schema.is_mutable:
        return "mutates its arguments"
    if torch.Tag.nondeterministic_seeded in target.tags:
        return "random"
    if node.is_impure():
        return "side effects"
    return None


def fixes_strides(consumer: fx.Node) -> bool:
    """Whether Inductor hands ``consumer`` its inputs with the strides they had when traced: the graph's
    output (``keep_output_stride``) and a custom op (torch's default layout constraint for them,
    ``needs_exact_strides``, or a tag asking for fixed strides); ATen's own ops take any layout. A value
    an emitted view gives other strides is then copied to them."""
    if consumer.op == "output":
        return True
    target = consumer.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return get_layout_constraint_tag(target) != torch._C.Tag.flexible_layout


class _Importer:
    def __init__(self, graph: fx.Graph, catalog: Catalog, vocab: VocabIndex,
                 check_budget: Callable[[], None] | None) -> None:
        self.graph, self.catalog, self.vocab = graph, catalog, vocab
        self.check_budget = check_budget or (lambda: None)
        self.nodes = list(graph.nodes)
        self.index = {n: i for i, n in enumerate(self.nodes)}
        self.out = Imported(graph, self.nodes, {}, {}, [], [])
        self.generic_keys: dict[str, int] = {}
        # auto_functionalized nodes: FX getitem index -> constructor output (multi-output ops), or
        # the term each getitem stands for when the op has a single output (the node is absorbed)
        self.af_outputs: dict[int, dict[int, int]] = {}
        self.af_single: dict[int, Term] = {}

    def run(self) -> Imported:
        writes = {n: w for n in self.nodes if (w := _mutated_args(n))}  # what each node writes in place
        self.out.epilogue = epilogue(self.nodes, writes)
        mutated = mutated_values(self.nodes, writes, self.out.epilogue)
        for i, node in enumerate(self.nodes):
            if i % BUDGET_EVERY == 0:
                self.check_budget()
            if node.op == "output":
                self._use(node)
                continue
            if node.op == "placeholder":
                _val(node)
            reason = _opaque_reason(node, mutated, self.vocab.op_reasons)
            term = None if reason else self._term(node)
            if term is ABSORBED:
                self.out.absorbed.add(i)
            elif term is None:
                self.out.opaque[i] = reason or "no term for this op"
                self.out.terms[i] = (LEAF, (i,))
                self._use(node)
            else:
                self.out.terms[i] = term
        self.out.roots = sorted({i for _, i in self.out.uses})
        read = {a.node for _, args in self.out.terms.values() for a in args if isinstance(a, Arg)}
        for i in [i for i, (op, _) in self.out.terms.items() if op == LEAF and i not in read]:
            del self.out.terms[i]  # no term reads it and it is no root: its class could only ever hold it
        layouts: dict[tuple, TensorFacts] = {}
        for i in self.out.terms:  # the facts of the values loaded, and of no other
            facts = facts_of(self.nodes[i].meta.get("val"), layouts)
            if facts is not None:
                self.out.facts[i] = facts
        # what the graph's own ops require of dims
        self.out.facts_exact = not tie_dims(self.out.terms, self.out.facts, self.catalog)
        self.out.shape_env = _shape_env(self.nodes)
        return self.out

    def _use(self, consumer: fx.Node) -> None:
        fixed = fixes_strides(consumer)
        for a in consumer.all_input_nodes:
            j = self.index[a]
            if j not in self.out.opaque:
                self.out.uses.append((consumer, j))
                if fixed:
                    self.out.fixed_layout.add(j)

    def _term(self, node: fx.Node) -> Term | None:
        target = node.target
        val = _val(node)
        if target is operator.getitem:
            src, i = node.args
            if not isinstance(src, fx.Node) or not isinstance(i, int):
                return None
            j = self.index[src]
            if j in self.af_single:
                return self.af_single[j]
            return ("Get", (Arg(j), self.af_outputs.get(j, {}).get(i, i)))
        if target is AUTO_FUNCTIONALIZED:
            return self._functionalized(node)
        for vocab, spelling in self.vocab.candidates(target):  # none fits: a view or generic op
            bound = bind(node, spelling, self.catalog[spelling.constructor]) \
                if spelling.constructor in self.catalog else None
            if bound is None:
                continue
            if vocab.name not in self.out.vocabularies:
                self.out.vocabularies.append(vocab.name)
            return (spelling.constructor, tuple(Arg(self.index[v]) if isinstance(v, fx.Node) else v
                                                for v in bound))
        if target in VIEW_OPS:
            x = node.args[0]
            if not isinstance(val, torch.Tensor) or not isinstance(x, fx.Node):
                return None
            key = shape_key(map(dim_key, val.shape))
            if target in (aten.view.default, aten.reshape.default, aten._unsafe_view.default):
                self.out.shape_args.setdefault(key, node.args[1])
            return ("Reshape", (Arg(self.index[x]), key))
        return self._generic(node, val)

    def _functionalized(self, node: fx.Node) -> Term | object | None:
        """``auto_functionalized(op, ...)`` of a mutating op some vocabulary spells (vLLM's ``_C`` ops
        writing into ``empty`` buffers): getitem k (k >= 1) is the new value of the k-th mutated argument."""
        op = node.args[0] if node.args else None
        if not isinstance(op, torch._ops.OpOverload):
            return None
        mutable = [a.name for a in op_schema(op).arguments if a.written]
        for vocab, spelling in self.vocab.candidates(op):
            if not spelling.functionalized or spelling.constructor not in self.catalog:
                continue
            bound = bind_functionalized(node, op, spelling, self.catalog[spelling.constructor])
            outputs = {1 + mutable.index(m): j for j, m in enumerate(spelling.mutated) if m in mutable}
            if bound is None or len(outputs) != len(spelling.mutated):
                continue
            if not all(u.target is operator.getitem and u.args[1] in outputs for u in node.users):
                return None
            if vocab.name not in self.out.vocabularies:
                self.out.vocabularies.append(vocab.name)
            term = (spelling.constructor, tuple(Arg(self.index[v]) if isinstance(v, fx.Node) else v for v in bound))
            i = self.index[node]
            if len(outputs) == 1:
                self.af_single[i] = term
                return ABSORBED
            self.af_outputs[i] = outputs
            self.out.projection_index[i] = {j: k for k, j in outputs.items()}
            return term
        return None

    def _generic(self, node: fx.Node, val: object) -> Term | None:
        target = node.target
        if target.namespace not in ("aten", "prims") or target._opname in NEVER_TERMS:
            return None
        outs = val if isinstance(val, (tuple, list)) else [val]
        if not outs or not all(isinstance(v, torch.Tensor) for v in outs):
            return None
        tensors: list[fx.Node] = []

        def cut(a: object) -> object:
            if isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
                tensors.append(a)
                return Slot(len(tensors) - 1)
            return a

        args = map_aggregate(node.args, cut)
        kwargs = map_aggregate(dict(node.kwargs), cut)
        if len(tensors) > MAX_GENERIC_TENSOR_ARGS:
            return None
        key_text = f"{target}|{args!r}|{kwargs!r}"
        key = self.generic_keys.get(key_text)
        if key is None:
            key = self.generic_keys[key_text] = len(self.out.generic)
            self.out.generic.append(GenericOp(target, args, kwargs))
        return (f"A{len(tensors)}", (str(target), key, *(Arg(self.index[t]) for t in tensors)))


def import_graph(graph_or_module: object, catalog: Catalog, vocab: VocabIndex,
                 check_budget: Callable[[], None] | None = None) -> Imported:
    """Turn an FX graph into terms, facts and roots (see the module docstring).

    ``check_budget`` is called every ``BUDGET_EVERY`` nodes and may raise to stop the import."""
    graph = graph_of(graph_or_module)
    return _Importer(graph, catalog, vocab, check_budget).run()
