"""``diff_dot``: the unoptimized graph with what each optimization pass did to it marked on the nodes."""
from __future__ import annotations

import pydot

from ..function import Function
from ..graph import Graph
from .dot import draw, picture_of
from .trace import format_value

REMOVED = {"fillcolor": "#eeeeee", "fontcolor": "#808080", "color": "#d62728", "style": "filled,dotted",
           "penwidth": "2"}
REPLACED = {"color": "#e69500", "penwidth": "3", "style": "filled,bold"}
ADDED = {"fillcolor": "#d5f5d5", "color": "#2ca02c", "penwidth": "3", "style": "filled,bold"}


def history(fn) -> dict:
    """{node id: [(what, pass name)]} from the pass ledger, what being "removed", "replaced" or "added"."""
    events = {}
    for row in fn.report().rows:
        for what in ("removed", "replaced", "added"):
            for i in row.get(f"{what}_ids", ()):
                events.setdefault(i, []).append((what, row["pass"]))
    return events


def _now(node) -> str:
    if node.op == "constant" and node.value is not None:
        return f"constant {format_value(node.value)}"
    return node.op


def diff_dot(fn: Function, **kwargs) -> pydot.Dot:
    """The unoptimized graph of compiled function ``fn`` with each pass's work marked.

    Nodes a pass removed are grey with a red dotted border, nodes it replaced in place (constant folding
    turns an op into a constant) get an orange border and say what they became, and nodes a pass added
    that survive in the optimized graph are drawn green with their edges. Each marked node names the
    pass. Keyword arguments are those of ``to_dot`` that shape the drawing (collapse, around, depth,
    scopes, legend, name, rankdir).
    """
    if getattr(fn, "unoptimized", None) is None:
        raise ValueError("diff_dot: expected a function made by sg.compile (one linked from a loaded graph, "
                         "or compiled from more than staticgrad.passes.KEEP_UP_TO nodes, keeps no unoptimized "
                         "graph to compare with)")
    pic = picture_of(fn, "unoptimized")
    base, final = pic.graph, fn.ir.nodes
    added = {i: n for i, n in final.items() if i not in base.nodes}
    nodes = dict(base.nodes)
    nodes.update(added)
    pic.graph = Graph(nodes, base.outputs, base.updates, base.inputs)
    pic.lookup.update(added)
    events = history(fn)
    lost = 0
    for i, steps in events.items():
        if i not in nodes:
            lost += 1       # added by one pass, removed by a later one: nothing left to draw
            continue
        lines, style = [], None
        for what, name in steps:
            if what == "replaced" and i in final:
                lines.append(f"replaced by {name}: now {_now(final[i])}")
                style = style or REPLACED
            elif what == "replaced":
                lines.append(f"replaced by {name}")
                style = style or REPLACED
            else:
                lines.append(f"{what} by {name}")
                style = REMOVED if what == "removed" else ADDED
        pic.marks[i] = (style, lines)
    summary = []
    for row in fn.report().rows:
        counts = [f"{len(row.get(k + '_ids', ()))} {k}" for k in ("removed", "replaced", "added")
                  if row.get(k + "_ids")]
        summary.append(f"{row['pass']}: {', '.join(counts) or 'no change'}")
    pic.note = "passes: " + "; ".join(summary) if summary else "no passes ran (optimize=False)"
    pic.note += ("\nremoved: grey, red dotted border · replaced in place: orange border · "
                 "added: green" + (f" · {lost} node(s) added then removed again are not drawn" if lost else ""))
    kwargs.setdefault("name", "staticgrad_diff")
    return draw(pic, **kwargs)
