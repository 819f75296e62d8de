"""A graph as JSON and back: its nodes, and the bodies of its loop nodes as graphs nested in them.

An op whose registration lists ``bodies`` (a loop's or a branch's subgraphs) has each body stored under
its node's ``"bodies"``, as a graph of its own: its nodes, its inputs (placeholders, listed in the body's
own entry rather than in the file's table) and outputs, its constants among the file's arrays. Reading
checks a body as it checks the outer graph (every op registered, every reference to a node of the same
body, every shape rule run, the loop op's own rule checking the body against the node's inputs) and
refuses bodies nested more than :data:`MAX_DEPTH` deep. Nothing here is pickled or evaluated.
"""
from __future__ import annotations

import functools
import inspect
import keyword

import numpy as np

from .encoding import (
    LoadError,
    _check_text,
    _dtype_name,
    _is_shape,
    _text,
    decode_attr,
    decode_dtype,
    encode_attr,
)
from .graph import Graph, Node
from .loops.body import Body
from .loops.ops import MULTI
from .ops.registry import REGISTRY
from .tensor import LEAVES, ROLES, VARIABLES

MAX_DEPTH = 32          # bodies inside bodies: deeper is refused at save and at load
MULTI_NAME = "object"   # the dtype a file gives a node of several values (a loop's)


def expect(cond, message):
    if not cond:
        raise LoadError(message)


def _bodies(op):
    return getattr(REGISTRY.get(op), "bodies", ())


# ------------------------------------------------------------------ writing
def encode_nodes(graph, label, tables, depth=0) -> list:
    """The JSON entries of ``graph``'s nodes; parameters and outer placeholders go into ``tables`` (by
    key), constants into ``tables.arrays``; a body's own placeholders are described where they stand."""
    nodes = []
    for node in graph.nodes.values():
        bodies = _bodies(node.op)
        entry = _encode_node(node, bodies)
        if node.op == "parameter":
            entry["ref"] = tables.param(node.tensor)
        elif node.op == "placeholder" and not depth:
            entry["ref"] = tables.placeholder(node.tensor)
        elif node.op == "constant":
            key = f"c{label}_{len(tables.arrays)}"
            tables.arrays[key] = np.asarray(node.value)
            entry["value"] = key
        if bodies:
            where = f"{node.op} node {node.id}"
            entry["bodies"] = {a: _encode_body(node.attrs[a], f"the {a} of {where}", label, tables, depth + 1)
                               for a in bodies}
        nodes.append(entry)
    return nodes


def _encode_node(node, bodies):
    where = f"{node.op} node {node.id}"
    # A value of several values (a loop node's, or the tape a recording while_loop hands its reverse loop
    # through a loop_output) is stored as MULTI_NAME; a loop_output's own statement of that dtype is left
    # out (its rule finds it from the loop when the file loads), as no attribute holds a non-numeric dtype.
    multi = node.dtype == MULTI and (bodies or node.op == "loop_output")
    return {"id": node.id, "op": node.op, "inputs": list(node.inputs),
            "attrs": {k: encode_attr(v, f"attribute of {where} {k!r}") for k, v in node.attrs.items()
                      if k not in bodies and not (multi and k == "dtype" and v == MULTI)},
            "shape": list(node.shape),
            "dtype": MULTI_NAME if multi else _dtype_name(node.dtype, f"{where}"),
            "name": _text(node.name, f"the name of {where}"), "role": node.role,
            "source": _text(node.source, f"the source of {where}"),
            "scope": _text(node.scope, f"the scope of {where}"),
            "adjoint_of": node.adjoint_of, "rule": node.rule, "requires_grad": bool(node.requires_grad)}


def _encode_body(body, where, label, tables, depth):
    if not isinstance(body, Body):
        raise TypeError(f"save: {where} is a {type(body).__name__}, not a Body")
    if depth > MAX_DEPTH:
        raise ValueError(f"save: {where} is nested more than {MAX_DEPTH} bodies deep; loading refuses that")
    graph = body.graph
    return {"name": _text(body.name, f"the name of {where}"), "n_args": body.n_args, "hoisted": body.hoisted,
            "inputs": list(graph.inputs), "outputs": list(graph.outputs),
            "nodes": encode_nodes(graph, label, tables, depth)}


# ------------------------------------------------------------------ reading
@functools.cache
def _infer_signature(op):
    return inspect.signature(REGISTRY[op].infer)


