"""DOT export of graphs via pydot, with the forward, backward and update parts told apart."""
from __future__ import annotations

import pydot

from .graph import Graph
from .tensor import Tensor, format_shape

STYLES = {
    "forward": {"shape": "box", "style": "filled", "fillcolor": "#dbe9f6", "color": "#2b6ca3"},
    "backward": {"shape": "box", "style": "filled,dashed", "fillcolor": "#fbe3d6", "color": "#c0504d"},
    "update": {"shape": "box", "style": "filled,bold", "fillcolor": "#e2f0d9", "color": "#548235"},
}
LEAF_SHAPES = {"placeholder": "invhouse", "parameter": "cylinder", "constant": "plaintext"}


def _graph_of(target, stage):
    from .executor import Function
    if isinstance(target, Function):
        if stage == "unoptimized" and target._unoptimized is not None:
            return target._unoptimized
        return target.ir
    tensors = [target] if isinstance(target, Tensor) else list(target)
    graph = Graph.from_tensors(tensors)
    graph.assign_roles()
    return graph


def node_label(node) -> str:
    head = node.op if not node.name else f"{node.name} = {node.op}" if node.inputs else f"{node.name}"
    if not node.inputs and node.op != "constant":
        head = f"{node.op} {node.name or ''}".strip()
    if node.op == "constant" and node.value is not None and node.value.size <= 4:
        head = f"{node.value.tolist()}"
    return f"{head}\n{format_shape(node.shape)} {node.dtype}"


def to_dot(target, stage="optimized", name="staticgrad") -> pydot.Dot:
    """A pydot graph of a tensor, a list of tensors or a compiled function.

    Forward, backward (adjoint) and update nodes get their own style and cluster; edges from the forward
    into the backward part (saved values) are drawn dotted; requested outputs are outlined.
    """
    graph = _graph_of(target, stage)
    dot = pydot.Dot(name, graph_type="digraph", rankdir="TB", fontname="Helvetica")
    clusters = {role: pydot.Cluster(role, label=role, style="rounded", color=STYLES[role]["color"])
                for role in STYLES}
    outputs = set(graph.outputs)
    for node in graph.nodes.values():
        attrs = dict(STYLES.get(node.role, STYLES["forward"]))
        if not node.inputs:
            attrs["shape"] = LEAF_SHAPES.get(node.op, "box")
        if node.id in outputs:
            attrs["penwidth"] = "3"
        tooltip = f"{node.op} @ {node.source}"
        if node.adjoint_of is not None:
            tooltip += f" (VJP of {node.rule} node {node.adjoint_of})"
        clusters.get(node.role, clusters["forward"]).add_node(
            pydot.Node(str(node.id), label=node_label(node), tooltip=tooltip, **attrs))
    for cluster in clusters.values():
        if cluster.get_nodes():
            dot.add_subgraph(cluster)
    for node in graph.nodes.values():
        for i in dict.fromkeys(node.inputs):
            src = graph.nodes[i]
            style = "dotted" if src.role == "forward" and node.role == "backward" and src.inputs else "solid"
            dot.add_edge(pydot.Edge(str(i), str(node.id), style=style))
    return dot


def save_dot(target, path, **kwargs):
    """Write the DOT text of ``target`` to ``path``."""
    dot = target if isinstance(target, pydot.Dot) else to_dot(target, **kwargs)
    with open(path, "w") as fh:
        fh.write(dot.to_string())
    return path
