"""What a DOT picture shows: the graph to draw with its values and marks, the labels, tooltips and sizes of
its nodes, and which nodes to draw. ``staticgrad.explain.dot`` turns a :class:`Picture` into pydot."""
from __future__ import annotations

import html
import re

import networkx as nx
import numpy as np

from ..graph import Graph
from ..tensor import Tensor, format_shape
from .loopinfo import is_loop
from .trace import format_value, run_values, sweeps_of, tensor_closure


# ------------------------------------------------------------------ what is drawn
class Picture:
    """The graph to draw plus everything known about it (outputs, gradients, values, marks)."""

    def __init__(self, graph, lookup, tensors=None):
        self.graph = graph              # a staticgrad.graph.Graph
        self.lookup = lookup            # {id: Node or Tensor}, wider than graph: for adjoint_of lookups
        self.tensors = tensors or {}
        self.values = None              # {id: array} when feeds were given
        self.records = {}               # {loop id: {body attribute: Iterations}} when iterations were asked for
        self.sweeps = sweeps_of(graph)
        self.marks = {}                 # {id: (style dict, [label lines])}, used by diff_dot
        self.note = ""                  # extra text for the legend

    @property
    def gradient_ids(self) -> set:
        """Ids of tensors that carry gradients: contributions, fork sums and totals of every sweep."""
        ids = set()
        for steps, _ in self.sweeps:
            for step in steps:
                ids.update(step["parts"])
                ids.add(step["adjoint"])
                ids.update(c for _, c in step["sends"])
        # the running sums at forks carry gradient too
        ids.update(i for i, n in self.graph.nodes.items() if n.rule == "sum at fork")
        return ids

    def name_of(self, i) -> str:
        node = self.lookup.get(i)
        return node.label() if node is not None else f"#{i}"

    def scope_of(self, node) -> str:
        """A backward node is drawn in the scope of the forward node whose gradient it computes, a parameter
        made outside any scope in the scope of its readers (a layer's weights in the layer's), and an
        update node without a scope of its own in the scope of the parameters it helps update."""
        if node.role == "backward" and node.adjoint_of is not None:
            fwd = self.lookup.get(node.adjoint_of)
            if fwd is not None:
                return self._own_scope(fwd)
        scope = self._own_scope(node)
        if node.role == "update" and not scope:
            return self.update_bands().get(node.id, "")
        return scope

    def cluster_scope(self, node) -> str:
        """Where the full picture draws ``node``: its scope, but an update node that serves the parameters of
        one scope only (a layer's) in that scope first, so each layer's update reads as a band of its own:
        Adam's new first moment of mlp.0's weight sits in "mlp.0/adam.m"."""
        scope = self.scope_of(node)
        band = self.update_bands().get(node.id, "") if node.role == "update" else ""
        if not band or scope == band or scope.startswith(band + "/"):
            return scope or band
        return f"{band}/{scope}" if scope else band

    def _own_scope(self, node) -> str:
        if node.scope or node.op != "parameter":
            return node.scope or ""
        return self._parameter_scopes().get(node.id, "")

    def _parameter_scopes(self) -> dict:
        """{id: scope} of the parameters made outside any scope: what their forward readers' scopes share
        (else their update readers', for optimizer state), when that is not empty."""
        if getattr(self, "_parameter_scope_map", None) is None:
            readers = {}            # parameter id -> {role: scopes of its readers}
            for node in self.graph.nodes.values():
                for i in node.inputs:
                    p = self.graph.nodes[i]
                    if p.op == "parameter" and not p.scope and node.scope:
                        readers.setdefault(i, {}).setdefault(node.role, []).append(node.scope)
            found = {}
            for i, by_role in readers.items():
                scopes = by_role.get("forward") or by_role.get("update")
                scope = _shared_scope(scopes) if scopes else ""
                if scope:
                    found[i] = scope
            self._parameter_scope_map = found
        return self._parameter_scope_map

    def update_bands(self) -> dict:
        """{id: scope} for update nodes: what the scopes of the trained parameters (those the forward or
        backward graph reads) share whose new values they help compute; for the update of other state (a
        running mean), the scope of that state."""
        if getattr(self, "_band_map", None) is None:
            nodes, found = self.graph.nodes, {}
            trained = [(p, e) for p, e in self.graph.updates if nodes[p].role != "update"]
            for p, e in trained:
                _spread(nodes, found, e, self._own_scope(nodes[p]))
            rest, reached = {}, set(found)
            for p, e in self.graph.updates:
                if nodes[p].role == "update" and e not in reached:
                    _spread(nodes, rest, e, self._own_scope(nodes[p]), skip=reached)
            found.update(rest)
            self._band_map = found
        return self._band_map


