"""Pictures in Jupyter: a compiled function or a graph tensor shown as the last value of a cell is drawn.

IPython asks an object for ``_repr_svg_()``; staticgrad.explain gives Function and Tensor one (as it gives
Function ``to_dot``), which returns Graphviz's SVG of ``to_dot(...)``, or None, so the notebook shows the
text ``repr`` instead, when Graphviz's ``dot`` is not installed or fails, and for an eager tensor (its
value is what it shows). A big graph stays cheap: above ``FULL_UP_TO`` nodes its name scopes are
collapsed into one box each, and above ``COUNT_UP_TO`` nodes, or when even the collapsed picture would
have more than ``BOXES_UP_TO`` parts, it is not laid out at all: a line says how to draw it.
"""
from __future__ import annotations

import html
import shutil
import subprocess

from .. import eager
from ..function import Function
from ..tensor import Tensor
from .dot import draw
from .picture import picture_of

FULL_UP_TO = 200        # nodes drawn one by one
COUNT_UP_TO = 20_000    # nodes counted before giving up (a graph walk per display)
BOXES_UP_TO = 400       # DOT nodes handed to Graphviz at the most
SECONDS = 30            # Graphviz's time to lay a picture out


def svg(target) -> str | None:
    """The SVG picture of a Function or graph tensor for a notebook, or None (see the module's text)."""
    program = shutil.which("dot")
    if program is None or (isinstance(target, Tensor) and eager.is_eager(target)):
        return None
    size = _size(target)
    if size > COUNT_UP_TO:
        return _note(f"a graph of more than {COUNT_UP_TO} nodes is not drawn here")
    pic = picture_of(target)
    dot = draw(pic, collapse=size > FULL_UP_TO)
    parts = sum(n.get_name() not in ("node", "edge", "graph") for g in _graphs(dot) for n in g.get_node_list())
    if parts > BOXES_UP_TO:
        return _note(f"a graph of {size} nodes, {parts} parts even with its name scopes collapsed, is not "
                     f"drawn here")
    try:
        done = subprocess.run([program, "-Tsvg"], input=dot.to_string().encode("utf-8"), capture_output=True,
                              timeout=SECONDS)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    text = done.stdout.decode("utf-8", errors="replace")
    return text[text.find("<svg"):] if "<svg" in text else None


def _size(target) -> int:
    """The nodes of a function's graph, or those a tensor is computed from (counted up to past COUNT_UP_TO)."""
    if isinstance(target, Function):
        return len(target.ir.nodes)
    seen, stack = {target.id}, [target]
    while stack and len(seen) <= COUNT_UP_TO:
        for t in stack.pop().inputs:
            if t.id not in seen:
                seen.add(t.id)
                stack.append(t)
    return len(seen)


def _graphs(dot):
    found, stack = [], [dot]
    while stack:
        g = stack.pop()
        found.append(g)
        stack.extend(g.get_subgraph_list())
    return found


def _note(text) -> str:
    """A one-line SVG saying why there is no picture and what draws one."""
    line = html.escape(f"{text}: sg.save_dot(x, 'x.svg', collapse=True), or around=node, depth=k, draws part")
    width = 7 * len(line) + 20
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="30"><text x="10" y="20" '
            f'font-family="Helvetica,sans-serif" font-size="12">{line}</text></svg>')


def repr_svg(self):
    """IPython's hook: this graph's picture as SVG, or None (no Graphviz; an eager tensor)."""
    return svg(self)
