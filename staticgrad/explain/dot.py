"""DOT pictures of graphs via pydot: forward, backward and update told apart, with provenance and values.

``to_dot`` draws a tensor, a list of tensors or a compiled function; ``save_dot`` writes the DOT text or,
through Graphviz's ``dot`` program, an .svg/.png/.pdf. Every node carries the user's file:line in its
tooltip (and, for adjoint nodes, the forward node and VJP rule it came from). ``feeds=`` writes values on
the nodes and the gradient each backward edge carries; ``view="flow"`` draws only the forward graph with
the reverse sweep's contributions as red edges, the way reverse mode is drawn by hand.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pydot

from ..tensor import ROLES, StaticgradError
from . import layout, loopdot
from .boxes import add_box
from .loopinfo import is_loop
from .picture import (
    _add_values,
    _cluster_id,
    _collapsed_group,
    _esc,
    _marks,
    _total_size,
    neighbourhood,
    node_lines,
    picture_of,
    saved_size,
    tooltip,
)
from .trace import format_value, iteration_count

STYLES = {
    "forward": {"shape": "box", "style": "filled", "fillcolor": "#dbe9f6", "color": "#2b6ca3"},
    "backward": {"shape": "box", "style": "filled,dashed", "fillcolor": "#fbe3d6", "color": "#c0504d"},
    "update": {"shape": "box", "style": "filled,bold", "fillcolor": "#e2f0d9", "color": "#548235"},
}
ROLE_TEXT = {"forward": "forward: blue", "backward": "backward (adjoint): orange, dashed",
             "update": "update: green, bold"}
LEAF_SHAPES = {"placeholder": "invhouse", "parameter": "cylinder", "constant": "note"}
SAVED_EDGE = {"color": "#7030a0", "fontcolor": "#7030a0", "style": "dashed", "penwidth": "1.6"}
GRAD_EDGE = {"color": "#c0504d", "fontcolor": "#c0504d", "penwidth": "1.4"}
# Edges that point against the flow (gradients back to inputs, new values back into parameters) are
# written in the flow's direction with dir=back, so they never fight the layout (constraint=false would
# also do, but trips Graphviz bugs and makes big graphs very slow to lay out).
FLOW_EDGE = {"color": "#c0504d", "fontcolor": "#c0504d", "style": "dashed", "dir": "back"}
ASSIGN_EDGE = {"color": "#548235", "style": "bold", "label": "assign", "fontcolor": "#548235", "dir": "back"}
FORMATS = ("svg", "png", "pdf")


class GraphvizNotFound(StaticgradError, FileNotFoundError):
    """Graphviz's ``dot`` program, needed to render .svg/.png/.pdf, is not installed."""


# ------------------------------------------------------------------ drawing
def draw(pic, collapse=False, around=None, depth=2, view="full", scopes=True, legend=True,
         name="staticgrad", rankdir="TB") -> pydot.Dot:
    graph = pic.graph
    if view not in ("full", "flow"):
        raise ValueError(f"to_dot: view must be 'full' or 'flow', got {view!r}")
    if isinstance(collapse, str):
        collapse = [collapse]
    keep = set(graph.nodes) if around is None else neighbourhood(graph, around, depth)
    if view == "flow":
        keep = {i for i in keep if graph.nodes[i].role == "forward"}
    dot = pydot.Dot(name, graph_type="digraph", rankdir=rankdir, fontname="Helvetica", newrank="true")
    dot.set_node_defaults(fontname="Helvetica", fontsize="11")
    dot.set_edge_defaults(fontname="Helvetica", fontsize="9")
    sheet = _Sheet(pic, dot, view, scopes, loop_boxes=collapse is True)
    # Nodes, or one box per collapsed name scope (its forward, backward and update nodes together); small
    # constants last, beside the nodes that read them.
    constants = []
    for node in graph.nodes.values():
        if node.id in keep:
            if layout.is_small_constant(node):
                constants.append(node)
            else:
                sheet.place(node, _collapsed_group(pic.scope_of(node), collapse))
    for node in layout.spread_constants(sheet, constants):
        sheet.place(node, _collapsed_group(pic.scope_of(node), collapse))
    for box, info in sheet.boxes.items():
        # drawn with the forward graph when it holds forward nodes (the scope is where they were built)
        info["role"] = next(r for r in ROLES if r in info["roles"])
        add_box(pic, box, info, sheet.cluster(info["role"], info["scope"].rpartition("/")[0] if scopes else ""),
                STYLES[info["role"]])
    if view == "full":
        _full_edges(pic, dot, sheet)
        layout.stack_bands(pic, dot, sheet)
        layout.level_gradients(pic, dot, sheet)
    else:
        _forward_edges(pic, dot, sheet)
        _flow_edges(pic, dot, sheet.drawn, sheet.loops)
    if legend:
        dot.set_label(_legend(pic, view, {graph.nodes[i].role for i in sheet.drawn}, bool(sheet.loops)))
        dot.set("labelloc", "b")
        dot.set("fontsize", "10")
    return dot


