"""Pictures of an FX graph: Graphviz DOT text, and a PNG drawn with matplotlib + networkx.

``fx_dot(graph, before)`` gives one DOT node per FX node, labelled with the op's short name (``rms_norm``,
``auto_functionalized(_C.rms_norm)``, ``[1]`` for a getitem) and the value's dtype and shape from
``meta["val"]`` (``bf16[s77, 512]``); inputs are grey ellipses, the output a grey house. Given
``before``, the nodes the graph had before a pass, the nodes the pass created are filled: orange
and bold when their op is new to the graph (the fused kernels), light orange when not (getitems,
code re-emitted after a fused kernel). ``fx_png(graph, path, before)`` draws the same picture
without Graphviz, layered top to bottom (each node one row below its lowest input, inputs one row
above their first user, rows ordered by the mean position of their inputs). Graphs above ``PNG_MAX_NODES`` are not drawn (``False`` is
returned); a picture that large is unreadable anyway. Both only read the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import torch
import torch.fx as fx

PNG_MAX_NODES = 250
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32", torch.float64: "f64",
           torch.int64: "i64", torch.int32: "i32", torch.bool: "bool", torch.uint8: "u8",
           torch.float8_e4m3fn: "fp8e4m3fn", torch.float8_e4m3fnuz: "fp8e4m3fnuz", torch.float8_e5m2: "fp8e5m2"}
# kind -> (DOT attributes, matplotlib face colour)
STYLES = {
    "input": ('shape=ellipse, style=filled, fillcolor="#e0e0e0"', "#e0e0e0"),
    "output": ('shape=house, style=filled, fillcolor="#e0e0e0"', "#e0e0e0"),
    "new": ('style="filled,bold", fillcolor="#fd8d3c", penwidth=2', "#fd8d3c"),
    "rebuilt": ('style=filled, fillcolor="#fdd0a2"', "#fdd0a2"),
    "op": ("", "#ffffff"),
}


def _op_name(target: object) -> str:
    if isinstance(target, torch._ops.OpOverload):
        ns, _, name = target._schema.name.partition("::")
        return name if ns in ("aten", "prims") else f"{ns}.{name}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name()
    return getattr(target, "__name__", str(target))


def _value(val: object) -> str:
    if isinstance(val, torch.Tensor):
        return f"{_DTYPES.get(val.dtype, str(val.dtype).removeprefix('torch.'))}[{', '.join(map(str, val.shape))}]"
    if isinstance(val, torch.SymInt):
        return f"Sym({val})"
    if isinstance(val, (list, tuple)):
        return ", ".join(_value(v) for v in val if v is not None)
    return "" if val is None else str(val)


def label(node: fx.Node) -> str:
    """Two short lines: what the node is, and its value's dtype and shape."""
    if node.op in ("placeholder", "output"):
        head = node.name
    elif node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem":
        head = f"[{node.args[1]}]"
    elif node.op == "call_function" and node.args and isinstance(node.args[0], torch._ops.OpOverload):
        head = f"{_op_name(node.target)}({_op_name(node.args[0])})"  # auto_functionalized(_C.rms_norm)
    else:
        head = _op_name(node.target)
    value = _value(node.meta.get("val"))
    return f"{head}\n{value}" if value else head


def kinds(graph: fx.Graph, before: Collection[fx.Node] | None = None) -> dict[fx.Node, str]:
    """Each node's style: ``input``, ``output``, ``op``; with ``before`` (the nodes the graph had
    before a pass), a node the pass created is ``new`` when its target is new (a fused kernel) and
    ``rebuilt`` otherwise (a getitem, or an op the graph had elsewhere: re-emitted code)."""
    known = set(before or ())
    targets = {n.target for n in known if n.op == "call_function"}
    out: dict[fx.Node, str] = {}
    for n in graph.nodes:
        if n.op in ("placeholder", "output"):
            out[n] = "input" if n.op == "placeholder" else "output"
        elif before is None or n in known:
            out[n] = "op"
        else:
            getitem = getattr(n.target, "__name__", "") == "getitem"
            out[n] = "rebuilt" if getitem or n.target in targets else "new"
    return out