class Reader:
    """Reads the graphs of one file: ``arrays`` its members, ``params`` and ``holders`` the tensors of
    its parameter and placeholder tables, by key."""

    def __init__(self, arrays, params, holders):
        self.arrays, self.params, self.holders = arrays, params, holders

    def nodes(self, entries, depth=0) -> dict:
        """{id: node} of a node list (the outer graph's at depth 0, a body's deeper)."""
        expect(isinstance(entries, list), "a graph without a node list")
        nodes = {}
        for entry in entries:
            node = self.node(entry, nodes, depth)
            nodes[node.id] = node
        return nodes

    def node(self, entry, nodes, depth) -> Node:
        expect(isinstance(entry, dict), f"a node must be an object, got {entry!r:.80}")
        nid, op = entry.get("id"), entry.get("op")
        expect(type(nid) is int and nid >= 0 and nid not in nodes, f"bad or repeated node id {nid!r:.40}")
        expect(isinstance(op, str) and (op in LEAVES or op in REGISTRY), f"node {nid}: unknown op {op!r:.80}")
        inputs = entry.get("inputs")
        expect(isinstance(inputs, list) and all(type(i) is int and i in nodes for i in inputs),
               f"node {nid} ({op}): inputs must be ids of earlier nodes" + (" of its body" if depth else ""))
        # (a loop's values are read through loop_output nodes alone: anything else would get a tuple; a
        # value of several values read that way, a while_loop's tape, only by a loop, whose rule checks it)
        for i in inputs:
            if nodes[i].dtype == MULTI:
                expect(op == "loop_output" if _bodies(nodes[i].op) else bool(_bodies(op)),
                       f"node {nid} ({op}): reads a loop node itself, not one of its values" if _bodies(nodes[i].op)
                       else f"node {nid} ({op}): reads the tape of a loop, which only a loop reads")
        attrs = self._attrs(entry, nid, op, depth)
        node = _bare_node(entry, nid, op, inputs, attrs)
        if op in LEAVES:
            expect(not inputs and not attrs, f"node {nid} ({op}): a leaf has no inputs or attributes")
            self._leaf(entry, node, depth)
        else:
            _check_rule(node, nodes)
            _check_tapes(node, nodes)
        return node

    def _attrs(self, entry, nid, op, depth):
        attrs, bodies = entry.get("attrs"), _bodies(op)
        expect(isinstance(attrs, dict), f"node {nid} ({op}): attrs must be an object")
        for key in attrs:
            # Keys become keyword arguments in generated source.
            expect(isinstance(key, str) and key.isidentifier() and not keyword.iskeyword(key),
                   f"node {nid} ({op}): attribute name {key!r:.80} is not an identifier")
            expect(key not in bodies, f"node {nid} ({op}): its {key!r} is a body, stored under 'bodies'")
        attrs = {k: decode_attr(v) for k, v in attrs.items()}
        given = entry.get("bodies", {})
        expect(isinstance(given, dict) and set(given) == set(bodies),
               f"node {nid} ({op}): the op has bodies {list(bodies)}, the file gives {list(given)[:8]!r:.80}")
        for key in bodies:
            try:
                attrs[key] = self.body(given[key], depth + 1)
            except LoadError as err:
                raise LoadError(f"the {key} of {op} node {nid}: {err}") from None
        return attrs

    def _leaf(self, entry, node, depth):
        nid, op = node.id, node.op
        if op == "constant":
            key = entry.get("value")
            expect(isinstance(key, str) and key in self.arrays, f"constant node {nid}: no value in the file")
            value = np.array(self.arrays[key], copy=True)
            expect(value.shape == node.shape and value.dtype == node.dtype,
                   f"constant node {nid}: its value does not match its shape/dtype")
            value.setflags(write=False)
            node.value = value
        elif op == "placeholder" and depth:
            # A body's placeholder is fed by its loop, from values whose dtypes the loop's rule checks.
            expect(node.dtype != MULTI and "ref" not in entry, f"placeholder node {nid} of a body: bad entry")
        elif op in VARIABLES:
            table = self.params if op == "parameter" else self.holders
            tensor = table.get(entry.get("ref"))
            expect(tensor is not None, f"{op} node {nid}: unknown reference {entry.get('ref')!r:.40}")
            expect(tensor.shape == node.shape and tensor.dtype == node.dtype,
                   f"{op} node {nid}: shape/dtype differ from its table entry")
            tensor.source, tensor.scope = node.source, node.scope
            node.tensor = tensor

    def body(self, doc, depth) -> Body:
        """The Body a node's ``"bodies"`` entry describes, its graph checked as the outer one is."""
        expect(depth <= MAX_DEPTH, f"bodies nested more than {MAX_DEPTH} deep")
        expect(isinstance(doc, dict), f"a body must be an object, got {doc!r:.80}")
        nodes = self.nodes(doc.get("nodes"), depth)
        inputs, outputs, n_args, hoisted = (doc.get(k) for k in ("inputs", "outputs", "n_args", "hoisted"))
        holders = sorted(i for i, n in nodes.items() if n.op == "placeholder")
        expect(isinstance(inputs, list) and all(type(i) is int for i in inputs) and sorted(inputs) == holders,
               "a body's inputs must be its placeholders, each once")
        expect(isinstance(outputs, list) and all(type(i) is int and i in nodes for i in outputs),
               "a body's outputs must be ids of its nodes")
        expect(all(nodes[i].dtype != MULTI for i in outputs), "a body's output is a loop node, not a value")
        # (n_args is what the body was traced with: a pass that drops inputs may leave it as it was)
        expect(type(n_args) is int and n_args >= 0, f"a body's n_args {n_args!r:.20} is bad")
        expect(type(hoisted) is int and hoisted >= 0, f"a body's hoisted count {hoisted!r:.20} is bad")
        name = _check_text(doc.get("name"), "a body's name", optional=False)
        return Body((), (), n_args, name, Graph(nodes, outputs, (), inputs), hoisted)


