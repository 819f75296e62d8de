"""A collapsed name scope drawn as one box: what its nodes are (ops counted, by role), its parameters, the
outputs and gradients inside, in lines short enough that a box listing many parameters stays narrow."""
from __future__ import annotations

import pydot

from ..tensor import ROLES, format_shape
from .picture import _esc, _marks


def add_box(pic, box, info, cluster, style):
    """Draw the box ``box`` of a collapsed name scope (``info``: its "scope", "ids", "roles" and "role") in
    ``cluster``, styled as ``style`` and shaped as a box3d: its op counts, roles, parameters and marks."""
    nodes = [pic.graph.nodes[i] for i in info["ids"]]
    ops = {}
    for n in nodes:
        if n.inputs:
            ops[n.op] = ops.get(n.op, 0) + 1
    params = [n for n in nodes if n.op == "parameter"]
    roles = info["roles"]
    lines = [f"<B>{_esc(info['scope'])}</B>" + (f" ({info['role']})" if len(roles) == 1 and "forward" not in roles
                                                else "")]
    lines += _wrapped([f"{len(nodes)} nodes: "] + [f"{n} {op}" for op, n in sorted(ops.items(), key=lambda kv: -kv[1])])
    if len(roles) > 1:
        lines += _wrapped([f"{roles[r]} {r}" for r in ROLES if r in roles])
    if params:
        lines += _wrapped([f"{p.label()} {format_shape(p.shape)}" for p in params])
    outputs = {}
    for k, o in enumerate(pic.graph.outputs):
        outputs.setdefault(o, []).append(k)
    for n in nodes:
        lines += _marks(pic, n, outputs)
    attrs = dict(style, shape="box3d")
    sources = sorted({n.source for n in nodes if n.source})
    cluster.add_node(pydot.Node(box, label="<" + "<BR/>".join(lines) + ">",
                                tooltip=f"name scope {info['scope']}: {len(nodes)} nodes built at "
                                        + ", ".join(sources[:8]) + (" ..." if len(sources) > 8 else ""),
                                **attrs))


def _wrapped(parts, width=64) -> list:
    """``parts`` joined by commas (after a leading "... : " part, by nothing) into lines of about ``width``
    characters, as small-print label lines: a box listing Adam's 12 moments stays as narrow as its layer."""
    rows, row = [], ""
    for k, part in enumerate(parts):
        glue = "" if k == 0 or (k == 1 and row.endswith(": ")) else ", "
        if row and len(row) + len(glue) + len(part) > width:
            rows.append(row + glue.rstrip())
            row, glue = "", ""
        row += glue + part
    rows.append(row)
    return [f'<FONT POINT-SIZE="10">{_esc(r)}</FONT>' for r in rows]
