"""Repeats: the parts of a graph that are copies of one another (a model's layers), saturated once.

A **component** is a set of imported nodes, terms and the leaves they read, closed under reading: two
nodes are in one when one reads the other, when both read one leaf, or when both are the same term of
constants (egglog would make them one e-node). Two components are **copies** when, read in FX order,
they hold the same ops, constants, facts and root flags (read by an opaque op, by the output, with fixed
strides), each argument naming the same position. :func:`find` groups them; :meth:`Repeats.reduced` is the
graph less every copy but the first of each group (its *model*), which alone is loaded and saturated;
:meth:`Repeats.expand` then copies each model's e-classes for its copies in the serialized e-graph,
renaming its leaves, so the costs and emit see the whole graph; :meth:`Copied.on_models` extracts on the
reduced e-graph and gives each copy its model's choices (extraction falls back to the whole e-graph once
emit has dropped a site, which holds in one copy only).

Sound because every rule's query is connected through its term variables (``connected``; an engine whose
rules are not all so loads every copy, ``eqsat.engine.plan``): a match lies inside one component, and its actions add e-nodes over
that component's classes, so saturating the graph is saturating each component alone. The one thing
copied apart that one e-graph would share is a class of constants an action makes in several
components (no rule makes one now, a test says): each copy then has its own, equal, class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from eqsat.core.egraph import EGraph, ENode, Ref, Selection, TensorFacts
from eqsat.core.ir import LEAF
from eqsat.core.unionfind import UnionFind
from eqsat.engine.serialize import Serialized
from eqsat.engine.staging import FlatQuery
from eqsat.fx.importer import Arg, Imported


@dataclass(frozen=True)
class Group:
    """A component (``model``: its FX nodes in order) and its ``copies`` (each the same length, position
    ``k`` of a copy playing the part of position ``k`` of the model)."""

    model: tuple[int, ...]
    copies: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Repeats:
    groups: tuple[Group, ...]

    @property
    def copied_nodes(self) -> int:
        return sum(len(c) for g in self.groups for c in g.copies)

    def reduced(self, imported: Imported) -> Imported:
        """``imported`` without the copies' nodes (itself when there is none)."""
        if not self.groups:
            return imported
        gone = {i for g in self.groups for c in g.copies for i in c}
        return replace(imported, terms={i: t for i, t in imported.terms.items() if i not in gone},
                       facts={i: f for i, f in imported.facts.items() if i not in gone},
                       roots=[i for i in imported.roots if i not in gone])

    def expand(self, ser: Serialized, roots: Sequence[int]) -> tuple[Serialized, Copied]:
        """``ser`` (of the reduced graph) with every copy's classes and e-nodes made from its model's,
        and ``roots`` (the whole graph's root nodes) its roots; and where each copy's classes and e-nodes
        came from (to extract on the models only, ``Copied``)."""
        if not self.groups:
            return ser, Copied(ser.egraph, ser.egraph, [])
        eg = ser.egraph
        made: list[tuple[_Template, int, int]] = []
        nodes, facts, classes = list(eg.nodes), dict(eg.facts), dict(eg.classes)
        class_of_node, enode_of_node = dict(ser.class_of_node), dict(ser.enode_of_node)
        fresh, leafy = max(eg.classes, default=-1) + 1, _leafy(eg)
        for g in self.groups:
            t = _Template.of(g, eg, leafy, class_of_node, enode_of_node)
            for copy in g.copies:
                refs = [Ref(fresh + k) for k in range(len(t.classes))]
                ref = refs.__getitem__
                first = len(nodes)
                made.append((t, fresh, first))
                for op, kind, spec, k in t.nodes:
                    if kind is _REFS:
                        args: tuple[object, ...] = tuple(map(ref, spec))  # type: ignore[arg-type]
                    elif kind is _LEAF:
                        args = (copy[spec],)  # type: ignore[index]
                    elif kind is _CONSTANTS:
                        args = spec  # type: ignore[assignment]
                    else:
                        args = tuple([ref(x) if type(x) is _Local else x for x in spec])  # type: ignore[attr-defined]
                    nodes.append(ENode(op, args, fresh + k))
                for k, members in enumerate(t.members):
                    classes[fresh + k] = [first + m for m in members]
                for k, f in enumerate(t.facts):
                    if f is not None:
                        facts[fresh + k] = f
                for i, (k, m) in zip(copy, t.nodes_of_fx, strict=True):
                    class_of_node[i], enode_of_node[i] = fresh + k, first + m
                fresh += len(t.classes)
        whole = EGraph(nodes, list(dict.fromkeys(class_of_node[i] for i in roots)), facts, classes)
        return Serialized(whole, class_of_node, ser.ids, enode_of_node), Copied(eg, whole, made)


