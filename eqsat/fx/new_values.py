"""The fake values (``meta["val"]``) of the nodes emit writes, worked out before the graph is touched.

Values equal in the e-graph have equal shapes and dtypes, so a catalog kernel or a projection reuses its
class's value from the input graph: a tuple class's, its projections' (those the graph holds, the others
made afresh). A kernel's registered fake is run first on the new inputs (once per layout key,
``eqsat.fx.output_layouts``; or, where the inputs' facts fix their strides, once per facts) and must give
the shapes and dtypes the class stands for; where it gives other strides, the node gets the op's own value.
A view or an ATen call is propagated through the fake mode (its strides are its own).
"""

from __future__ import annotations

import operator
from functools import cached_property

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.node import map_aggregate

from eqsat.core.egraph import EGraph, ENode, Ref, TensorFacts
from eqsat.core.ir import dtype_name
from eqsat.fx.fake_value import fake_value, row_major_strides
from eqsat.fx.importer import Imported
from eqsat.fx.output_layouts import OutputLayouts, layout_summary, shown


class NewValues:
    """The values of one emit's new nodes (the module docstring). ``reuse``: the classes whose new node may
    take the input graph's value (emit adds a kernel's and a projection's, and drops a view's)."""

    def __init__(self, imported: Imported, egraph: EGraph, class_of_node: dict[int, int],
                 layouts: OutputLayouts) -> None:
        self.im, self.eg, self.layouts = imported, egraph, layouts
        self.class_val = {class_of_node[i]: v for i, n in enumerate(imported.nodes)
                          if isinstance(v := n.meta.get("val"), torch.Tensor) and i in class_of_node}
        self.reuse: set[int] = set()
        self.projections: dict[int, dict[int, int]] = {}  # a tuple class -> its projections' classes by index
        for n in egraph.nodes:
            if n.op == "Get":
                self.projections.setdefault(n.children[0], {})[n.args[1]] = n.eclass

    @cached_property
    def fake_mode(self) -> FakeTensorMode | None:
        """The graph's fake mode, looked up the first time a new node's value must be computed: the mode
        of its first fake value (a graph's values share one; new values must belong to it too)."""
        first = next((v for n in self.im.nodes if isinstance(v := n.meta.get("val"), FakeTensor)), None)
        return first.fake_mode if first is not None else None

    def outputs(self, eclass: int) -> list[int] | None:
        """The classes of a tuple class's outputs, in order; None unless its projections number 0 … n-1."""
        outs = self.projections.get(eclass)
        if not outs or sorted(outs) != list(range(len(outs))):
            return None
        return [outs[i] for i in range(len(outs))]

    def known(self, eclass: int, partial: bool = False) -> object | None:
        """The class's value in the original graph: a tensor, or a tuple class's outputs' values (with
        None for an output that has none, if ``partial``); None when there is none."""
        val = self.class_val.get(eclass)
        if val is not None:
            return val
        outs = self.outputs(eclass)
        if outs and all(c in self.class_val for c in outs):
            return tuple(self.class_val[c] for c in outs)
        if partial and outs and any(c in self.class_val for c in outs):
            return tuple(self.class_val.get(c) for c in outs)
        return None

    def _facts_key(self, target: object, enode: ENode | None) -> tuple | None:
        """What a kernel's fake sees, from facts: the op, its inputs' facts and constants; None unless
        every input is contiguous (then facts fix its strides) and the facts are the fake values' own."""
        if enode is None or not self.im.facts_exact:
            return None
        facts = self.eg.facts
        ins = tuple(facts.get(c) for c in enode.children)
        if not all(f is not None and f.contiguous for f in ins):
            return None
        return (target, ins, tuple(a for a in enode.args if not isinstance(a, Ref)))

    def _out_facts(self, eclass: int) -> tuple:
        """The facts of a kernel's outputs: its projections' classes, in order, or its own class."""
        classes = self.outputs(eclass) or [eclass]
        return tuple(self.eg.facts.get(c) for c in classes)

    def of(self, target: object, args: tuple, kwargs: dict, eclass: int, kernel: ENode | None) -> object:
        """The value of a new node ``target(*args, **kwargs)`` standing for ``eclass``; ``kernel``: the
        catalog e-node it writes, if any (its op's fake is run on these inputs; what it raises, raises)."""
        if target is operator.getitem and isinstance(args[0], fx.Node):
            whole = args[0].meta.get("val")
            if isinstance(whole, (tuple, list)):
                return whole[args[1]]  # the very value the op gave
        # catalog kernels and projections reuse their class's fake value; views and ATen calls are
        # propagated, since their strides may differ from the original node's
        checked = kernel is not None and isinstance(target, torch._ops.OpOverload) and self.fake_mode is not None
        # a custom kernel may reuse the values of those of its outputs the original graph holds
        partial = checked and target.namespace != "aten"
        known = self.known(eclass, partial) if eclass in self.reuse else None
        if known is not None and not checked:
            return known
        whole = known is not None and not (isinstance(known, tuple) and None in known)
        facts_key = self._facts_key(target, kernel) if checked and whole else None
        if facts_key is not None and self.layouts.facts_checked.get(facts_key) == self._out_facts(eclass):
            return known  # these inputs' facts passed this op's fake, giving what the class holds
        vals = map_aggregate((args, kwargs), lambda a: a.meta["val"] if isinstance(a, fx.Node) else a)
        made = None
        if checked:
            if target.namespace == "aten" or known is None:  # the value is wanted: check the one made
                made = fake_value(target, vals[0], vals[1], self.fake_mode, self.class_val.get(eclass), self.layouts)
                got = layout_summary(made)
            else:  # only the layouts: kept per key, made once
                got = self.layouts.check(target, vals[0], vals[1], self.fake_mode)  # raises what the fake raises
            if known is not None and got is not None:
                want = layout_summary(known)
                if len(got) != len(want) or any(w is not None and (g is None or g[0::2] != w[0::2])
                                                for g, w in zip(got, want, strict=False)):
                    raise RuntimeError(f"{target} gives {shown(got)} where the value it stands for is {shown(want)}")
                if all(w is None or g == w for g, w in zip(got, want, strict=True)):
                    if facts_key is not None:
                        self.layouts.facts_checked[facts_key] = _as_facts(got)
                    # the outputs the graph has no value for are made afresh
                    return known if whole else self.layouts.value(target, vals[0], vals[1], self.fake_mode, known)
            known = None  # the op's own strides
        if known is not None:
            return known
        if made is not None:
            return made
        return fake_value(target, vals[0], vals[1], self.fake_mode, self.class_val.get(eclass), self.layouts)


def _as_facts(summary: tuple) -> tuple:
    """``layout_summary``'s outputs as the e-graph states facts (dims as ``fx_in`` keys them)."""
    out = []
    for s in summary:
        if s is None:
            out.append(None)
            continue
        shape = tuple(int(d) if getattr(d, "is_number", True) else str(d) for d in s[0])
        strides = row_major_strides(shape) if all(isinstance(d, int) for d in shape[1:]) else None
        out.append(TensorFacts(dtype_name(s[2]), shape, strides is not None and tuple(s[1]) == strides))
    return tuple(out)
