"""Graphs: walking tensors (iteratively) and the compiler's editable IR with its networkx view.

Nothing here recurses, so a graph of a million nodes never meets Python's recursion limit.
"""
from __future__ import annotations

import heapq
import itertools
import operator

import networkx as nx
import numpy as np

from .ops.registry import REGISTRY
from .tensor import NO_ATTRS, Tensor

_node_ids = itertools.count(1 << 40)   # ids for nodes the passes create; tensor ids stay below


def ancestors(tensors) -> dict:
    """Every tensor that ``tensors`` depend on, themselves included, as {id: tensor}."""
    seen = {}
    stack = list(tensors)
    pop, extend = stack.pop, stack.extend
    while stack:
        # (inputs already seen are pushed too and skipped when popped: the same first visits, in the same
        # order, as filtering them first, at half the cost of a generator per tensor)
        t = pop()
        if t.id not in seen:
            seen[t.id] = t
            extend(t.inputs)
    return seen


def to_digraph(tensors) -> nx.DiGraph:
    """The networkx view of the tensors ``tensors`` depend on (edge input -> consumer)."""
    found = ancestors(tensors)
    g = nx.DiGraph()
    for t in sorted(found.values(), key=lambda t: t.id):
        g.add_node(t.id, tensor=t)
        for x in t.inputs:
            g.add_edge(x.id, t.id)
    return g


def topological_order(tensors) -> list:
    """The tensors ``tensors`` depend on, inputs before consumers (networkx's topological sort)."""
    g = to_digraph(tensors)
    return [g.nodes[i]["tensor"] for i in nx.topological_sort(g)]


def sweep_key(node_id):
    """The tie-break of a reverse sweep among the nodes ready: creation order, the earliest made first."""
    return node_id


