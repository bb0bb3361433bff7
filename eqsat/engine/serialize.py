"""Serialize: freeze the saturated egglog e-graph into the plain value extraction reads.

Entry point :func:`serialize`. It reads egglog's frozen tables directly (no JSON): constructor rows
become :class:`~eqsat.core.egraph.ENode`s and the fact tables (``eqsat.core.facts``)
:class:`~eqsat.core.egraph.TensorFacts` per e-class. The e-class of FX node ``i`` is found by
hash-consing: its imported term, with each child replaced by its child node's e-class, is an e-node
of the frozen e-graph (egglog keeps every e-node it was given, canonicalised). A leaf, which egglog
holds only as the loader's ``(Fx i)`` (``eqsat.core.ir``), gets its ``Leaf`` e-node here, in that class (a
class of its own when nothing made the row: a non-tensor value no term reads). E-class ids are dense
ints assigned here; nothing of egglog survives in the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from egglog import bindings as eb

from eqsat.core.egraph import EGraph, ENode, Ref, TensorFacts
from eqsat.core.facts import FACTS, unpack
from eqsat.core.ir import FX, LEAF
from eqsat.fx.importer import Arg, Term

INTERN_CAP = 1 << 14  # layouts an engine keeps interned across graphs


@dataclass
class Serialized:
    egraph: EGraph
    class_of_node: dict[int, int]  # FX node index -> e-class
    ids: dict[object, int] = field(default_factory=dict)  # egglog e-class value -> e-class id
    enode_of_node: dict[int, int] = field(default_factory=dict)  # FX node index -> its own term's e-node


def _call(f: object, v: object) -> object:
    return f(v)  # type: ignore[operator]


def _parse_dim(d: str) -> int | str:
    try:
        return int(d)
    except ValueError:
        return d


def serialize(egraph: eb.EGraph, constructors: dict[str, tuple[str, ...]], terms: Mapping[int, Term],
              root_nodes: list[int], interned: dict[TensorFacts, TensorFacts] | None = None) -> Serialized:
    """Freeze ``egraph``; ``terms`` are the loaded terms by FX node index (``Imported.terms``). ``interned``:
    facts already made (an engine's, across its graphs), each layout's one object, grown here."""
    interned = {} if interned is None else interned
    if len(interned) > INTERN_CAP:  # graphs of other symbols each add theirs: start again
        interned.clear()
    functions = egraph.freeze().functions  # a fresh dict each time it is read: read once
    ids: dict[object, int] = {}
    refs: list[Ref] = []  # one Ref per e-class, shared by every e-node that reads it

    def cid(v: object) -> int:
        got = ids.get(v)
        if got is None:
            got = ids[v] = len(ids)
            refs.append(Ref(got))
        return got

    def ref(v: object) -> Ref:
        return refs[cid(v)]

    decode = {"T": ref, "i64": egraph.value_to_i64, "f64": egraph.value_to_f64,
              "String": egraph.value_to_string, "bool": egraph.value_to_bool}
    nodes: list[ENode] = []
    class_of_node: dict[int, int] = {}
    for name, fn in functions.items():
        sorts = constructors.get(name)
        if sorts is None or fn.is_let_binding:
            continue
        convert = [decode[s] for s in sorts]
        terms_only = all(s == "T" for s in sorts)  # most constructors: a row is its classes
        for row in fn.rows:
            if row.subsumed:
                continue
            inputs = row.inputs
            if len(inputs) != len(convert):
                raise RuntimeError(f"{name}: a row of {len(inputs)} inputs where its sorts are {sorts}")
            args = tuple(map(ref, inputs)) if terms_only else tuple(map(_call, convert, inputs))
            nodes.append(ENode(name, args, cid(row.output)))
    loaded = functions.get(FX)
    named = {egraph.value_to_i64(r.inputs[0]): r.output for r in loaded.rows} if loaded is not None else {}
    for i, (op, targs) in terms.items():
        if op == LEAF:
            got = named.get(i)
            nodes.append(ENode(LEAF, targs, cid(got if got is not None else (LEAF, i))))

    def table(name: str) -> dict[int, object]:
        fn = functions.get(name)
        if fn is None:
            return {}
        return {cid(r.inputs[0]): r.output for r in fn.rows}

    dtypes, shapes, packed = table("dtype"), table("shape"), table(FACTS)
    facts: dict[int, TensorFacts] = {}
    made: dict[tuple[object, object, object], TensorFacts] = {}  # classes of one layout share their facts
    for c, pv in packed.items():
        dv, sv = dtypes.get(c), shapes.get(c)
        if dv is None or sv is None:
            continue
        key = (dv, sv, pv)
        got = made.get(key)
        if got is None:
            text = egraph.value_to_string(sv)
            shape = tuple(_parse_dim(d) for d in text.split(",")) if text else ()
            got = TensorFacts(egraph.value_to_string(dv), shape, unpack(egraph.value_to_i64(pv))[2])
            got = made[key] = interned.setdefault(got, got)
        facts[c] = got
    index = {(n.op, n.args): k for k, n in enumerate(nodes)}
    enode_of_node: dict[int, int] = {}
    for i in sorted(terms):  # FX order: children first
        op, targs = terms[i]
        key = (op, tuple([refs[class_of_node[a.node]] if isinstance(a, Arg) else a for a in targs]))
        if key not in index:
            raise RuntimeError(f"the term of FX node {i} ({op}) is not in the frozen e-graph")
        enode_of_node[i] = index[key]
        class_of_node[i] = nodes[index[key]].eclass
    roots = list(dict.fromkeys(class_of_node[i] for i in root_nodes))
    return Serialized(EGraph.from_nodes(nodes, roots, facts), class_of_node, ids, enode_of_node)


def rows_of(egraph: eb.EGraph, name: str, ids: dict[object, int]) -> dict[tuple, object]:
    """The rows of a (String, T) -> i64 diagnostic function: (string, e-class id) -> value."""
    fn = egraph.freeze().functions.get(name)
    if fn is None:
        return {}
    out: dict[tuple, object] = {}
    for row in fn.rows:
        text, cls = row.inputs
        if cls in ids:
            out[(egraph.value_to_string(text), ids[cls])] = egraph.value_to_i64(row.output)
    return out
