"""Loops in DOT pictures: a loop node drawn as a cluster holding its body, or as one box.

A loop node (any op whose registration lists ``bodies``) becomes a cluster styled by its role (the
reverse loop ``sg.grad`` makes is a backward cluster). Inside it are its body's nodes and edges; each
carry is a dashed edge from the body output that becomes the next iteration's carry back to the carry's
placeholder. The graph around it connects to the body: the node's inputs to the placeholders they feed,
and the ``loop_output`` nodes from the body outputs they read. Loops inside loops nest. Collapsed, a loop
is one box: "scan (50 steps)" and its body's op count.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pydot

from ..tensor import format_shape
from .loopinfo import body_graphs, input_roles, is_loop, op_count, title_of, value_count, wiring_of
from .picture import _esc
from .trace import format_value

CLUSTER = {
    "forward": {"color": "#2b6ca3", "fontcolor": "#2b6ca3", "style": "rounded,filled", "fillcolor": "#f3f8fd"},
    "backward": {"color": "#c0504d", "fontcolor": "#c0504d", "style": "rounded,filled,dashed",
                 "fillcolor": "#fdf3ee"},
    "update": {"color": "#548235", "fontcolor": "#548235", "style": "rounded,filled,bold", "fillcolor": "#f3f9ef"},
}
CARRY_EDGE = {"style": "dashed", "penwidth": "1.8", "dir": "back", "arrowtail": "normal"}
SHOWN = 4       # iteration values written on a body node (the first and last two of those recorded)


@dataclass
class Drawn:
    """The DOT names a loop drawn as a cluster connects through: ``feeds`` {node input: [names of the
    body placeholders it feeds]}, ``values`` {value index: [names of the body outputs it is]}."""

    feeds: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    anchor: str | None = None         # where connections go that the wiring does not say


def ends(names, loops, src, dst, slot, anchor_of=None) -> list:
    """[(tail, head)] DOT names of the edge from node id ``src`` into input ``slot`` of node ``dst``,
    through the body placeholders or outputs where either end is a loop drawn as a cluster."""
    heads = [names[dst.id]]
    if dst.id in loops:
        d = loops[dst.id]
        heads = d.feeds.get(slot) or ([d.anchor] if d.anchor else [])
    tails = [names[src]]
    if src in loops:
        d = loops[src]
        tails = d.values.get((dst.attrs or {}).get("index")) or ([d.anchor] if d.anchor else [])
    return [(a, b) for a in tails for b in heads]


def box(sheet, node, cluster, style):
    """A loop as one box: its op, what its wiring says (steps, reverse) and the size of each body."""
    name = f"loop_{node.id}"
    lines = [f"<B>{_esc(title_of(node))}</B>" + (f" {_esc(node.name)}" if node.name else "")]
    for attr, graph in body_graphs(node).items():
        lines.append(f'<FONT POINT-SIZE="10">{_esc(attr)}: {op_count(graph)} ops</FONT>')
    attrs = dict(style, shape="component")
    cluster.add_node(pydot.Node(name, label="<" + "<BR/>".join(lines) + ">", tooltip=_loop_tooltip(node), **attrs))
    return name


def cluster_of(sheet, node, parent, prefix, records, style_of):
    """Draw loop ``node`` as a cluster inside ``parent`` (its bodies' nodes named with ``prefix``);
    returns its :class:`Drawn`. ``records``: its {attribute: Iterations} when values were recorded;
    ``style_of(role)``: the node style of that role."""
    role = node.role if node.role in CLUSTER else "forward"
    pic = sheet.pic
    head = f"<B>{_esc(title_of(node))}</B>  {_esc(node.label())} · {role} · built at {_esc(node.source or '?')}"
    mark = pic.marks.get(node.id)
    style = dict(CLUSTER[role])
    if mark is not None:
        head += "".join(f"<BR/><B>{_esc(t)}</B>" for t in mark[1])
        style["color"] = mark[0].get("color", style["color"])
    sub = pydot.Cluster(f"{prefix}loop_{node.id}", label="<" + head + ">", tooltip=_loop_tooltip(node), **style)
    parent.add_subgraph(sub)
    graphs = body_graphs(node)
    names = {}
    for attr, graph in graphs.items():
        target = sub
        if len(graphs) > 1:
            target = pydot.Cluster(f"{prefix}loop_{node.id}_{attr}", label=attr, style="rounded,dotted",
                                   color="#888888")
            sub.add_subgraph(target)
        record = (records or {}).get(attr)
        names[attr] = _body(sheet, node, attr, graph, target, f"{prefix}L{node.id}_{attr}_", record, style_of)
    wiring = wiring_of(node)
    drawn = Drawn()
    for k, attr, j, _ in wiring.feeds:
        if j < len(graphs[attr].inputs):
            drawn.feeds.setdefault(k, []).append(names[attr][graphs[attr].inputs[j]])
    for v, attr, j, _ in wiring.values:
        if j < len(graphs[attr].outputs):
            drawn.values.setdefault(v, []).append(names[attr][graphs[attr].outputs[j]])
    for a, out, b, k in wiring.carries:
        src, dst = graphs[a].outputs[out], graphs[b].inputs[k]
        ph = graphs[b].nodes[dst]
        # (written from the placeholder down to the output with dir=back: it never fights the layout)
        sheet.dot.add_edge(pydot.Edge(names[b][dst], names[a][src], color=CLUSTER[role]["color"],
                                      fontcolor=CLUSTER[role]["color"], label=f"carry {ph.label()}", **CARRY_EDGE))
    if set(range(len(node.inputs))) - set(drawn.feeds) or set(range(value_count(node))) - set(drawn.values):
        # inputs no body reads (a cond's pred) and values no body output is (a tape) meet the loop here
        drawn.anchor = f"{prefix}loop_{node.id}_anchor"
        sub.add_node(pydot.Node(drawn.anchor, label=f"<<B>{_esc(node.op)}</B>>", shape="plaintext"))
    return drawn


def _body(sheet, loop, attr, graph, cluster, prefix, record, style_of) -> dict:
    """Draw one body's nodes and edges; returns {body node id: DOT name}."""
    roles = {graph.inputs[k]: text for (a, k), text in input_roles(loop).items() if a == attr}
    outs = _output_marks(loop, attr, graph)
    names, loops = {}, {}
    shown = record.shown if record is not None else []
    for node in graph.nodes.values():
        name = prefix + str(node.id)
        names[node.id] = name
        if is_loop(node):
            # (an inner loop's iterations differ per outer iteration: its nodes show no values)
            loops[node.id] = cluster_of(sheet, node, cluster, prefix, None, style_of)
            continue
        lines = _lines(node, roles.get(node.id), outs.get(node.id, []), shown)
        attrs = dict(style_of(node))
        if node.id in outs:
            attrs["penwidth"] = "2.5"
        cluster.add_node(pydot.Node(name, label="<" + "<BR/>".join(lines) + ">",
                                    tooltip=_tooltip(node, roles.get(node.id), shown), **attrs))
    for node in graph.nodes.values():
        for slot, i in enumerate(node.inputs):
            for a, b in ends(names, loops, i, node, slot):
                sheet.dot.add_edge(pydot.Edge(a, b, color="#555555"))
    return names


def _output_marks(loop, attr, graph) -> dict:
    """{body output id: ["carry h", "value 1 (stacked)", ...]}: what each body output becomes."""
    marks = {}
    wiring = wiring_of(loop)
    for a, out, b, k in wiring.carries:
        if a == attr and out < len(graph.outputs):
            target = body_graphs(loop)[b]
            marks.setdefault(graph.outputs[out], []).append(f"next {target.nodes[target.inputs[k]].label()}")
    for v, a, out, kind in wiring.values:
        if a == attr and out < len(graph.outputs):
            marks.setdefault(graph.outputs[out], []).append(f"value {v} ({kind})")
    return marks


def _lines(node, role, outs, shown) -> list:
    if node.op == "constant" and node.value is not None and node.value.size <= 4:
        head = f"constant <B>{_esc(format_value(node.value))}</B>"
    elif role is not None:
        head = f"<B>{_esc(role)}</B>"
    else:
        head = f"<B>{_esc(node.op)}</B>" + (f" {_esc(node.name)}" if node.name else "")
    lines = [head, f'<FONT POINT-SIZE="10">{_esc(format_shape(node.shape))} {_esc(node.dtype)}</FONT>']
    lines += [f'<FONT POINT-SIZE="10" COLOR="#7f0000"><B>{_esc(t)}</B></FONT>' for t in outs]
    picked = shown if len(shown) <= SHOWN else shown[:SHOWN // 2] + shown[-(SHOWN // 2):]
    for k, values, _ in picked:
        lines.append(f'<FONT POINT-SIZE="10" COLOR="#1f4e79">it {k} = {_esc(format_value(values.get(node.id), 4))}'
                     "</FONT>")
    return lines


def _tooltip(node, role, shown) -> str:
    parts = [f"{role or node.label()}: {node.op} {format_shape(node.shape)} {node.dtype}, built at "
             f"{node.source or '?'}"]
    if node.rule:
        parts.append(f"VJP rule: {node.rule}")
    parts += [f"iteration {k}: {format_value(values.get(node.id), max_size=64)}" for k, values, _ in shown]
    return "\n".join(parts)


def _loop_tooltip(node) -> str:
    sizes = ", ".join(f"{attr}: {op_count(g)} ops, {len(g.inputs)} inputs, {len(g.outputs)} outputs"
                      for attr, g in body_graphs(node).items())
    return f"{node.label()}: {title_of(node)}, built at {node.source or '?'}; {sizes}"