def _node_dtype(text):
    return MULTI if text == MULTI_NAME else decode_dtype(text)


def _bare_node(entry, nid, op, inputs, attrs):
    """The node an entry describes, its texts and flags checked, before its op's rule has run."""
    expect(_is_shape(entry.get("shape")), f"node {nid} ({op}): bad shape {entry.get('shape')!r:.80}")
    expect(entry.get("role") in ROLES, f"node {nid} ({op}): bad role {entry.get('role')!r:.40}")
    adjoint_of = entry.get("adjoint_of")
    expect(adjoint_of is None or type(adjoint_of) is int, f"node {nid}: bad adjoint_of")
    expect(isinstance(entry.get("requires_grad"), bool), f"node {nid}: bad requires_grad")
    return Node(op, inputs, attrs, tuple(entry["shape"]), _node_dtype(entry.get("dtype")),
                _check_text(entry.get("name"), f"node {nid}'s name"), entry["role"], None,
                _check_text(entry.get("source"), f"node {nid}'s source", optional=False),
                _check_text(entry.get("scope"), f"node {nid}'s scope", optional=False), adjoint_of,
                _check_text(entry.get("rule"), f"node {nid}'s rule"), entry["requires_grad"], id=nid)


def _check_rule(node, nodes):
    # The op's own shape rule must agree with what the file says: an edited shape, dtype or attribute is
    # refused here, not found out (or not) when the function runs. A loop op's rule checks its bodies.
    nid, op, inputs, attrs = node.id, node.op, node.inputs, node.attrs
    try:
        _infer_signature(op).bind(inputs, **attrs)      # (names the attribute the op does not take)
        shape, dtype = REGISTRY[op].infer([nodes[i] for i in inputs], **attrs)
    except Exception as err:        # whatever a shape rule raises on inputs it was never built with
        raise LoadError(f"node {nid} ({op}): its inputs and attributes do not fit the op: "
                        f"{type(err).__name__}: {err}") from None
    expect(tuple(shape) == node.shape and np.dtype(dtype) == node.dtype,
           f"node {nid} ({op}): the file says shape {node.shape} and dtype {node.dtype}, its inputs give "
           f"{tuple(shape)} and {np.dtype(dtype)}")


def _check_tapes(node, nodes):
    # A tape (a value of several values a recording loop hands on through a loop_output) must hold what the
    # loop reading it takes, entry by entry: the two loops' lowerings say what each makes and takes.
    for i in node.inputs:
        tape = nodes[i]
        if tape.dtype == MULTI and not _bodies(tape.op):
            loop = nodes[tape.inputs[0]]
            try:
                REGISTRY[node.op].lowering.check_tape(node, REGISTRY[loop.op].lowering.tape_entries(loop))
            except Exception as err:        # (an op that reads or records no tape has no such method)
                raise LoadError(f"node {node.id} ({node.op}): the tape it reads does not fit it: "
                                f"{type(err).__name__}: {err}") from None
