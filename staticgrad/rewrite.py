"""A small rule engine: local rewrites keyed by op name, applied until nothing more matches.

A rule is ``rule(rw, node) -> replacement or None``. It reads the graph only through the rewriter ``rw``
(``rw.inputs(n)``, ``rw.const_value(n)``) and builds only through ``rw.make`` / ``rw.const``, so the same
rule runs on the compiler's IR (passes) and on user tensors (autodiff differentiates stable forms).
"""
from __future__ import annotations

import numpy as np

from .graph import Graph, Node
from .ops.registry import LAYOUT, REGISTRY, apply, is_a
from .tensor import constant


class IRRewriter:
    """Rules over IR nodes; new nodes inherit provenance from the node being rewritten.

    Every node a rule makes is itself rewritten before it is used, so one bottom-up traversal leaves no
    node that a rule (which only looks at a node and its inputs) could still change: a fixed point.
    """

    def __init__(self, graph: Graph, rules=None, budget=None):
        self.graph = graph
        self.rules = rules or {}
        self.template = None
        self.fired = 0
        self._depth = 0
        self.budget = budget if budget is not None else [1 << 30]   # rule firings left (shared, mutable)
        self._last, self._last_inputs = None, ()

    def inputs(self, n):
        # The rules for one node each ask for its inputs (a million-node graph asks millions of times): the
        # last answer is kept. Nodes are never edited in place and ids never rebound while rules run.
        if n is not self._last:
            nodes = self.graph.nodes
            self._last, self._last_inputs = n, [nodes[i] for i in n.inputs]
        return list(self._last_inputs)     # (a copy: a rule may edit the list it gets)

    def const_value(self, n):
        return n.value if n.op == "constant" else None

    def make(self, op, inputs, attrs=None):
        attrs = dict(attrs or {})
        shape, dtype = REGISTRY[op].infer(inputs, **attrs)
        t = self.template
        node = Node(op, [x.id for x in inputs], attrs, shape, dtype, role=t.role, source=t.source, scope=t.scope,
                    adjoint_of=t.adjoint_of, rule=t.rule, requires_grad=any(x.requires_grad for x in inputs))
        self.graph.add(node)
        if node.op in self.rules and self._depth < 8 and self.budget[0] > 0:
            self._depth += 1
            template = self.template
            try:
                node, fired = apply_rules(self, node, self.rules)
                self.fired += fired
            finally:
                self.template, self._depth = template, self._depth - 1
        return node

    def const(self, value, dtype):
        arr = np.array(value, dtype=dtype)
        arr.setflags(write=False)
        t = self.template
        node = Node("constant", (), {}, arr.shape, arr.dtype, role=t.role, value=arr, source=t.source,
                    scope=t.scope)
        self.graph.add(node)
        return node


class _Opaque:
    """A tensor rules may use but not look into (gradients are asked with respect to it)."""

    op = "opaque"

    def __init__(self, tensor):
        self.tensor, self.shape, self.dtype, self.ndim = tensor, tensor.shape, tensor.dtype, tensor.ndim
        self.attrs, self.requires_grad = {}, tensor.requires_grad


class TensorRewriter:
    """Rules over user tensors: builds new tensors, leaves the originals untouched."""

    def __init__(self, keep=(), origin=None):
        self.keep = set(keep)
        self.template = None
        self.origin = {} if origin is None else origin    # {id of a tensor made here: the tensor it replaces}

    def inputs(self, n):
        return [_Opaque(x) if x.id in self.keep else x for x in n.inputs]

    def const_value(self, n):
        return n._value if n.op == "constant" else None

    def make(self, op, inputs, attrs=None):
        inputs = tuple(x.tensor if isinstance(x, _Opaque) else x for x in inputs)
        return self.stands_in(apply(op, inputs, dict(attrs or {}), source=self.template.source))

    def const(self, value, dtype):
        return self.stands_in(constant(value, dtype=dtype))

    def stands_in(self, made, template=None):
        """``made`` replaces ``template`` (the tensor being rewritten): it takes its role, name scope and
        provenance, so a twin graph draws and reads like the graph it mirrors."""
        template = self.template if template is None else template
        made.role, made.scope, made.adjoint_of, made.rule = (template.role, template.scope, template.adjoint_of,
                                                            template.rule)
        self.origin[made.id] = self.origin.get(template.id, template)
        return made


def scalar_value(rw, n):
    """The Python value of a constant holding one number (any shape of size 1), else None."""
    v = rw.const_value(n)
    if v is None or v.size != 1:
        return None
    return v.reshape(()).item()