class _Sheet:
    """The DOT nodes drawn so far, the clusters they sit in, and the boxes of collapsed scopes."""

    def __init__(self, pic, dot, view, scopes, loop_boxes=False):
        self.pic, self.dot, self.view, self.scopes = pic, dot, view, scopes
        self.clusters = {}
        self.drawn = {}          # node id -> the DOT name standing for it
        self.boxes = {}          # DOT name of a box -> {"roles": {role: count}, "scope", "ids"}
        self.loops = {}          # id of a loop drawn as a cluster -> loopdot.Drawn (how edges reach its body)
        self.loop_boxes = loop_boxes
        self.spots = {}          # node id -> ("box", DOT name) or ("cluster", role, scope): where it is drawn
        self.copies = {}         # constant id -> {spot: DOT name of its copy there} (see layout.spread_constants)
        self.outputs = {}
        for k, o in enumerate(pic.graph.outputs):
            self.outputs.setdefault(o, []).append(k)

    def cluster(self, role, scope):
        key = (role, scope)
        if key in self.clusters:
            return self.clusters[key]
        if not scope:
            sub = pydot.Cluster(role, label=role, style="rounded", color=STYLES[role]["color"],
                                fontcolor=STYLES[role]["color"])
            self.dot.add_subgraph(sub)
        else:
            parent = self.cluster(role, scope.rpartition("/")[0])
            # the index keeps scopes apart that differ only in characters DOT ids cannot hold
            sub = pydot.Cluster(_cluster_id(role, scope, str(len(self.clusters))), label=scope,
                                style="rounded,dashed", color="#999999", fontcolor="#555555")
            parent.add_subgraph(sub)
        self.clusters[key] = sub
        return sub

    def place(self, node, group):
        role = node.role if node.role in STYLES else "forward"
        if group is not None:
            box = f"scope_{_cluster_id(group)}"
            self.into_box(box, group, node, role)
            self.drawn[node.id] = box
            return
        pic = self.pic
        scope = pic.cluster_scope(node) if self.scopes else ""
        target = self.cluster(role, scope)
        self.spots[node.id] = ("cluster", role, scope)
        if is_loop(node):
            if self.loop_boxes:
                self.drawn[node.id] = loopdot.box(self, node, target, STYLES[role])
            else:
                self.drawn[node.id] = f"loop_{node.id}"
                self.loops[node.id] = loopdot.cluster_of(self, node, target, "", pic.records.get(node.id),
                                                         node_style)
            return
        self.drawn[node.id] = self.add_node(node, target, str(node.id))

    def into_box(self, box, group, node, role=None):
        """Count ``node`` into the box of collapsed scope ``group`` (its role too, unless None)."""
        info = self.boxes.setdefault(box, {"roles": {}, "scope": group, "ids": []})
        info["ids"].append(node.id)
        if role is not None:
            info["roles"][role] = info["roles"].get(role, 0) + 1
        self.spots[node.id] = ("box", box)

    def tail(self, i, reader, name):
        """The DOT name of node ``i`` where ``reader`` reads it: a constant's copy beside the reader."""
        copies = self.copies.get(i)
        return copies.get(self.spots.get(reader.id), name) if copies else name

    def add_node(self, node, target, name) -> str:
        """Draw ``node`` as DOT node ``name`` in cluster ``target``."""
        pic = self.pic
        attrs = node_style(node)
        lines = node_lines(pic, node) + _marks(pic, node, self.outputs)
        if self.view == "flow" and pic.values is not None:
            for k, g in enumerate(_flow_gradients(pic, node.id)):
                tag = "grad" if len(pic.sweeps) == 1 else f"grad {k}"
                lines.append(f'<FONT POINT-SIZE="10" COLOR="#c0504d">{tag} {_esc(format_value(g))}</FONT>')
        if node.id in self.outputs or (node.meta or {}).get("grad_of") is not None:
            attrs["penwidth"] = "3"
        mark = pic.marks.get(node.id)
        if mark is not None:
            attrs.update(mark[0])
            lines += [f'<FONT POINT-SIZE="10"><B>{_esc(t)}</B></FONT>' for t in mark[1]]
        target.add_node(pydot.Node(name, label="<" + "<BR/>".join(lines) + ">", tooltip=tooltip(pic, node), **attrs))
        return name


def node_style(node) -> dict:
    """The DOT attributes of a node of this role and op (leaves get shapes of their own)."""
    attrs = dict(STYLES[node.role if node.role in STYLES else "forward"])
    if not node.inputs:
        attrs["shape"] = LEAF_SHAPES.get(node.op, "box")
    return attrs