Extract = Callable[[EGraph, Callable[[ENode], float]], Selection]


@dataclass(frozen=True)
class Copied:
    """The e-graph ``expand`` made (``whole``), the one it was made from (``reduced``: the models and every
    other component), and each copy's template with its first class id and first e-node index."""

    reduced: EGraph
    whole: EGraph
    made: list[tuple[_Template, int, int]]

    def on_models(self, extract: Extract) -> Extract:
        """``extract``, which on the whole e-graph extracts from the reduced one and gives each copy its
        model's choices (the components share no class, so an extraction's choice in one is its own);
        on any other e-graph, ``extract`` itself."""
        if not self.made:
            return extract

        def extracted(eg: EGraph, cost: Callable[[ENode], float]) -> Selection:
            if eg is not self.whole:
                return extract(eg, cost)
            chosen = extract(self.reduced, cost)
            for t, fresh, first in self.made:
                for k, c in enumerate(t.classes):
                    j = chosen.get(c)
                    if j is not None:
                        chosen[fresh + k] = first + t.position[j]
            return chosen

        return extracted


_LEAF, _REFS, _CONSTANTS, _MIXED = "leaf", "refs", "constants", "mixed"


class _Local(int):
    """A class argument of a template's e-node: the class's index among the component's."""


@dataclass(frozen=True)
class _Template:
    """A model component's e-graph, its classes numbered 0.. in ``facts``' order: each e-node as (op, how
    its arguments are made, what they are made from, its class), each class's e-nodes (positions in
    ``nodes``), and each FX node of the model's class and own e-node."""

    nodes: list[tuple[str, str, object, int]]
    members: list[list[int]]
    facts: list[TensorFacts | None]
    nodes_of_fx: list[tuple[int, int]]
    classes: list[int]  # the model's classes, in ``facts``' order
    position: dict[int, int]  # a model e-node's index -> its position in ``nodes``

    @classmethod
    def of(cls, g: Group, eg: EGraph, leafy: set[int], class_of_node: Mapping[int, int],
           enode_of_node: Mapping[int, int]) -> _Template:
        own = _closure((class_of_node[i] for i in g.model), eg, leafy)
        local = {c: k for k, c in enumerate(own)}
        picked = sorted(j for c in own for j in eg.classes[c])
        at = {j: m for m, j in enumerate(picked)}
        position = {i: k for k, i in enumerate(g.model)}
        nodes: list[tuple[str, str, object, int]] = []
        members: list[list[int]] = [[] for _ in own]
        for j in picked:
            n = eg.nodes[j]
            k = local[n.eclass]
            members[k].append(len(nodes))
            if n.op == LEAF:
                spec = position.get(n.args[0])  # type: ignore[call-overload]
                if spec is None:
                    raise RuntimeError(f"a class of the component at FX node {g.model[0]} holds another's leaf")
                nodes.append((n.op, _LEAF, spec, k))
            elif not n.children:
                nodes.append((n.op, _CONSTANTS, n.args, k))
            elif len(n.children) == len(n.args):
                nodes.append((n.op, _REFS, tuple([local[c] for c in n.children]), k))
            else:
                nodes.append((n.op, _MIXED, tuple([_Local(local[a.eclass]) if type(a) is Ref else a
                                                   for a in n.args]), k))
        return cls(nodes, members, [eg.facts.get(c) for c in own],
                   [(local[class_of_node[i]], at[enode_of_node[i]]) for i in g.model], own, at)


