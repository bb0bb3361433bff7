"""Pictures of a serialized e-graph: the neighbourhood of some e-classes as Graphviz DOT text.

``neighbourhood_dot(egraph, roots, selection, depth)`` draws every e-class within ``depth`` child
steps of ``roots`` as a dashed cluster holding its e-nodes; an edge runs from an e-node to each
child e-class; e-nodes the extraction chose are filled. Reads only the :class:`EGraph` value.
"""

from __future__ import annotations

from collections.abc import Iterable

from eqsat.core.egraph import EGraph, ENode, Ref, Selection


def _label(node: ENode) -> str:
    prims = [repr(a) for a in node.args if not isinstance(a, Ref)]
    text = node.op + (f"({', '.join(prims)})" if prims else "")
    return text.replace('"', '\\"')


def neighbourhood(egraph: EGraph, roots: Iterable[int], depth: int) -> list[int]:
    seen: dict[int, None] = {}
    frontier = list(dict.fromkeys(roots))
    for _ in range(depth + 1):
        nxt: list[int] = []
        for c in frontier:
            if c in seen:
                continue
            seen[c] = None
            for i in egraph.classes.get(c, []):
                nxt.extend(egraph.nodes[i].children)
        frontier = nxt
    return list(seen)


def neighbourhood_dot(egraph: EGraph, roots: Iterable[int], selection: Selection | None = None,
                      depth: int = 3, title: str = "") -> str:
    roots = list(roots)
    classes = neighbourhood(egraph, roots, depth)
    shown = set(classes)
    chosen = set((selection or {}).values())
    lines = ["digraph egraph {", "  compound=true; rankdir=BT; node [shape=box, fontsize=10];",
             f'  label="{title}"; labelloc=t;']
    for c in classes:
        style = "solid" if c in roots else "dashed"
        lines.append(f'  subgraph cluster_{c} {{ style={style}; label="e-class {c}"; fontsize=9;')
        for i in egraph.classes.get(c, []):
            fill = ', style=filled, fillcolor="#9ecae1"' if i in chosen else ""
            lines.append(f'    n{i} [label="{_label(egraph.nodes[i])}"{fill}];')
        lines.append("  }")
    for c in classes:
        for i in egraph.classes.get(c, []):
            for k in egraph.nodes[i].children:
                if k in shown and egraph.classes.get(k):
                    lines.append(f"  n{i} -> n{egraph.classes[k][0]} [lhead=cluster_{k}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
