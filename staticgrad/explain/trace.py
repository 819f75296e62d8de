"""Values inside a graph, for people checking autodiff by hand: ``trace`` and the values pictures use.

``run_values`` runs a compiled function's graph once through the interpreter of
``staticgrad.explain.evaluate`` (every value kept). ``trace`` prints the reverse sweep that ``sg.grad``
recorded as a table: what each node received (and the running sums where a tensor forks), the VJP rule
applied and the contribution sent to each input; with ``iterations`` also what each loop's body computed
at its first and last iterations.
"""
from __future__ import annotations

import sys

import numpy as np

from ..autodiff import summed_from
from ..feeds import check_feed
from ..function import Function
from ..graph import Graph
from ..ops.registry import REGISTRY
from ..tensor import LEAVES, FeedError, Tensor, format_shape
from . import looptable
from .evaluate import KEEP, evaluate
from .loopinfo import is_loop


# ------------------------------------------------------------------ formatting
def _number(x, digits) -> str:
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, complex):
        return f"{x:.{digits}g}"
    return f"{float(x):.{digits}g}"


def format_value(value, max_size=6, digits=4) -> str:
    """A short text for ``value``: in full when it has at most ``max_size`` elements, else shape + summary
    (a loop node's several values: each, between parentheses)."""
    if value is None:
        return "?"
    if isinstance(value, tuple):
        return "(" + "; ".join(format_value(v, max_size, digits) for v in value) + ")"
    if isinstance(value, list):
        return f"list of {len(value)}"
    a = np.asarray(value)
    if a.size <= max_size:
        if a.ndim == 0:
            return _number(a.item(), digits)
        return np.array2string(a, separator=", ", max_line_width=10 ** 6,
                               formatter={"all": lambda x: _number(x, digits)}).replace("\n", "")
    summary = f"{format_shape(a.shape)} {a.dtype}"
    if a.dtype.kind in "biuf" and a.size:
        summary += (f" mean {_number(a.mean(), digits)} min {_number(a.min(), digits)} "
                    f"max {_number(a.max(), digits)}")
    return summary


# ------------------------------------------------------------------ values of a whole graph
def tensor_closure(graph: Graph) -> dict:
    """{id: Tensor} for the tensors behind ``graph``'s nodes, their inputs, and the forward tensors their
    adjoints came from (a gradient need not depend on the forward node whose VJP made it)."""
    found = {}
    stack = [n.tensor for n in graph.nodes.values() if n.tensor is not None]
    # A gradient may not depend on y at all (y = u + v): meta["y"], when autodiff records it, reaches it.
    stack += [n.meta["y"] for n in graph.nodes.values()
              if isinstance((n.meta or {}).get("y"), Tensor)]
    while stack:
        t = stack.pop()
        if t.id in found:
            continue
        found[t.id] = t
        stack.extend(x for x in t.inputs if x.id not in found)
        if t.adjoint_of is not None and t.adjoint_of.id not in found:
            stack.append(t.adjoint_of)
    return found


def feeds_by_id(target, feeds) -> dict:
    """{placeholder id: checked array} from feeds given as a compiled function call would take them."""
    if isinstance(target, Function):
        arrays = target.check_feeds(*feeds) if isinstance(feeds, (list, tuple)) else target.check_feeds(feeds)
        return dict(zip(target.ir.inputs, arrays))
    graph = target
    holders = [n for n in graph.nodes.values() if n.op == "placeholder"]
    if not isinstance(feeds, dict):
        if len(holders) != 1:
            raise FeedError(f"give the feeds as a dict keyed by placeholder or name; this graph has "
                            f"{len(holders)} placeholders ({', '.join(repr(n.label()) for n in holders)})")
        feeds = {holders[0].tensor: feeds}
    out = {}
    for key, value in feeds.items():
        match = [n for n in holders if (n.tensor is key if isinstance(key, Tensor) else n.name == key)]
        if not match:
            what = key.label() if isinstance(key, Tensor) else key
            raise FeedError(f"{what!r} is not a placeholder of this graph "
                            f"(placeholders: {', '.join(repr(n.label()) for n in holders)})")
        out[match[0].id] = check_feed(match[0], value)
    return out


def run_values(target, feeds, records=None, keep=0):
    """(values by id, tensors by id) for a compiled function or an IR graph run once on ``feeds``.

    The function's unoptimized graph is widened to the tensors its gradients came from, so the forward
    nodes of the sweep have values even when no output reads them; updates are not applied. ``records``
    (a dict) receives what each loop did at its first and last ``keep`` iterations.
    """
    fed = feeds_by_id(target, feeds)
    if isinstance(target, Graph):
        base = target
    else:
        base = target.unoptimized if target.unoptimized is not None else target.ir
    # A loaded graph keeps the file's node ids while its leaves are fresh tensors with ids of this
    # process, so both kinds of ids can name different things: such a graph is run on its own (it
    # records no backward sweep to widen it with).
    keyed_by_tensor = all(n.tensor is None or n.tensor.id == n.id for n in base.nodes.values())
    tensors = tensor_closure(base) if keyed_by_tensor else {}
    if tensors:
        roots = sorted(tensors.values(), key=lambda t: t.id)
        values = evaluate(Graph.from_tensors(roots), fed, records=records, keep=keep)
    else:
        values = {}
    return evaluate(base, fed, known=values, records=records, keep=keep), tensors


