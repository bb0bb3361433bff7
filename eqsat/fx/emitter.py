"""Emit: write an extraction back into the same FX graph, changing only what changed.

Entry point :func:`emit`. For each root, in graph order of its consumer, the chosen e-node of its
class is materialised just before that consumer: an original e-node whose FX node sits earlier with
inputs materialising to the same FX nodes is reused; otherwise a node is created (a copy of the
original call with new inputs, a ``getitem``, a ``reshape``, a catalog op in the input graph's
vocabulary, or a generic ATen call; an Inductor twin keeps the graph's own chain for it where there is
one, else inlines its reference's ATen), except that a ``getitem`` of a new kernel *adopts* an original
``getitem`` of its e-class (moved before that consumer and repointed) when all its users sit at or
after that consumer. New nodes get ``meta["val"]`` as ``eqsat.fx.new_values`` works it out (the input
graph's value of the class where a kernel's fake agrees, else the op's own). Then uses are redirected,
written or rewired nodes are checked as ``Graph.lint`` does (``check_order``), and pure nodes left without
users are erased.

Invariants: any failure before erasure undoes every change; erasure cannot break a checked graph
(``erase_node`` refuses a node that still has users).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import torch
import torch.fx as fx
from torch.fx.node import map_aggregate

from eqsat.core.egraph import EGraph, ENode, Ref, Selection
from eqsat.core.ir import LEAF, dtype_from_name
from eqsat.core.spec import KernelSpec
from eqsat.core.spelling import Spelling, VocabIndex, op_schema
from eqsat.fx.importer import ALLOCATIONS, Arg, Imported, Slot
from eqsat.fx.new_values import NewValues
from eqsat.fx.output_layouts import OutputLayouts, layout_summary
from eqsat.fx.traces import Traces
from eqsat.kernels.catalog import Catalog
from eqsat.kernels.inductor import OverHeads, site_heads, stands_for_chain

_VIEWS = (torch.ops.aten.view.default, torch.ops.aten.reshape.default)
CONE_MAX = 256  # original nodes an Inductor twin's kept chain may span (``_kept_chain``)


@lru_cache(maxsize=512)
def node_name(target: object) -> str:
    """The name FX gives a node that calls ``target`` (FX works it out with regular expressions for
    every node it creates; a target's name never changes)."""
    return fx.Graph()._target_to_str(target)  # type: ignore[arg-type]


@dataclass
class EmitResult:
    created: list[fx.Node] = field(default_factory=list)
    adopted: list[fx.Node] = field(default_factory=list)  # original getitems now reading a new node
    erased: int = 0
    kernels: list[str] = field(default_factory=list)  # catalog ops created, by constructor name

    @property
    def changed(self) -> bool:
        return bool(self.created) or bool(self.adopted) or self.erased > 0


class SiteError(RuntimeError):
    """A new e-node emit could not write (its op refused the inputs, a shape it cannot spell): the
    graph is left as it was, and the caller may extract again without that e-node (``enode``, an
    index into the e-graph's nodes) and emit the rest."""

    def __init__(self, enode: int, op: str, at: str, reason: str) -> None:
        super().__init__(f"{op} before {at}: {reason}")
        self.enode, self.op, self.at, self.reason = enode, op, at, reason


class _Emitter:
    def __init__(self, imported: Imported, egraph: EGraph, selection: Selection, class_of_node: dict[int, int],
                 enode_of_node: dict[int, int], catalog: Catalog, vocab: VocabIndex, layouts: OutputLayouts | None,
                 spelling_of: Callable[[ENode], Spelling | None] | None = None, traces: Traces | None = None) -> None:
        self.im, self.eg, self.sel, self.catalog, self.vocab = imported, egraph, selection, catalog, vocab
        self.spelling_of = spelling_of
        self.traces = traces if traces is not None else Traces()
        self.graph = imported.graph
        self.pos = {n: i for i, n in enumerate(imported.nodes)}
        self.class_of_node = class_of_node
        self.original: dict[int, int] = {}  # e-node -> the first FX node whose own term it is
        for i in sorted(enode_of_node):
            self.original.setdefault(enode_of_node[i], i)
        self.memo: dict[int, fx.Node] = {}
        self.getitems: dict[int, list[fx.Node]] = {}  # e-class -> its original getitems, in graph order
        for i, n in enumerate(imported.nodes):
            if n.target is operator.getitem and i in class_of_node and i not in imported.opaque:
                self.getitems.setdefault(class_of_node[i], []).append(n)
        self.moves: list[tuple[fx.Node, fx.Node, tuple]] = []  # adopted getitem, its old prev and args
        self.result = EmitResult()
        self.values = NewValues(imported, egraph, class_of_node, layouts if layouts is not None else OutputLayouts())

    # -- materialisation ---------------------------------------------------------------------
    def value(self, eclass: int, anchor: fx.Node) -> fx.Node:
        """The FX node (or tuple, for an inlined chain) of ``eclass``, materialised before ``anchor``.
        Iterative, children first: a deep graph whose early nodes are made again needs no recursion."""
        got = self.memo.get(eclass)
        if got is not None:
            return got
        todo, parent = [eclass], {eclass: -1}
        while todo:
            c = todo[-1]
            if c in self.memo:
                todo.pop()
                continue
            enode = self.eg.nodes[self.sel[c]]
            missing = [k for k in enode.children if k not in self.memo] if enode.op != LEAF else []
            if missing:
                for k in reversed(missing):
                    parent.setdefault(k, c)
                todo.extend(reversed(missing))
                continue
            todo.pop()
            try:
                self.memo[c] = self._materialise(enode, anchor)
            except SiteError:
                raise
            except Exception as exc:
                site = self._site_of(c, parent)
                if site is None:
                    raise
                first = (str(exc).strip().splitlines() or [""])[0][:400]
                raise SiteError(self.sel[site], self.eg.nodes[self.sel[site]].op, anchor.name,
                                f"{type(exc).__name__}: {first}") from exc
        return self.memo[eclass]

    def _site_of(self, eclass: int, parent: dict[int, int]) -> int | None:
        """The nearest class on the way from ``eclass`` up to the root asked for whose chosen e-node is
        new (no FX node's own term): the site a failure there is charged to; None if there is none."""
        c = eclass
        while c != -1:
            idx = self.sel[c]
            if idx not in self.original and self.eg.nodes[idx].op != LEAF:
                return c
            c = parent.get(c, -1)
        return None

    def _materialise(self, enode: ENode, anchor: fx.Node) -> fx.Node:
        """``enode``'s FX node, its children's already made (``memo``)."""
        idx = self.original.get(self.sel[enode.eclass])
        if enode.op == LEAF:
            node = self.im.nodes[enode.args[0]]
            if self.pos[node] >= self.pos[anchor]:
                raise RuntimeError(f"value {node.name} is defined after its new use {anchor.name}")
            return node
        if idx is not None:
            return self._from_original(idx, enode, anchor)
        return self._create(enode, anchor)

    def _from_original(self, idx: int, enode: ENode, anchor: fx.Node) -> fx.Node:
        orig = self.im.nodes[idx]
        _, targs = self.im.terms[idx]
        inputs = {self.im.nodes[a.node]: self.value(self.class_of_node[a.node], anchor)
                  for a in targs if isinstance(a, Arg)}
        if any(isinstance(v, tuple) for v in inputs.values()):
            return self._create(enode, anchor)
        if self.pos[orig] < self.pos[anchor] and all(k is v for k, v in inputs.items()):
            return orig
        with self.graph.inserting_before(anchor):
            node = self.graph.node_copy(orig, lambda n: inputs.get(n, n))
        node.meta = {k: v for k, v in orig.meta.items() if k in ("val", "stack_trace", "nn_module_stack")}
        self.result.created.append(node)
        return node

    def _create(self, enode: ENode, anchor: fx.Node) -> fx.Node:
        if enode.op == "Get" or enode.op in self.catalog:
            self.values.reuse.add(enode.eclass)

        def kid(a: object) -> object:
            return self.value(a.eclass, anchor) if isinstance(a, Ref) else a

        args = [kid(a) for a in enode.args]
        if enode.op == "Get":
            if isinstance(args[0], tuple):  # an inlined multi-output chain
                return args[0][args[1]]
            index = args[1]
            if isinstance(args[0], fx.Node) and self.pos.get(args[0]) in self.im.projection_index:
                index = self.im.projection_index[self.pos[args[0]]][index]  # auto_functionalized numbering
            adopted = self._adopt(enode.eclass, args[0], index, anchor)
            if adopted is not None:
                return adopted
            return self._call(operator.getitem, (args[0], index), {}, anchor, enode.eclass)
        if enode.op == "Reshape":
            return self._call(torch.ops.aten.reshape.default, (self._unviewed(args[0]), self._shape_arg(args[1])),
                              {}, anchor, enode.eclass)
        if enode.op in self.catalog:
            spec = self.catalog[enode.op]
            named = {p: dtype_from_name(a) if sort == "dtype" else a
                     for (p, sort), a in zip(spec.params, args, strict=True)}
            spelling = self.spelling_of(enode) if self.spelling_of is not None else \
                self.vocab.spelling_for(enode.op, self.im.vocabularies)
            if spelling is not None:
                op = spelling.overload()
                if op_schema(op).returns_alias:
                    self.values.reuse.discard(enode.eclass)  # a view: its strides are its own
                node = self._call(op, spelling.call_args(named), dict(spelling.fixed), anchor, enode.eclass,
                                  kernel=enode)
            elif spec.expand is not None:
                inputs = [named[p] for p in spec.param_names]
                node = self._kept_chain(enode, inputs, anchor) if stands_for_chain(spec) else None
                if node is None:
                    node = self._inline(self._over_heads(spec, enode), inputs, anchor)
            else:
                raise RuntimeError(f"no registered op spells {enode.op} in vocabularies {self.im.vocabularies}")
            if spec.is_fused:
                self.result.kernels.append(enode.op)
            return node
        if enode.op.startswith("A") and enode.op[1:].isdigit():
            op = self.im.generic[enode.args[1]]
            tensors = args[2:]
            fill = lambda a: tensors[a.i] if isinstance(a, Slot) else a  # noqa: E731
            return self._call(op.target, map_aggregate(op.args, fill), map_aggregate(op.kwargs, fill), anchor,
                              enode.eclass)
        raise RuntimeError(f"cannot emit e-node {enode.op}")

    def _adopt(self, eclass: int, parent: object, index: object, anchor: fx.Node) -> fx.Node | None:
        """An original getitem of ``eclass`` moved just before ``anchor`` to read output ``index`` of
        ``parent``, a node emit created; None when the class has none whose every user sits at or after
        ``anchor`` (moved there, it must still come before each of them)."""
        if not isinstance(parent, fx.Node) or parent in self.pos:
            return None
        at = self.pos[anchor]
        whole = parent.meta.get("val")
        out = whole[index] if isinstance(whole, (tuple, list)) and isinstance(index, int) else None
        for node in self.getitems.get(eclass, ()):
            mine = node.meta.get("val")
            if out is not None and out is not mine and layout_summary(out) != layout_summary(mine):
                return None  # the kernel's output is laid out otherwise: a new getitem carries its value
            if all(self.pos.get(u, -1) >= at for u in node.users):
                self.getitems[eclass].remove(node)
                self.moves.append((node, node.prev, node.args))
                anchor.prepend(node)
                node.args = (parent, index)
                self.result.adopted.append(node)
                return node
        return None

    @cached_property
    def nodes_of_class(self) -> dict[int, list[fx.Node]]:
        """E-class -> the input graph's nodes of it, in graph order."""
        out: dict[int, list[fx.Node]] = {}
        for i, n in enumerate(self.im.nodes):
            if i in self.class_of_node:
                out.setdefault(self.class_of_node[i], []).append(n)
        return out

    def _unviewed(self, x: object) -> object:
        """``x``, or the value a view emit just wrote reads (a reshape of a view is a reshape of its source:
        Inductor fuses a twin over heads into one kernel only where no flat view sits between it and its
        reader, ``benchmarks/results/probe_heads_twin_fixed_h200.log``)."""
        while isinstance(x, fx.Node) and x.target in _VIEWS and x not in self.pos and isinstance(x.args[0], fx.Node):
            x = x.args[0]  # a node not among the imported ones is one emit wrote
        return x

    def _over_heads(self, spec: KernelSpec, enode: ENode) -> Callable[..., object]:
        """``spec.expand``, with a twin over heads given this site's H (``site_heads``)."""
        fn = spec.expand
        assert fn is not None
        if not isinstance(fn, OverHeads):
            return fn
        h = site_heads(spec, enode, self.eg.facts)
        if h is None:
            raise RuntimeError(f"{spec.name}: its rows are not a symbolic heads x tokens")
        return dataclasses.replace(fn, heads=h)

    def _kept_chain(self, enode: ENode, args: list[object], anchor: fx.Node) -> object | None:
        """The input graph's own nodes for an Inductor twin's outputs: the chain the twin stands for, as the
        graph wrote it (nothing traced, the user's own code for Inductor to compile). Each output's class
        needs an original node before ``anchor`` computed from the twin's tensor arguments alone (its cone
        of inputs, all original ATen calls, ends at the arguments' nodes, themselves original); None
        otherwise, and the twin is inlined from its reference."""
        bound = {a for a in args if isinstance(a, fx.Node)}
        if not all(a in self.pos for a in bound):
            return None
        outs = self.values.outputs(enode.eclass)
        if outs is None and enode.eclass in self.values.projections:
            return None
        classes = outs or [enode.eclass]
        kept = []
        for c in classes:
            node = next((n for n in self.nodes_of_class.get(c, ()) if self.pos[n] < self.pos[anchor]
                         and self._cone_within(n, bound)), None)
            if node is None:
                return None
            kept.append(node)
        return tuple(kept) if outs else kept[0]

    def _cone_within(self, out: fx.Node, bound: set[fx.Node]) -> bool:
        """Whether ``out`` is computed by original ATen calls from ``bound`` alone (what Inductor compiles
        itself: no custom op, opaque or lifted; at most ``CONE_MAX`` nodes)."""
        seen: set[fx.Node] = set()
        todo = [out]
        while todo:
            n = todo.pop()
            if n in bound or n in seen:
                continue
            seen.add(n)
            aten = n.target is operator.getitem or (isinstance(n.target, torch._ops.OpOverload)
                                                     and n.target.namespace in ("aten", "prims"))
            if not aten or n not in self.pos or self.pos[n] in self.im.opaque or len(seen) > CONE_MAX:
                return False
            todo.extend(n.all_input_nodes)
        return True

    def _inline(self, fn: Callable[..., object], args: list[object], anchor: fx.Node) -> object:
        """Copy the ATen trace of ``fn`` on the fake values of its tensor arguments before ``anchor``
        (``eqsat.fx.traces``: a trace is made once per key, its fake values computed again in another
        graph's mode)."""
        nodes = [a for a in args if isinstance(a, fx.Node)]
        sub = self.traces.graph(fn, args, [n.meta["val"] for n in nodes], self.values.fake_mode)
        placeholders = [n for n in sub.nodes if n.op == "placeholder"]
        val_map: dict[fx.Node, fx.Node] = dict(zip(placeholders, nodes, strict=True))
        with self.graph.inserting_before(anchor):
            out = self.graph.graph_copy(sub, val_map)
        self.result.created.extend(v for k, v in val_map.items() if k.op not in ("placeholder", "output"))
        return tuple(out) if isinstance(out, (list, tuple)) else out

    def _shape_arg(self, key: str) -> object:
        got = shape_arg(key, self.im.shape_args)
        if got is None:
            raise RuntimeError(f"cannot spell reshape to symbolic shape {key!r}")
        return got

    def _call(self, target: object, args: tuple, kwargs: dict, anchor: fx.Node, eclass: int,
              kernel: ENode | None = None) -> fx.Node:
        """A new node ``target(*args, **kwargs)`` before ``anchor``; its value is worked out (and, for a
        ``kernel``, the e-node it writes, checked with the op's registered fake) before the graph is touched."""
        val = self.values.of(target, args, kwargs, eclass, kernel)
        with self.graph.inserting_before(anchor):
            node = self.graph.call_function(target, args, kwargs, name=node_name(target))
        self.result.created.append(node)
        node.meta["val"] = val
        return node

def shape_arg(key: str, shape_args: dict[str, object]) -> object | None:
    """The shape argument emit writes for a reshape to shape ``key``: the input graph's own where it has
    one, else the dims with at most one symbolic dim as -1; None when it cannot be spelled."""
    if key in shape_args:
        return shape_args[key]
    dims = key.split(",") if key else []
    ints = [int(d) if d.lstrip("-").isdigit() else None for d in dims]
    if sum(d is None for d in ints) > 1:
        return None
    return [-1 if d is None else d for d in ints]


def check_order(graph: fx.Graph, written: list[fx.Node]) -> None:
    """What ``graph.lint()`` checks of the nodes emit wrote or rewired, the only ones it changed: each
    is in ``graph`` and reads only nodes of ``graph`` placed before it (lint walks every node twice).
    Raises ``RuntimeError`` otherwise."""
    order = {n: k for k, n in enumerate(graph.nodes)}
    for node in written:
        k = order.get(node)
        if k is None:
            raise RuntimeError(f"node {node.name} is not in the graph")
        for a in node.all_input_nodes:
            if order.get(a, k) >= k:
                raise RuntimeError(f"node {node.name} reads {a.name}, which is not a node of the graph before it")


def emit(imported: Imported, egraph: EGraph, selection: Selection, class_of_node: dict[int, int],
         enode_of_node: dict[int, int], catalog: Catalog, vocab: VocabIndex,
         check_budget: Callable[[], None] | None = None, layouts: OutputLayouts | None = None,
         spelling_of: Callable[[ENode], Spelling | None] | None = None, traces: Traces | None = None) -> EmitResult:
    """Write ``selection`` into the graph (see the module docstring): ``class_of_node`` and
    ``enode_of_node`` say where each FX node's own term is in ``egraph``. ``check_budget`` is called
    before each root and may raise: every change is then undone. ``layouts``: the kernels' output
    layouts kept across graphs (``eqsat.fx.output_layouts.OutputLayouts``; a pass's engine holds one), and
    ``traces`` the traces of inlined functions (``eqsat.fx.traces.Traces``; likewise).
    ``spelling_of``: the spelling to write a catalog e-node with (extraction's choice,
    ``eqsat.admissible.Admissible.spelling``; default: the vocabularies' first)."""
    em = _Emitter(imported, egraph, selection, class_of_node, enode_of_node, catalog, vocab, layouts, spelling_of, traces)
    graph = imported.graph
    replaced: list[tuple[fx.Node, fx.Node, fx.Node]] = []
    had_users = {n for n in imported.nodes if n.users}
    # nothing is computed inside the epilogue: it may have written the inputs a term reads
    fence = em.pos[imported.epilogue[0]] if imported.epilogue else len(imported.nodes)
    try:
        for consumer, j in sorted(imported.uses, key=lambda u: em.pos[u[0]]):
            if check_budget is not None:
                check_budget()
            old = imported.nodes[j]
            anchor = consumer if em.pos[consumer] < fence else imported.nodes[fence]
            new = em.value(class_of_node[j], anchor)
            if new is not old:
                consumer.replace_input_with(old, new)
                replaced.append((consumer, old, new))
        check_order(graph, [*em.result.created, *em.result.adopted, *(consumer for consumer, _, _ in replaced)])
    except BaseException:
        for consumer, old, new in reversed(replaced):
            consumer.replace_input_with(new, old)
        for node, prev, args in reversed(em.moves):  # back where it was, reading what it read
            node.args = args
            prev.append(node)
        for node in reversed(em.result.created):
            graph.erase_node(node)
        raise
    self_copies = [n for n in imported.epilogue if n.args[0] is n.args[1] and not n.users]
    for node in self_copies:  # copy_(x, x) writes nothing
        graph.erase_node(node)
        em.result.erased += 1
    for i in reversed(range(len(imported.nodes))):
        node = imported.nodes[i]
        if node in self_copies:
            continue
        # a pure node dies when we took its last use; an unused getitem goes too, since it would keep
        # a replaced multi-output op alive
        pure = i not in imported.opaque or node.target in ALLOCATIONS
        if pure and not node.users and (node in had_users or node.target is operator.getitem):
            graph.erase_node(node)
            em.result.erased += 1
    for node in reversed(em.result.created):
        if not node.users:
            graph.erase_node(node)
            em.result.created.remove(node)
    return em.result