NONE = Repeats(())


def _closure(start: Iterable[int], eg: EGraph, leafy: set[int]) -> list[int]:
    """The classes of the component ``start`` lies in, in the order first reached: those its e-nodes
    read, and the classes of the e-nodes that read a class of ``leafy`` (a relation's row no term reads,
    as ``MlaLatents``); a class of constants alone may be read by other components too."""
    kids, classes, users, eclass_of = eg.kids, eg.classes, eg.users, eg.eclass_of
    seen = dict.fromkeys(start)
    todo = list(seen)
    while todo:
        c = todo.pop()
        reached = [k for j in classes[c] for k in kids[j]]
        if c in leafy:
            reached += [eclass_of[j] for j in users.get(c, ())]
        for k in reached:
            if k not in seen:
                seen[k] = None
                todo.append(k)
    return list(seen)


def _leafy(eg: EGraph) -> set[int]:
    """The classes that hold a leaf or an e-node over such a class (the rest hold constants only)."""
    leafy = {n.eclass for n in eg.nodes if n.op == LEAF}
    todo = list(leafy)
    users, eclass_of = eg.users, eg.eclass_of
    while todo:
        for j in users.get(todo.pop(), ()):
            c = eclass_of[j]
            if c not in leafy:
                leafy.add(c)
                todo.append(c)
    return leafy


def find(imported: Imported) -> Repeats:
    """The groups of copies among ``imported``'s components (those of one member only are left out)."""
    terms = imported.terms
    parts: UnionFind[int] = UnionFind()
    constants: dict[tuple, int] = {}  # a term of constants -> the first such: one e-node with its equals anywhere
    for i in sorted(terms):
        parts.add(i)
        op, args = terms[i]
        if op == LEAF:
            continue
        read = [a.node for a in args if type(a) is Arg]
        if any(j not in parts.parent for j in read):  # an argument that is no loaded node: nothing to say
            return NONE
        for j in read or [constants.setdefault((op, args), i)]:
            parts.union(j, i)
    by_shape: dict[tuple, list[list[int]]] = {}
    for part in parts.classes():
        part.sort()
        by_shape.setdefault((len(part), terms[part[0]][0], terms[part[-1]][0]), []).append(part)
    roots, fixed, by_opaque = set(imported.roots), imported.fixed_layout, imported.read_by_opaque()
    groups = []
    for alike in by_shape.values():
        if len(alike) < 2:
            continue
        keyed: dict[tuple, list[list[int]]] = {}
        for part in alike:
            keyed.setdefault(_key(part, imported, roots, fixed, by_opaque), []).append(part)
        groups += [Group(tuple(same[0]), tuple(map(tuple, same[1:]))) for same in keyed.values() if len(same) > 1]
    return Repeats(tuple(groups))


def _key(part: list[int], imported: Imported, roots: set[int], fixed: set[int], by_opaque: set[int]) -> tuple:
    position = {i: k for k, i in enumerate(part)}
    facts, terms = imported.facts, imported.terms
    key = []
    for i in part:
        op, args = terms[i]
        args = tuple([("@", position[a.node]) if type(a) is Arg else a for a in args]) if op != LEAF else ()
        key.append((op, args, facts.get(i), i in roots, i in fixed, i in by_opaque))
    return tuple(key)


def connected(flat: FlatQuery) -> bool:
    """Whether a query (read as ``flat``) is one piece through its term variables: its constructor atoms
    linked by the classes they share, and every term variable a fact reads held by one of them."""
    pieces: UnionFind[str] = UnionFind()
    atoms = [[v for v in vs if flat.sorts.get(v) == "T"] for _, vs, _ in flat.structure]
    for vs in atoms:
        for v in vs:
            pieces.add(v)
            pieces.union(vs[0], v)
    read = {a for _, f, args in flat.atoms for a in args if flat.sorts.get(a) == "T"}
    return bool(atoms) and read <= pieces.parent.keys() and len(pieces.classes()) == 1