def _spread(nodes, found, start, scope, skip=()):
    """Merge ``scope`` into ``found`` for the update nodes ``start`` is computed from (not into ``skip``)."""
    stack = [start]
    while stack:
        i = stack.pop()
        if nodes[i].role != "update" or i in skip:
            continue
        merged = _shared_scope([found[i], scope]) if i in found else scope
        if i in found and merged == found[i]:
            continue        # (its inputs were reached already and do not change either)
        found[i] = merged
        stack.extend(nodes[i].inputs)


def _shared_scope(scopes) -> str:
    """The longest run of leading scope names all of ``scopes`` share ("a/b" and "a/c": "a")."""
    parts = [s.split("/") for s in scopes]
    shared = []
    for names in zip(*parts):
        if any(n != names[0] for n in names):
            break
        shared.append(names[0])
    return "/".join(shared)


def picture_of(target, stage="optimized") -> Picture:
    from ..function import Function
    if isinstance(target, Function):
        if stage not in ("optimized", "unoptimized"):
            raise ValueError(f"to_dot: stage must be 'optimized' or 'unoptimized', got {stage!r}")
        base = target.unoptimized
        if stage == "unoptimized" and base is None:
            raise ValueError("to_dot: this function keeps no unoptimized graph (it was linked from a loaded "
                             "graph, or compiled from more than staticgrad.passes.KEEP_UP_TO nodes); draw "
                             "stage='optimized'")
        graph = base if stage == "unoptimized" else target.ir
        lookup = dict(tensor_closure(base)) if base is not None else {}
        lookup.update(base.nodes if base is not None else {})
        lookup.update(graph.nodes)
        pic = Picture(graph, lookup)
        pic.function = target
        return pic
    if isinstance(target, Tensor):
        tensors = [target]
    else:
        tensors = list(target)
        if not tensors or not all(isinstance(t, Tensor) for t in tensors):
            raise TypeError("to_dot: expected a tensor, a non-empty list of tensors or a compiled function, "
                            f"got {type(target).__name__}")
    graph = Graph.from_tensors(tensors)
    graph.assign_roles()
    lookup = dict(tensor_closure(graph))
    lookup.update(graph.nodes)
    pic = Picture(graph, lookup)
    pic.function = None
    return pic


def _add_values(pic, feeds, keep=0):
    """Values on ``pic``'s nodes from one run on ``feeds``; with ``keep``, what each loop's body computed
    at its first and last ``keep`` iterations."""
    target = pic.function if pic.function is not None else pic.graph
    optimized = pic.function is not None and pic.graph is pic.function.ir
    records = {} if keep and not optimized else None
    values, _ = run_values(target, feeds, records, keep)
    if pic.function is not None:
        # Nodes a pass created (new ids) are computed from their inputs when the registry knows their op;
        # so are loops, whose bodies the passes rewrite under the same id.
        from .trace import evaluate, feeds_by_id
        if optimized:
            values = {i: v for i, v in values.items() if not (i in pic.graph.nodes and is_loop(pic.graph.nodes[i]))}
            records = {} if keep else None
        values = evaluate(pic.graph, feeds_by_id(pic.function, feeds), known=values, records=records, keep=keep)
    pic.values = values
    pic.records = records or {}


# ------------------------------------------------------------------ labels and sizes
def _bytes(n) -> str:
    """The exact count of bytes, with a rounded larger unit alongside from 1 KiB up ("9600 B (9.4 KiB)")."""
    exact = f"{int(n)} B"
    if n < 1024:
        return exact
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{exact} ({n:.1f} {unit})"


def _static_bytes(node):
    """(bytes, True) for a fully known static shape, else (bytes per unit of the unknown dims, False)."""
    n = int(np.prod([d for d in node.shape if d is not None], dtype=np.int64)) * node.dtype.itemsize
    return n, None not in node.shape


def nbytes(value) -> int:
    """The bytes of a value (of a loop node's several values: their sum)."""
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    return np.asarray(value).nbytes