# ------------------------------------------------------------------ the reverse sweep as a table
def sweeps_of(graph: Graph) -> list:
    """[(sweep steps, [wrt ids])] for the gradients in ``graph``, each sweep once, in graph order."""
    found = {}
    outputs_first = [graph.nodes[i] for i in dict.fromkeys(graph.outputs) if i in graph.nodes]
    for node in outputs_first + list(graph.nodes.values()):
        meta = node.meta or {}
        if "sweep" in meta:
            steps, wrt = found.setdefault(id(meta["sweep"]), (meta["sweep"], []))
            if meta.get("grad_of") not in wrt:
                wrt.append(meta.get("grad_of"))
    return list(found.values())


def _broadcast_parts(c, x, node, values):
    """The per-element values a contribution was summed from when ``x`` was broadcast in ``node``."""
    t = summed_from(c, node.shape)
    return values.get(t.id) if t is not None and t.shape != x.shape else None


class Trace:
    """The backward sweeps of a compiled function on one set of feeds.

    ``sweeps`` holds one list of row dicts per gradient call: ``node`` (forward id), ``label``, ``op``,
    ``source``, ``rule``, ``parts`` (values summed at this node), ``running`` (their running sums),
    ``gradient`` (the total adjoint; at a loop node, the gradients of its values it received) and
    ``sends`` (dicts with ``to``, ``label``, ``value`` and, when the input was broadcast, ``elements``:
    the values before they were summed back to its shape). With ``iterations``, ``loops`` and ``loop()``
    give what each loop's body computed at its first and last iterations.
    """

    def __init__(self, sweeps, titles, digits=6, records=None):
        self.sweeps, self.titles, self.digits = sweeps, titles, digits
        self.records = records or {}

    @property
    def loops(self) -> list:
        """[(path, Iterations)]: every loop body whose iterations were recorded, loops inside loops after
        them (``path``: the (outer loop, body, iteration) each sits in); empty without ``iterations``."""
        return looptable.flatten(self.records)

    def loop(self, node, body=None):
        """The :class:`~staticgrad.explain.evaluate.Iterations` of loop ``node`` (the loop's tensor, one of
        its outputs' tensors, or an id; ``body``: which body, for an op of several):
        ``.values("h")`` lists (iteration, value) of the body node named h."""
        return looptable.find(self.records, node, body)

    @property
    def rows(self) -> list:
        return [row for rows in self.sweeps for row in rows]

    def row(self, node, sweep=0) -> dict:
        """The step of sweep ``sweep`` at ``node`` (a tensor, a graph node or an id)."""
        i = getattr(node, "id", node)
        for row in self.sweeps[sweep]:
            if row["node"] == i:
                return row
        raise KeyError(f"node {i} is not visited by backward sweep {sweep}")

    def _fmt(self, v):
        return format_value(v, max_size=8, digits=self.digits)

    def _received(self, row):
        if len(row["parts"]) == 1 or isinstance(row["gradient"], tuple):
            return self._fmt(row["gradient"])
        text = self._fmt(row["parts"][0])
        for part, total in zip(row["parts"][1:], row["running"][1:]):
            text += f" +{self._fmt(part)} ={self._fmt(total)}"
        return "fork: " + text

    def _sends(self, row):
        out = []
        for s in row["sends"]:
            text = f"{s['label']} <- {self._fmt(s['value'])}"
            if s.get("elements") is not None:
                text += f" (sum of {self._fmt(s['elements'])})"
            out.append(text)
        return "; ".join(out) or "-"

    def table(self) -> str:
        blocks = []
        for title, rows in zip(self.titles, self.sweeps):
            cells = [("step", "node", "built at", "rule", "gradient received", "sends to inputs")]
            for k, row in enumerate(rows, 1):
                cells.append((str(k), row["label"], row["source"], row["rule"], self._received(row),
                              self._sends(row)))
            widths = [max(len(c[j]) for c in cells) for j in range(5)]
            lines = [title]
            for c in cells:
                lines.append("  ".join(c[j].ljust(widths[j]) for j in range(5)) + "  " + c[5])
            lines.insert(2, "-" * len(lines[1]))
            if any("?" in c[4] + c[5] for c in cells[1:]):
                lines.append("(?: not computed by this function: none of its outputs or updates needs it)")
            blocks.append("\n".join(lines))
        fmt = self._fmt
        blocks += [looptable.block(path, record, fmt) for path, record in self.loops]
        return "\n\n".join(blocks)

    __str__ = table

    def __repr__(self):
        return f"<Trace: {len(self.sweeps)} sweep(s), {len(self.rows)} steps>"