def fx_dot(graph: fx.Graph, before: Collection[fx.Node] | None = None, title: str = "") -> str:
    ids = {n: f"n{i}" for i, n in enumerate(graph.nodes)}
    style_of = kinds(graph, before)
    lines = ["digraph fx {", "  rankdir=TB; node [shape=box, fontsize=10];", f'  label="{title}"; labelloc=t;']
    for n, i in ids.items():
        text = label(n).replace('"', '\\"').replace("\n", "\\n")
        style = STYLES[style_of[n]][0]
        lines.append(f'  {i} [label="{text}"' + (f", {style}" if style else "") + "];")
    for n, i in ids.items():
        lines.extend(f"  {ids[a]} -> {i};" for a in dict.fromkeys(n.all_input_nodes))
    lines.append("}")
    return "\n".join(lines) + "\n"


def layers(graph: fx.Graph) -> list[list[fx.Node]]:
    """Rows top to bottom: a node one row below its lowest input, an input one row above its first
    user; within a row, graph order."""
    row: dict[fx.Node, int] = {}
    for n in graph.nodes:
        if n.op != "placeholder":
            row[n] = 1 + max((row[a] for a in n.all_input_nodes if a.op != "placeholder"), default=0)
    for n in graph.nodes:
        if n.op == "placeholder":
            row[n] = min((row[u] for u in n.users), default=1) - 1
    rows: list[list[fx.Node]] = [[] for _ in range(max(row.values(), default=-1) + 1)]
    for n in graph.nodes:
        rows[row[n]].append(n)
    return rows


def positions(rows: list[list[fx.Node]], width: Callable[[fx.Node], float], gap: float = 4.0
              ) -> dict[fx.Node, tuple[float, float]]:
    """x, y of each node (y = -row): each row ordered by the mean x of its inputs in the rows above
    (stable: nodes with no placed input keep their order), boxes of ``width`` side by side, centred."""
    pos: dict[fx.Node, tuple[float, float]] = {}
    for k, nodes in enumerate(rows):
        def mean_input(n: fx.Node) -> float:
            xs = [pos[a][0] for a in n.all_input_nodes if a in pos]
            return sum(xs) / len(xs) if xs else float("inf")
        nodes = sorted(nodes, key=mean_input)
        span = sum(width(n) for n in nodes) + gap * (len(nodes) - 1)
        x = -span / 2
        for n in nodes:
            pos[n] = (x + width(n) / 2, -k)
            x += width(n) + gap
    return pos


def fx_png(graph: fx.Graph, path: str | Path, before: Collection[fx.Node] | None = None, title: str = "") -> bool:
    """Draw the graph to ``path``; ``False`` (nothing written) above ``PNG_MAX_NODES`` nodes."""
    if len(graph.nodes) > PNG_MAX_NODES:
        return False
    import networkx as nx
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels, style_of = {n: label(n) for n in graph.nodes}, kinds(graph, before)
    rows = layers(graph)
    pos = positions(rows, lambda n: max(len(line) for line in labels[n].split("\n")) + 2.0)
    g = nx.DiGraph()
    g.add_nodes_from(pos)
    g.add_edges_from((a, n) for n in pos for a in n.all_input_nodes)
    xs = [x for x, _ in pos.values()]
    span = max(xs, default=0) - min(xs, default=0) + 60  # in characters (label widths)
    fig = Figure(figsize=(max(4.0, 0.06 * span), max(3.0, 0.75 * len(rows) + 0.8)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title, fontsize=9)
    nx.draw_networkx_edges(g, pos, ax=ax, arrows=True, arrowstyle="-|>", arrowsize=8, edge_color="#777777",
                           width=0.8, node_size=0, min_source_margin=10, min_target_margin=13)
    for k, (_, face) in STYLES.items():
        group = {n: labels[n] for n in pos if style_of[n] == k}
        if group:
            nx.draw_networkx_labels(g, pos, labels=group, ax=ax, font_size=6.5,
                                    bbox={"boxstyle": "round,pad=0.3", "facecolor": face, "edgecolor": "#444444",
                                          "linewidth": 1.5 if k == "new" else 0.6})
    ax.set_xlim(min(xs, default=0) - 30, max(xs, default=0) + 30)
    ax.set_ylim(-len(rows) + 0.5, 0.5)
    fig.savefig(str(path), dpi=110, bbox_inches="tight")
    return True