def reverse_order(roots, follow) -> list:
    """The tensors ``roots`` depend on through inputs ``follow(t)`` accepts, each after all of its consumers
    among them, and of those ready the earliest made first (the smallest id): the order a reverse sweep
    visits them.

    It is networkx's ``lexicographical_topological_sort`` of the reversed graph keyed by creation order,
    which sg.grad runs; eager mode walks its tape with this loop on every backward, without building a
    networkx graph. Both sweeps thus add the contributions meeting at a fork in the same order.
    """
    found, stack = {}, list(roots)
    while stack:
        t = stack.pop()
        if t.id not in found:
            found[t.id] = t
            stack.extend(x for x in t.inputs if x.id not in found and follow(x))
    waiting = dict.fromkeys(found, 0)           # consumers not visited yet (each counted once, as networkx does)
    for t in found.values():
        for i in {x.id for x in t.inputs}:
            if i in waiting:
                waiting[i] += 1
    ready = [(sweep_key(i), i) for i, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        t = found[heapq.heappop(ready)[1]]
        order.append(t)
        for i in {x.id for x in t.inputs}:
            if i in waiting:
                waiting[i] -= 1
                if waiting[i] == 0:
                    heapq.heappush(ready, (sweep_key(i), i))
    return order


class Node:
    """One IR node: an op applied to other nodes (by id). Mutable, unlike the user's tensors."""

    __slots__ = ("id", "op", "inputs", "attrs", "shape", "dtype", "name", "role", "value", "source",
                 "scope", "adjoint_of", "rule", "requires_grad", "tensor", "meta")

    def __init__(self, op, inputs=(), attrs=None, shape=(), dtype=np.float64, name=None, role="forward",
                 value=None, source="", scope="", adjoint_of=None, rule=None, requires_grad=False,
                 tensor=None, id=None, meta=None):
        self.id = next(_node_ids) if id is None else id
        self.op, self.inputs, self.attrs = op, list(inputs), dict(attrs) if attrs else NO_ATTRS
        self.shape, self.dtype, self.name, self.role = tuple(shape), np.dtype(dtype), name, role
        self.value, self.source, self.scope = value, source, scope
        self.adjoint_of, self.rule, self.requires_grad, self.tensor = adjoint_of, rule, requires_grad, tensor
        self.meta = meta

    @classmethod
    def from_tensor(cls, t: Tensor) -> Node:
        # (what __init__ would do, less its conversions: a tensor's shape is a tuple, its dtype a dtype)
        new = cls.__new__(cls)
        new.id, new.op, new.inputs = t.id, t.op, [x.id for x in t.inputs]
        new.attrs = dict(t.attrs) if t.attrs else NO_ATTRS
        new.shape, new.dtype, new.name, new.role = t.shape, t.dtype, t.name, t.role
        new.value = t._value if t.op == "constant" else None
        new.source, new.scope, new.rule, new.requires_grad = t.source, t.scope, t.rule, t._requires_grad
        new.adjoint_of = t.adjoint_of.id if t.adjoint_of is not None else None
        new.tensor, new.meta = t, t.meta
        return new

    def copy(self, **changes) -> Node:
        new = Node.__new__(Node)
        new.id, new.op, new.inputs, new.attrs = self.id, self.op, self.inputs, self.attrs
        new.shape, new.dtype, new.name, new.role = self.shape, self.dtype, self.name, self.role
        new.value, new.source, new.scope, new.adjoint_of = self.value, self.source, self.scope, self.adjoint_of
        new.rule, new.requires_grad, new.tensor, new.meta = self.rule, self.requires_grad, self.tensor, self.meta
        for key, value in changes.items():
            setattr(new, key, value)
        new.inputs = list(new.inputs)
        return new

    def label(self) -> str:
        """What tables, pictures and errors call it: its name, else ``op#id``."""
        return self.name or f"{self.op}#{self.id}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"<Node {self.id} {self.op} {self.inputs} {self.shape}>"


class Graph:
    """The compiler's IR: nodes in topological order, the outputs and the parameter updates.

    ``nodes`` keeps insertion order, and every pass preserves that order as a topological one.
    """

    def __init__(self, nodes=None, outputs=(), updates=(), inputs=()):
        self.nodes: dict[int, Node] = nodes if nodes is not None else {}
        self.outputs = list(outputs)           # node ids
        self.updates = list(updates)           # (parameter node id, expression node id)
        self.inputs = list(inputs)             # placeholder node ids, in call order

    @classmethod
    def from_tensors(cls, outputs, updates=(), inputs=(), found=None) -> Graph:
        """The graph of ``outputs``, ``updates`` and ``inputs``; ``found``: ``ancestors`` of the outputs and
        the update expressions, when the caller already has it."""
        if found is None:
            found = ancestors(list(outputs) + [e for _, e in updates])
        # (leaves: nothing more to walk; the caller's ``found`` is not copied, a million entries)
        extra = {leaf.id: leaf for leaf in [p for p, _ in updates] + list(inputs) if leaf.id not in found}
        ids = sorted(found) if not extra else sorted([*found, *extra])
        nodes = {i: Node.from_tensor(found[i] if i in found else extra[i]) for i in ids}
        del ids
        return cls(nodes, [t.id for t in outputs], [(p.id, e.id) for p, e in updates], [t.id for t in inputs])

    # ------------------------------------------------------------------ editing
    def add(self, node: Node) -> int:
        self.nodes[node.id] = node
        return node.id

    def rebuild(self, visit) -> Graph:
        """A new graph made by calling ``visit(new_graph, node)`` on every node in order (this graph itself
        when every node is kept as it is).

        ``node``'s inputs already point at their replacements (it is a copy when they changed, else the
        node itself, shared with this graph: visitors never mutate it, they add changed copies).
        ``visit`` returns the id that stands for the node in the new graph: its own id to keep it, or the
        id of a replacement, which it may first ``new_graph.add`` (a copy may keep the same id).
        """
        new = Graph(inputs=self.inputs)
        moved = {}               # {id: the id standing for it} for the nodes replaced so far, only those
        nodes = new.nodes
        for node in self.nodes.values():
            if moved:
                inputs = node.inputs
                for i in inputs:
                    if i in moved:
                        node = node.copy(inputs=[moved.get(j, j) for j in inputs])
                        break
            result = visit(new, node)
            if result == node.id:
                if result not in nodes:
                    nodes[result] = node
            else:
                moved[node.id] = result
        # A pass that changed nothing gets this graph back (no second copy of a big graph's dict): every node
        # kept as itself, in the same order, nothing added (compared in C; a reordering only costs a copy).
        if not moved and len(nodes) == len(self.nodes) and all(map(operator.is_, nodes.values(), self.nodes.values())):
            return self
        new.outputs = [moved.get(o, o) for o in self.outputs]
        new.updates = [(moved.get(p, p), moved.get(e, e)) for p, e in self.updates]
        new.inputs = [moved.get(i, i) for i in self.inputs]
        if moved:
            # Provenance follows a replaced forward node to what now computes its value.
            for i, node in nodes.items():
                target = moved.get(node.adjoint_of)
                if target is not None and target in nodes:
                    nodes[i] = node.copy(adjoint_of=target)
        return new

    def without_dead(self) -> Graph:
        """The same graph less the nodes nothing needs (what rewrites left behind)."""
        live = self.live()
        if len(live) == len(self.nodes):
            return self
        return Graph({i: n for i, n in self.nodes.items() if i in live}, self.outputs, self.updates, self.inputs)

    def consumers(self) -> dict:
        """{node id: [ids of the nodes that read it]} (one entry per use)."""
        users = {i: [] for i in self.nodes}
        for node in self.nodes.values():
            for i in node.inputs:
                users[i].append(node.id)
        return users

    def live(self) -> set:
        """Ids of the nodes the outputs and updates need (iteratively)."""
        return self._needed(list(self.outputs) + [i for pair in self.updates for i in pair] + self.inputs)

    def count(self, op=None) -> int:
        if op is None:
            return len(self.nodes)
        return sum(1 for n in self.nodes.values() if n.op == op)

    def parameter_ids(self) -> list:
        """Ids of the parameter nodes, in graph order (the order generated code reads them in)."""
        return [i for i, n in self.nodes.items() if n.op == "parameter"]

    def op_counts(self) -> dict:
        counts = {}
        for n in self.nodes.values():
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    # ------------------------------------------------------------------ views
    def assign_roles(self):
        """backward for adjoint nodes; update for nodes only the updates need; forward otherwise.

        Nodes may be shared with other graphs, so a node whose role changes is replaced by a copy.
        """
        roots = [i for pair in self.updates for i in pair]
        # (no updates, no update nodes: no walk of what the outputs need, a big graph's every node)
        needed_by_updates = self._needed(roots) - self._needed(self.outputs) if roots else set()
        for i, node in self.nodes.items():
            if node.role == "backward":
                continue
            # A leaf too: a parameter or feed that only the updates read (a momentum buffer, a learning
            # rate fed per call) belongs to the update step. A declared input nothing reads stays forward.
            role = "update" if i in needed_by_updates else "forward"
            if role != node.role:
                self.nodes[i] = node.copy(role=role)

    def _needed(self, roots) -> set:
        seen, stack, nodes = set(), list(roots), self.nodes
        add, pop, extend = seen.add, stack.pop, stack.extend     # (a walk of millions of nodes, several per compile)
        while stack:
            i = pop()
            if i not in seen:
                add(i)
                extend(nodes[i].inputs)
        return seen

    def to_networkx(self) -> nx.DiGraph:
        """A networkx.DiGraph of the nodes (attributes op, shape, dtype, role, name, source, scope, attrs,
        adjoint_of, rule, requires_grad, label; ``outputs``/``updates`` on the nodes that are those) and
        edges input -> consumer (``slots``: which of the consumer's inputs). A node holding bodies (a
        loop's) also has ``bodies``: {attribute: the body's own DiGraph, in this form}, whose nodes with
        ``inputs`` (the body's placeholders, in order) and ``outputs`` are what the node feeds and reads."""
        g = nx.DiGraph()
        for node in self.nodes.values():
            g.add_node(node.id, op=node.op, shape=node.shape, dtype=node.dtype, role=node.role,
                       name=node.name, source=node.source, scope=node.scope, attrs=node.attrs,
                       adjoint_of=node.adjoint_of, rule=node.rule, requires_grad=node.requires_grad,
                       label=node.label())
            opdef = REGISTRY.get(node.op)
            if opdef is not None and opdef.bodies:
                # (recursion as deep as loops nest, which a loaded file bounds)
                g.nodes[node.id]["bodies"] = {a: node.attrs[a].graph.to_networkx() for a in opdef.bodies
                                              if a in node.attrs}
            for slot, i in enumerate(node.inputs):
                if g.has_edge(i, node.id):
                    g.edges[i, node.id]["slots"].append(slot)
                else:
                    g.add_edge(i, node.id, slots=[slot])
        for k, o in enumerate(self.outputs):
            g.nodes[o].setdefault("outputs", []).append(k)
        for p, e in self.updates:
            g.nodes[e]["updates"] = p
        for k, i in enumerate(self.inputs):
            if i in g:
                g.nodes[i].setdefault("inputs", []).append(k)
        return g