def is_scalar_const(rw, n, value) -> bool:
    """Whether ``n`` is a constant equal to ``value`` everywhere that broadcasts like a scalar would."""
    v = rw.const_value(n)
    return v is not None and v.size >= 1 and bool(np.all(v == value)) and (v.size == 1 or v.ndim == 0)


def peel_layout(rw, n):
    """Follow ops that only move data (reshape, transpose, ...) down from ``n``: (inner node, [(op, attrs), ...])."""
    layers = []
    while is_a(n, LAYOUT):
        layers.append((n.op, n.attrs))
        n = rw.inputs(n)[0]
    return n, layers


def wrap_layout(rw, n, layers):
    """Re-apply layout ``layers`` (outermost first, as peel_layout returns them) on top of ``n``."""
    for op, attrs in reversed(layers):
        n = rw.make(op, [n], attrs)
    return n


def same_type(a, b) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype


def when_an_input(test):
    """Mark a rule that can match only where ``test(x)`` holds for one of the node's inputs ``x`` (as
    ``rw.inputs`` gives them): the engine asks the test first and skips the rule where no input passes.

    A necessary condition, not the rule itself: the rule is still run in full where it holds. (The rules of
    a big graph's pass are asked of millions of nodes, most of which read no constant, negation or
    broadcast: one test of their inputs instead of each rule's own walk through them.)"""
    def mark(rule):
        rule.when_an_input = test
        return rule
    return mark


def apply_rules(rw, node, rules, limit=16):
    """Rewrite ``node`` with the first matching rule, and its result again, until none matches."""
    current, fired = node, 0
    budget = getattr(rw, "budget", None)
    while fired < limit and (budget is None or budget[0] > 0):
        inputs = tested = passed = None
        for rule in rules.get(current.op, ()):
            test = getattr(rule, "when_an_input", None)
            if test is not None:
                if test is not tested:      # (rules side by side often share a test: asked once)
                    if inputs is None:
                        inputs = rw.inputs(current)
                    tested, passed = test, any(map(test, inputs))
                if not passed:
                    continue
            rw.template = node
            result = rule(rw, current)
            if result is not None and result is not current:
                current, fired = result, fired + 1
                if budget is not None:
                    budget[0] -= 1
                break
        else:
            break
    return current, fired


def rewrite_graph(graph: Graph, rules: dict):
    """Apply ``rules`` over ``graph`` in one bottom-up traversal; returns (graph, rewrites, fixed point).

    Inputs are rewritten before their consumers and every node a rule makes is rewritten too, so for
    rules that only inspect a node and its inputs the result is a fixed point.
    """
    fired_total = 0
    # Rules that undo each other would never settle: bound the work, and then say no fixed point.
    budget = [8 * len(graph.nodes) + 64]

    rw = None

    def visit(new, node):
        nonlocal fired_total, rw
        if node.op not in rules or budget[0] <= 0:
            return node.id
        if rw is None:
            rw = IRRewriter(new, rules, budget)     # one per traversal: ``new`` is the same graph throughout
        rw.fired = 0
        result, fired = apply_rules(rw, node, rules)
        fired_total += fired + rw.fired
        return result.id

    graph = graph.rebuild(visit)
    if fired_total:
        graph = graph.without_dead()
    return graph, fired_total, budget[0] > 0


def rewrite_tensors(order, rules, keep=(), origin=None):
    """Twin of a tensor graph (in topological ``order``) with ``rules`` applied: {old id: new tensor}.

    Tensors in ``keep`` are never rewritten away inside a pattern (so gradients with respect to them stay
    defined); one may be the root of a rewrite, and then the tensor standing in for it is its twin.
    Untouched tensors map to themselves; consumers of rewritten tensors are rebuilt on the new inputs.
    Every tensor the twin makes has the role, scope and provenance of the one it replaces, and ``origin``
    (a dict, when given) receives {its id: that original tensor}.
    """
    keep = {t.id for t in keep}
    rw = TensorRewriter(keep, origin)
    twin = {}
    for t in order:
        if t.is_leaf:
            twin[t.id] = t
            continue
        inputs = [twin.get(x.id, x) for x in t.inputs]     # an input outside ``order`` stays as it is
        current = t
        if any(a is not b for a, b in zip(inputs, t.inputs)):
            # apply, not a bare Tensor: eager tensors compute their value (and tape) when made
            current = rw.stands_in(apply(t.op, tuple(inputs), t.attrs, source=t.source), t)
            current.name = t.name
        if current.op in rules:
            rw.template = t
            current, _ = apply_rules(rw, current, rules)
        if t.id in keep:
            # A kept tensor may itself be replaced (its stand-in has the same adjoint), but no rule may
            # look through it: a pattern that swallowed it would leave it without an adjoint.
            rw.keep.add(current.id)
        twin[t.id] = current
    return twin