def _rule(step, tensor):
    if step["sends"] or _reads_loop(tensor):
        return f"vjp {step['op']}"
    if step["op"] in LEAVES:
        return "leaf"
    opdef = REGISTRY.get(step["op"])
    return "not differentiable" if opdef is not None and opdef.vjp is None else "no input needs grad"


def _rows(steps, values, tensors):
    rows = []
    for step in steps:
        t = tensors.get(step["node"])
        parts = [values.get(p) for p in step["parts"]]
        running, total = [], None
        for p in parts:
            total = p if total is None or p is None else np.add(total, p)
            running.append(total)
        gradient = values.get(step["adjoint"])
        if step["adjoint"] is None and parts:       # a loop node: the gradients of its values, each apart
            running, gradient = list(parts), tuple(parts)
        sends = _loop_send(t, gradient) if _reads_loop(t) else []
        for x_id, c_id in step["sends"]:
            x, c = tensors.get(x_id), tensors.get(c_id)
            sends.append({"to": x_id, "label": x.label() if x is not None else f"#{x_id}",
                          "value": values.get(c_id), "contribution": c_id,
                          "elements": _broadcast_parts(c, x, t, values) if None not in (c, x, t) else None})
        name = t.label() if t is not None else f"#{step['node']}"
        rows.append({"node": step["node"], "op": step["op"], "label": name,
                     "source": t.source if t is not None else "?", "rule": _rule(step, t), "parts": parts,
                     "running": running, "gradient": gradient, "sends": sends})
    return rows


def _reads_loop(t) -> bool:
    """Whether ``t`` reads one of a loop node's values (whose VJP hands the gradient to that value)."""
    return t is not None and len(t.inputs) == 1 and is_loop(t.inputs[0])


def _loop_send(t, gradient):
    loop = t.inputs[0]
    return [{"to": loop.id, "label": f"{loop.label()} value {t.attrs.get('index')}", "value": gradient,
             "contribution": None, "elements": None}]


def iteration_count(iterations) -> int:
    """How many iterations at each end of a loop ``iterations=`` asks for (True: KEEP, False: none)."""
    if iterations is True:
        return KEEP
    if iterations is None or iterations is False:
        return 0
    if not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be True, False or a count of iterations, got {iterations!r}")
    return iterations


def trace(fn: Function, feeds, quiet: bool = False, file=None, digits: int = 6, iterations=False) -> Trace:
    """Run ``fn``'s graph once on ``feeds`` and print its backward sweep(s) as a table, one row per step.

    Each row: the forward node, where the user built it, the VJP rule applied, the gradient it received
    (at a fork: each part and the running sum), and the contribution sent to each input. A loop is one
    row, like any node (its values are its final carries and stacked outputs). ``iterations=n`` also
    records the value of every node of each loop's body at its first ``n`` and last ``n`` iterations
    (all of them when it runs at most ``2n``; ``True``: 3 at each end, loops in loops likewise per
    iteration shown) and prints a table per loop body after the sweeps; a function with loops but no
    gradient then prints those alone. Parameters are not updated. The table goes to ``file`` (default:
    stdout) unless ``quiet``; the returned :class:`Trace` holds the numbers.
    """
    if not isinstance(fn, Function):
        raise TypeError(f"trace: expected a compiled function (sg.compile), got {type(fn).__name__}")
    keep = iteration_count(iterations)
    base = fn.unoptimized if fn.unoptimized is not None else fn.ir
    found = sweeps_of(base)
    loops_only = not found and keep and any(is_loop(n) for n in base.nodes.values())
    if not found and not loops_only and fn.unoptimized is None:
        raise ValueError("trace: this function was linked from a loaded graph, which keeps no record of the "
                         "backward sweep; trace the function compiled from the original tensors")
    if not found and not loops_only:
        raise ValueError("trace: this function has no gradient made by sg.grad among its outputs or updates, "
                         "so there is no backward sweep to show")
    records = {} if keep else None
    values, tensors = run_values(fn, feeds, records, keep)
    sweeps, titles = [], []
    for steps, wrt in found:
        y = tensors.get(steps[0]["node"]) if steps else None
        names = ", ".join(tensors[w].label() if w in tensors else f"#{w}" for w in wrt)
        y_name = y.label() if y is not None else "?"
        titles.append(f"backward sweep of d {y_name} / d [{names}]"
                      + (f"  (y built at {y.source})" if y is not None else ""))
        sweeps.append(_rows(steps, values, tensors))
    result = Trace(sweeps, titles, digits, records)
    if not quiet:
        print(result.table(), file=file if file is not None else sys.stdout)
    return result
