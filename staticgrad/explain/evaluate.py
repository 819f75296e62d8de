"""A small IR interpreter that keeps every value, loops included, and what each loop did per iteration.

``evaluate`` runs a graph node by node with the registry's numpy kernels (the compiled executor drops
intermediates, so it cannot show them). A loop node runs through its op's own runner (the one a plan
uses), handed body "programs" that are this interpreter: so any op with bodies runs here as it does in a
plan, and with ``records`` each body records the values of its nodes at the iterations asked for.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..function import ExecutionError
from ..lower.shapes import concrete_shapes
from ..ops.registry import REGISTRY
from ..tensor import format_shape
from .loopinfo import body_attrs

KEEP = 3        # iterations recorded at each end of a loop when asked for without a count


class Iterations:
    """What body ``attr`` of loop node ``loop`` (its id: ``node``) computed: ``count`` iterations, of
    which ``shown`` (the first and last ``keep``, all of them when there are at most twice as many) as
    (iteration, {body node id: value}, {inner loop node id: {attribute: Iterations}}). Iterations count
    in the order they ran (a reverse scan's iteration 0 is its last step)."""

    def __init__(self, loop, attr, graph, keep):
        self.loop, self.node, self.attr, self.graph, self.keep = loop, loop.id, attr, graph, keep
        self.count = 0
        self._first, self._last = [], deque(maxlen=keep)

    def add(self, values, inner):
        entry = (self.count, values, inner)
        if len(self._first) < self.keep:
            self._first.append(entry)
        elif self.keep:
            self._last.append(entry)
        self.count += 1

    @property
    def shown(self) -> list:
        return self._first + list(self._last)

    def values(self, node) -> list:
        """[(iteration, value)] of body node ``node``: its id, its tensor, or its name (unique in the body)."""
        i = self.find(node)
        return [(k, values.get(i)) for k, values, _ in self.shown]

    def find(self, node) -> int:
        if isinstance(node, str):
            found = [i for i, n in self.graph.nodes.items() if n.name == node]
            if len(found) != 1:
                names = sorted({n.name for n in self.graph.nodes.values() if n.name})
                raise KeyError(f"{len(found)} nodes named {node!r} in this body (its names: {', '.join(names)})")
            return found[0]
        i = getattr(node, "id", node)
        if i not in self.graph.nodes:
            raise KeyError(f"node {i} is not in this body")
        return i

    def __repr__(self):
        return f"<Iterations of node {self.node} {self.attr}: {self.count}, {len(self.shown)} shown>"


class _Unknown(Exception):
    """A body value the interpreter cannot compute (an op the registry does not know)."""


class _BodyRun:
    """A body as the program a loop's runner calls once per iteration: ``run(*inputs) -> (outputs, [])``."""

    def __init__(self, graph, record, keep):
        self.graph, self.record, self.keep = graph, record, keep

    def run_for(self, shapes):
        """The program for inputs of these sizes (a runner whose bodies' sizes are known only as it runs
        asks so): the interpreter takes any."""
        return self.run

    def run(self, *args):
        inner = {} if self.record is not None else None
        values = evaluate(self.graph, dict(zip(self.graph.inputs, args)), records=inner, keep=self.keep)
        outs = [values[o] for o in self.graph.outputs]
        if any(v is None for v in outs):
            raise _Unknown
        if self.record is not None:
            self.record.add(values, inner)
        return outs, []


def run_loop(node, args, records=None, keep=KEEP):
    """The values of loop node ``node`` on ``args`` (a tuple: final carries, stacked ys, ... as its op
    says), run by its op's runner; ``records`` receives {node id: {attribute: Iterations}}."""
    opdef = REGISTRY[node.op]
    lowering = opdef.lowering
    in_shapes = [np.shape(a) for a in args]
    feeds = lowering.feeds(node, in_shapes)
    programs, out_shapes = {}, {}
    for attr in body_attrs(node):
        graph = node.attrs[attr].graph
        if feeds.get(attr) is None:         # (sizes known only as it runs)
            out_shapes[attr] = None
        else:
            inner = concrete_shapes(graph, list(graph.nodes), feeds[attr])
            out_shapes[attr] = [inner[o] for o in graph.outputs]
        record = Iterations(node, attr, graph, keep) if records is not None else None
        if record is not None:
            records.setdefault(node.id, {})[attr] = record
        programs[attr] = _BodyRun(graph, record, keep)
    shapes = lowering.out_shapes(node, in_shapes, out_shapes)
    runner = lowering.runner(node, programs, in_shapes, shapes, lowering.dtypes(node))
    try:
        return tuple(runner(*args))
    except _Unknown:
        return None


def evaluate(graph, feeds: dict, known=None, records=None, keep=KEEP) -> dict:
    """{node id: numpy value} for every node of ``graph`` (inputs before consumers, no recursion but
    into loop bodies). A loop node's value is the tuple of its values (a list among them, a loop's tape
    of iterations, stays a list).

    ``feeds`` maps placeholder ids to arrays. A node that depends on a placeholder missing from ``feeds``,
    or whose op the registry does not know (a fused op made by a pass), gets ``None``. ``known`` pre-fills
    values, so a graph that shares ids with an evaluated one only computes what is new. ``records``, a
    dict, receives each loop's :class:`Iterations` (the first and last ``keep`` of them).
    """
    values = dict(known or {})
    for node in graph.nodes.values():
        if node.id in values:
            continue
        if node.op == "placeholder":
            value = feeds.get(node.id)
        elif node.op == "parameter":
            value = node.tensor._value if node.tensor is not None else node.value
        elif node.op == "constant":
            value = node.value
        else:
            value = _apply(node, [values.get(i) for i in node.inputs], records, keep)
        values[node.id] = value
    return values


def _apply(node, args, records, keep):
    opdef = REGISTRY.get(node.op)
    if opdef is None or any(a is None for a in args):
        return None
    try:
        if body_attrs(node):
            return run_loop(node, args, records, keep)
        value = opdef.kernel(*args, **node.attrs)
        # (a loop's value may be a list, as a while_loop's tape of iterations: kept as it is)
        return value if isinstance(value, list) else np.asarray(value)
    except ExecutionError:
        raise
    except Exception as err:
        shapes = ", ".join(format_shape(np.shape(a)) for a in args)
        raise ExecutionError(f"{node.op} (built at {node.source}) failed on inputs of shapes "
                             f"{shapes}: {type(err).__name__}: {err}") from err