def _edge_kind(src, dst):
    if src.role == "forward" and src.op != "constant" and dst.role == "backward":
        return "saved"
    return "plain"


def _full_edges(pic, dot, sheet):
    graph, values = pic.graph, pic.values
    drawn, boxes, loops = sheet.drawn, sheet.boxes, sheet.loops
    loop_boxes = {drawn[i] for i in drawn if i not in loops and is_loop(graph.nodes[i])}
    grads = pic.gradient_ids
    merged = {}     # collapsed boxes: (src, dst, kind, backward) -> set of source ids
    for node in graph.nodes.values():
        if node.id not in drawn:
            continue
        for slot, i in enumerate(node.inputs):
            if i not in drawn:
                continue
            src = graph.nodes[i]
            kind = _edge_kind(src, node)
            sized = node if is_loop(src) else src      # (what a loop hands on: the value its reader reads)
            for a, b in loopdot.ends(drawn, loops, i, node, slot):
                a = sheet.tail(i, node, a)
                if a in boxes or b in boxes or a in loop_boxes or b in loop_boxes:
                    if a != b:      # (a backward edge between boxes still runs against the arrow)
                        back = src.role == "backward" and node.role == "backward"
                        merged.setdefault((a, b, kind, back), set()).add(sized.id)
                    continue
                attrs = {}
                if kind == "saved":
                    value = values.get(sized.id) if values else None
                    attrs = dict(SAVED_EDGE, label=f"saved {saved_size(sized, value)}")
                elif i in grads:
                    attrs = dict(GRAD_EDGE)
                    if values is not None:
                        attrs["label"] = format_value(values.get(i), max_size=4)
                _add_edge(dot, a, b, src, node, attrs)
    for (a, b, kind, back), ids in merged.items():
        attrs = {}
        if kind == "saved":
            count = f"{len(ids)} value" + ("s" if len(ids) > 1 else "")
            attrs = dict(SAVED_EDGE, label=f"saved {count}, {_total_size([graph.nodes[i] for i in ids], values)}")
        elif ids & grads:
            attrs = dict(GRAD_EDGE)
        if back:
            dot.add_edge(pydot.Edge(b, a, dir="back", **attrs))
        else:
            dot.add_edge(pydot.Edge(a, b, **attrs))
    for p, e in graph.updates:
        if p in drawn and e in drawn and drawn[p] != drawn[e]:      # (not within one collapsed box)
            dot.add_edge(pydot.Edge(drawn[p], drawn[e], **ASSIGN_EDGE))


def _add_edge(dot, a, b, src, dst, attrs):
    """Backward edges are laid out against the arrow, so the backward graph runs back up beside the
    forward one and each adjoint lands level with the forward node it belongs to."""
    if src.role == "backward" and dst.role == "backward":
        dot.add_edge(pydot.Edge(b, a, dir="back", **attrs))
    else:
        dot.add_edge(pydot.Edge(a, b, **attrs))


def _forward_edges(pic, dot, sheet):
    drawn, loops, seen = sheet.drawn, sheet.loops, set()
    for node in pic.graph.nodes.values():
        if node.id not in drawn:
            continue
        for slot, i in enumerate(node.inputs):
            if i not in drawn:
                continue
            for a, b in loopdot.ends(drawn, loops, i, node, slot):
                a = sheet.tail(i, node, a)
                if a == b or ((a, b) in seen and a != str(i)):
                    continue
                seen.add((a, b))
                dot.add_edge(pydot.Edge(a, b))


def _flow_gradients(pic, i) -> list:
    out = []
    for steps, _ in pic.sweeps:
        for step in steps:
            if step["node"] == i:
                out.append(pic.values.get(step["adjoint"]))
    return out


def _flow_edges(pic, dot, drawn, loops):
    """The reverse sweep drawn on the forward graph: each contribution as an edge from a node to its input
    (to the body placeholder it feeds, at a loop drawn as a cluster)."""
    for steps, _ in pic.sweeps:
        for step in steps:
            node = pic.graph.nodes.get(step["node"])
            for x, c in step["sends"]:
                if node is None or node.id not in drawn or x not in drawn or drawn[x] == drawn[node.id]:
                    continue
                attrs = dict(FLOW_EDGE)
                if pic.values is not None:
                    attrs["label"] = format_value(pic.values.get(c), max_size=4)
                slot = node.inputs.index(x) if x in node.inputs else None
                for a, b in loopdot.ends(drawn, loops, x, node, slot):
                    dot.add_edge(pydot.Edge(a, b, **attrs))


