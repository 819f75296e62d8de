"""Bodies: a user's function traced once into a closed subgraph over placeholders.

A loop or branch holds its function as a :class:`Body`: placeholders for the function's own arguments,
then one placeholder per outer value the function read (a parameter, a tensor computed before the loop,
or one it computed inside from those alone: that work is hoisted out of the loop as it is traced). The
loop's graph node takes those outer values as inputs, so the body itself reads nothing but its
placeholders and constants, and every pass, the lowering and the pictures can treat it as a graph.
"""
from __future__ import annotations

from ..eager import MixingError, is_eager
from ..eager import tensor as eager_tensor
from ..graph import Graph
from ..ops.registry import apply, as_tensor
from ..tensor import CONTEXT, Tensor, _ids, placeholder


class Body:
    """A traced subgraph: ``params`` (placeholders: the arguments, then ``n_args`` on, the captures) and
    ``outputs``, as tensors; ``graph`` is its IR (built from them on first use, or given by a pass that
    rewrote it). ``hoisted`` counts the outer computations moved out of it while it was traced."""

    def __init__(self, params, outputs, n_args, name="body", graph=None, hoisted=0, base=None):
        self.params, self.outputs, self.n_args, self.name = list(params), list(outputs), n_args, name
        self._graph, self.hoisted = graph, hoisted
        self.base = base if base is not None else self    # the traced body this one extends

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            self._graph = Graph.from_tensors(self.outputs, (), self.params)
        return self._graph

    @property
    def n_params(self) -> int:
        return len(self.params) if self.params else len(self.graph.inputs)

    def with_graph(self, graph) -> Body:
        """The same body with its IR replaced (by a pass); its tensors no longer describe it."""
        return Body((), (), self.n_args, self.name, graph, self.hoisted, self.base)

    @property
    def traced(self) -> bool:
        return bool(self.params) or bool(self.outputs)

    def specs(self):
        """([(shape, dtype)] of its inputs, [(shape, dtype)] of its outputs), from its tensors while it
        has them (a node's shape rule asks, and needs no graph built for it)."""
        if self.traced:
            return [(p.shape, p.dtype) for p in self.params], [(o.shape, o.dtype) for o in self.outputs]
        nodes = self.graph.nodes
        return ([(nodes[i].shape, nodes[i].dtype) for i in self.graph.inputs],
                [(nodes[i].shape, nodes[i].dtype) for i in self.graph.outputs])

    def __repr__(self):
        return f"<Body {self.name}: {self.n_params} inputs, {len(self.graph.outputs)} outputs>"


def arg_placeholder(shape, dtype, name):
    """A body's placeholder for one argument (a float one requires grad: gradients may flow through it)."""
    return placeholder(shape, dtype, name=name, requires_grad=dtype.kind == "f")


class ReadsEager(Exception):      # noqa: N818 (a signal, not an error: the loop runs eagerly instead)
    """Raised by :func:`trace` when the function read an eager tensor: a loop whose state holds none (a
    number as init, a length) still belongs to define-by-run code then, and runs as a Python loop."""


def trace(call, args, name="body"):
    """Run ``call()`` (which reads ``args``, placeholders made for it) once and close what it made over
    them: returns (Body, the outer tensors it captured, in the order of its capture placeholders).

    ``call`` returns the list of output tensors. Every tensor made before ``args`` is outer; so is one made
    inside that depends on no argument (computed once, outside the loop). Constants stay inside. Raises
    :class:`ReadsEager` if ``call`` combined an eager tensor with the placeholders or returned one.
    """
    start = min([a.id for a in args], default=next(_ids))
    CONTEXT.tracing += 1
    try:
        outputs = call()
    except MixingError:
        raise ReadsEager from None
    finally:
        CONTEXT.tracing -= 1
    inside, captured = _split(outputs, args, start)
    if any(is_eager(x) for x in captured):
        raise ReadsEager
    caps = [arg_placeholder(x.shape, x.dtype, x.name or f"{x.op}_{x.id}") for x in captured]
    mapping = {x.id: c for x, c in zip(captured, caps)}
    new_outputs = clone(inside, mapping, outputs)   # (mapping grows: it was made for this call)
    hoisted = sum(1 for x in captured if x.id >= start)
    return Body(list(args) + caps, new_outputs, len(args), name, hoisted=hoisted), captured


def _split(outputs, args, start):
    """(the tensors made from ``args``, in creation order; the outer tensors they or the outputs read)."""
    arg_ids = {a.id for a in args}
    found, stack = {}, list(outputs)
    while stack:
        t = stack.pop()
        if t.id in found:
            continue
        found[t.id] = t
        if t.id >= start and t.id not in arg_ids:
            stack.extend(t.inputs)
    inside = set(arg_ids)
    order = []
    for i in sorted(found):
        t = found[i]
        if i >= start and i not in arg_ids and any(x.id in inside for x in t.inputs):
            inside.add(i)
            order.append(t)
    captured, seen = [], set()
    for t in order + [o for o in outputs]:
        reads = t.inputs if t.id in inside else (t,)
        for x in reads:
            if x.id not in inside and x.id not in seen and x.op != "constant":
                seen.add(x.id)
                captured.append(x)
    return order, captured


def clone(order, new, outputs):
    """The tensors ``outputs`` rebuilt with the tensors of ``new`` ({id: tensor}) in place of those ids;
    ``order`` lists (inputs first) the tensors between that may need rebuilding. ``new`` receives every
    tensor rebuilt."""
    for t in order:
        if t.id in new:
            continue
        inputs = tuple(new.get(x.id, x) for x in t.inputs)
        if all(a is b for a, b in zip(inputs, t.inputs)):
            continue
        new[t.id] = copy_tensor(t, inputs)
    return [new.get(o.id, o) for o in outputs]


def copy_tensor(t, inputs):
    """``t``'s op applied to ``inputs``, with ``t``'s name, line, role, scope, provenance and annotations
    (``meta``, shared: a batch norm's updates, a gradient's sweep stay with the value it stands for)."""
    c = apply(t.op, inputs, t.attrs, source=t.source)
    c.name, c.role, c.scope, c.adjoint_of, c.rule = t.name, t.role, t.scope, t.adjoint_of, t.rule
    c.meta = t.meta
    return c


def outputs_as_tensors(leaves, like=None, what="output"):
    """The leaves a user's function returned, as tensors (numbers adopt ``like[k]``'s dtype)."""
    out = []
    for k, leaf in enumerate(leaves):
        ref = like[k].dtype if like is not None and k < len(like) else None
        t = as_tensor(leaf, like=ref)
        if not isinstance(t, Tensor):
            raise TypeError(f"{what} {k} is a {type(leaf).__name__}, not a tensor")
        out.append(t)
    return out


def role_now() -> str:
    return CONTEXT.role


def eager_leaves(leaves):
    """The leaves of a loop's state for a Python loop on eager tensors: a graph constant among them (a
    counter ``sg.constant(0)``) becomes an eager tensor, so the loop can test and combine it."""
    return [eager_tensor(x.value) if isinstance(x, Tensor) and x.op == "constant" else x for x in leaves]