def saved_size(node, value=None) -> str:
    """The bytes a saved forward value takes: measured when its value is known, else from its static shape
    (with unknown dims: the bytes per unit of them, followed by "× ?")."""
    if value is not None:
        return _bytes(nbytes(value))
    n, known = _static_bytes(node)
    return _bytes(n) if known else f"{_bytes(n)} × ? (unknown dims)"


def _total_size(nodes, values) -> str:
    fixed, per_unknown = 0, 0
    for node in nodes:
        v = values.get(node.id) if values else None
        if v is not None:
            fixed += nbytes(v)
            continue
        n, known = _static_bytes(node)
        if known:
            fixed += n
        else:
            per_unknown += n
    if not per_unknown:
        return _bytes(fixed)
    return (f"{_bytes(fixed)} + " if fixed else "") + f"{_bytes(per_unknown)} × ?"


def _esc(text) -> str:
    return html.escape(str(text), quote=False)


def node_lines(pic, node) -> list:
    """The label of ``node`` as lines of (already escaped) HTML."""
    if node.op == "constant" and node.value is not None and np.size(node.value) <= 4:
        head = f"constant <B>{_esc(format_value(node.value))}</B>" + (f" {_esc(node.name)}" if node.name else "")
    else:
        head = f"<B>{_esc(node.op)}</B>" + (f" {_esc(node.name)}" if node.name else "")
    lines = [head, f'<FONT POINT-SIZE="10">{_esc(format_shape(node.shape))} {_esc(node.dtype)}</FONT>']
    if pic.values is not None and node.op != "constant":
        lines.append(f'<FONT POINT-SIZE="10" COLOR="#1f4e79">= {_esc(format_value(pic.values.get(node.id)))}</FONT>')
    return lines


def _marks(pic, node, outputs) -> list:
    lines = [f"output {k}" for k in outputs.get(node.id, [])]
    meta = node.meta or {}
    if "grad_of" in meta:
        steps = meta.get("sweep") or []
        y = pic.name_of(steps[0]["node"]) if steps else "y"
        what = f"d{y}/d{pic.name_of(meta['grad_of'])}"         # dloss/dW: which output, which input
        lines = [f"{lines[0]}: {what}"] + lines[1:] if lines else [what]
    return [f'<FONT POINT-SIZE="10" COLOR="#7f0000"><B>{_esc(t)}</B></FONT>' for t in lines]


def tooltip(pic, node) -> str:
    """The user's line, name scope, provenance (for an adjoint) and value of ``node``, as hover text."""
    parts = [f"{node.label()}: {node.op} {format_shape(node.shape)} {node.dtype}, built at {node.source or '?'}"]
    if node.scope:
        parts.append(f"name scope: {node.scope}")
    if node.adjoint_of is not None:
        fwd = pic.lookup.get(node.adjoint_of)
        what = f"{fwd.label()} ({fwd.op} at {fwd.source})" if fwd is not None else f"node {node.adjoint_of}"
        parts.append(f"adjoint of {what}, VJP rule: {node.rule}")
    if pic.values is not None and node.id in pic.values:
        parts.append(f"value: {format_value(pic.values[node.id], max_size=64)}")
    return "\n".join(parts)


# ------------------------------------------------------------------ choosing what to draw
def neighbourhood(graph, around, depth) -> set:
    """Ids within ``depth`` edges (either direction) of ``around`` (a tensor, a node or an id)."""
    i = around.id if hasattr(around, "id") else around
    if i not in graph.nodes:
        what = around.label() if hasattr(around, "op") else f"node {i}"
        raise ValueError(f"to_dot: around={what} is not in the drawn graph (a pass may have removed it: "
                         "try stage='unoptimized')")
    g = nx.Graph()
    g.add_nodes_from(graph.nodes)
    g.add_edges_from((j, n.id) for n in graph.nodes.values() for j in n.inputs)
    return set(nx.single_source_shortest_path_length(g, i, cutoff=int(depth)))


def _collapsed_group(scope, collapse):
    """The name scope a node of ``scope`` is folded into, or None."""
    if not collapse or not scope:
        return None
    if collapse is True:
        return scope.split("/")[0]
    for name in sorted(collapse, key=lambda s: s.count("/")):
        if scope == name or scope.startswith(name + "/"):
            return name
    return None


def _cluster_id(*parts) -> str:
    return re.sub(r"\W", "_", "_".join(parts))