def _legend(pic, view, roles, loops=False) -> str:
    parts = [ROLE_TEXT[r] for r in ROLES if r in roles]
    if loops:
        parts.append("a loop: a cluster holding its body, dashed edges back up: its carries")
    if view == "full":
        parts.append("purple dashed edges: forward values saved for the backward pass")
        if pic.sweeps:
            parts.append("red edges: gradients")
    else:
        parts.append("red dashed edges: gradient contributions sent back to each input")
    text = " · ".join(parts)
    if pic.note:
        text += "\n" + pic.note
    return text


# ------------------------------------------------------------------ public API
def to_dot(target, stage="optimized", *, feeds=None, iterations=False, collapse=False, around=None, depth=2,
           view="full", scopes=True, legend=True, name="staticgrad", rankdir="TB") -> pydot.Dot:
    """A pydot graph of a tensor, a list of tensors or a compiled function.

    One node per tensor, labelled with op, name, shape and dtype (small constants show their value).
    Forward, backward (adjoint) and update nodes get their own style and cluster, name scopes are
    nested clusters (``scopes=False``: none), edges that carry saved forward values into the backward
    graph are purple and labelled with their size, gradient edges are red, outputs and gradients are
    marked. Tooltips give the user's file:line and, for adjoint nodes, the forward node and VJP rule.

    ``stage``: "optimized" or "unoptimized" for a compiled function. ``collapse=True`` draws every name
    scope as one box (``collapse=["layer1"]``: only those). ``around=node, depth=k``: only nodes within
    k edges of ``node`` (a tensor or an id). ``feeds`` (as the function's call takes them, or a dict
    keyed by placeholder for tensors) runs the graph once, without updating parameters, and writes values
    on nodes and gradients on backward edges. ``view="flow"``: the forward graph only, with the reverse
    sweep drawn as red edges labelled with the contribution each input received.

    A loop (``sg.scan``; any op with bodies) is a cluster holding its body, styled by role (the reverse
    loop of a gradient is a backward cluster), with its carries as dashed edges from the body output
    that becomes the next carry back up to the carry's placeholder, the loop's inputs drawn into the
    placeholders they feed and its ``loop_output`` s out of the outputs they read; loops in loops nest.
    ``collapse=True`` draws each loop as one box ("scan (50 steps)", the ops per iteration).
    ``iterations=n`` (with ``feeds``) writes on each body node its values at the first and last
    iterations of the first and last ``n`` recorded (``True``: 3), as ``fn.trace`` records them.
    """
    pic = picture_of(target, stage)
    keep = iteration_count(iterations)
    if keep and feeds is None:
        raise ValueError("to_dot: iterations= writes the values of loop bodies, so it needs feeds=")
    if feeds is not None:
        _add_values(pic, feeds, keep)
    return draw(pic, collapse=collapse, around=around, depth=depth, view=view, scopes=scopes, legend=legend,
                name=name, rankdir=rankdir)


def save_dot(target, path: str | os.PathLike, **kwargs) -> str:
    """Write ``target`` (a pydot.Dot, or anything ``to_dot`` takes, with its keyword arguments) to ``path``.

    ``.dot``/``.gv`` get the DOT text. ``.svg``, ``.png`` and ``.pdf`` are rendered by Graphviz's ``dot``, and
    the DOT text is written beside them (``x.svg`` and ``x.dot``), also when Graphviz is missing and the
    rendering fails. Returns ``path``.
    """
    dot = target if isinstance(target, pydot.Dot) else to_dot(target, **kwargs)
    path = os.fspath(path)
    root, ext = os.path.splitext(path)
    ext = ext.lower().lstrip(".")
    if ext not in ("dot", "gv", "") and ext not in FORMATS:
        raise ValueError(f"save_dot: cannot write {path!r}; use .dot, .gv, " + ", ".join("." + f for f in FORMATS))
    text = dot.to_string()
    with open(path if ext in ("dot", "gv", "") else root + ".dot", "w", encoding="utf-8") as fh:
        fh.write(text)
    if ext in FORMATS:
        render(text, path, ext)
    return path


def render(text, path, fmt):
    """Run Graphviz's ``dot -T<fmt>`` on DOT ``text``, writing ``path``."""
    program = shutil.which("dot")
    if program is None:
        raise GraphvizNotFound(
            f"save_dot: writing {path!r} needs Graphviz's `dot` program, which is not on PATH. Install Graphviz "
            "(Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; conda: conda install "
            "graphviz; Windows: https://graphviz.org/download/) or save as .dot instead")
    done = subprocess.run([program, f"-T{fmt}", "-o", path], input=text.encode("utf-8"), capture_output=True)
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        detail = "\n".join(lines[:5]) + (f"\n... ({len(lines) - 5} more lines)" if len(lines) > 5 else "")
        raise StaticgradError(f"save_dot: Graphviz `dot -T{fmt}` failed on {path!r}: {detail}")
