"""compile(): collect the graph, run the passes over it, and make the Function that lowers and runs it."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from . import effects
from . import passes as passes_mod
from .eager import is_eager
from .function import Function
from .graph import Graph, ancestors
from .loops import roll
from .lower import Backend, as_backend
from .ops import broadcast_to
from .ops.registry import REGISTRY, as_tensor
from .tensor import ShapeError, StaticgradError, Tensor, TensorLike, format_shape, gc_paused, user_frame


def _normalize_updates(updates, source):
    if updates is None:
        return []
    pairs = list(updates.items()) if isinstance(updates, dict) else [tuple(u) for u in updates]
    seen, out = set(), []
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(f"compile: updates must be (parameter, expression) pairs (at {source})")
        param, expr = pair
        if not isinstance(param, Tensor) or param.op != "parameter":
            raise TypeError(f"compile: only parameters can be updated, not {param!r} (at {source})")
        if param.id in seen:
            raise ValueError(f"compile: parameter {param.label()!r} is updated twice (at {source})")
        seen.add(param.id)
        expr = _update_value(param, expr)
        refusal = update_refusal(param, expr)
        if refusal is not None:
            raise type(refusal)(f"compile: update of parameter {param.label()!r} {refusal} (at {source})")
        out.append((param, expr))
    return out


def _update_value(param, expr):
    """A plain number fills the parameter; anything else is a tensor, of the parameter's shape or refused."""
    if not isinstance(expr, Tensor) and np.ndim(expr) == 0:
        return broadcast_to(as_tensor(expr, like=param.dtype), param.shape)
    return as_tensor(expr, like=param.dtype)


def update_refusal(param, expr):
    """Why ``expr`` cannot become the value of ``param`` (tensors or IR nodes), as an exception, or None.
    Its shape must be the parameter's (a None size is checked when the sizes are known): an update is never
    broadcast. Loading a saved function asks this of each of its updates too."""
    shape = expr.shape
    if len(shape) != len(param.shape) or any(d is not None and d != p for d, p in zip(shape, param.shape)):
        return ShapeError(f"has shape {format_shape(shape)}, expected {format_shape(param.shape)}; an update is "
                          "not broadcast: write sg.broadcast_to(value, shape) if that is meant")
    if not np.can_cast(expr.dtype, param.dtype, "same_kind"):
        return TypeError(f"has dtype {expr.dtype}, which cannot become {param.dtype}")
    return None


def _implicit_updates(found, pairs, source):
    """The updates the graph's tensors carry (a batch norm's running statistics, a random key's position),
    checked as the user's are; a parameter the user updates too is refused: which one should win?"""
    explicit = {p.id for p, _ in pairs}
    out = []
    for param, expr, what in effects.implicit_updates(found):
        if param.id in explicit:
            raise ValueError(f"compile: parameter {param.label()!r} is in updates, and the graph updates it "
                             f"by itself ({what}) (at {source})")
        refusal = update_refusal(param, expr)
        if refusal is not None:
            raise type(refusal)(f"compile: {what} of {param.label()!r} {refusal} (at {source})")
        out.append((param, expr))
    return out


def number_draws(graph):
    """Give each random draw (an op with ``draws``) its ``index``: its rank among the draws of its key, in
    build order. A call then reads positions p, p+1, ... of the key's stream, one per draw, as running the
    same code eagerly would, and the key moves on by as many (the effects the draws carry). Before the
    passes: CSE must see draws of one key as different, and optimize=False must number them too. A draw
    the passes later drop (nothing needs its value) still moves its key on."""
    draw_ops = {name for name, opdef in REGISTRY.items() if opdef.draws is not None}
    counts = {}
    for node in [n for n in graph.nodes.values() if n.op in draw_ops]:     # (one quick scan of a big graph)
        key = node.inputs[0]
        node.attrs = dict(node.attrs, index=counts.get(key, 0))
        counts[key] = node.attrs["index"] + 1


def _rolled(outs, pairs):
    """(outputs, updates, their ancestors) with a huge graph's long repeated stretches held as scans (as
    sg.grad holds them: ``loops.reroll``)."""
    tensors = outs + [e for _, e in pairs]
    tensors, found = roll(tensors, ancestors(tensors))
    return tensors[:len(outs)], [(p, e) for (p, _), e in zip(pairs, tensors[len(outs):])], found


def _placeholders(found):
    return sorted((t for t in found.values() if t.op == "placeholder"), key=lambda t: t.id)


def compile(outputs: Tensor | Sequence[Tensor], inputs: Tensor | Sequence[Tensor] | None = None,
            updates: Mapping[Tensor, TensorLike] | Sequence[tuple[Tensor, TensorLike]] | None = None,
            optimize: bool = True, passes: Sequence | None = None, backend: str | Backend = "numpy",
            check_numerics: bool = False) -> Function:
    """Compile ``outputs`` (a tensor or a list) and ``updates`` into one callable.

    ``inputs`` fixes the order of positional feeds (None: feed every placeholder by dict). ``updates``
    are (parameter, expression) pairs or a dict; all are computed from the values before the call and
    assigned after the outputs, only when the whole call succeeded. ``passes`` replaces the default
    pipeline (pass functions or names); ``optimize=False`` runs none. ``backend="numba"`` (optional
    extra) compiles each elementwise region of a plan into one loop; a ``staticgrad.lower.Backend`` also
    says whether tiny plans may run as scalar code and whether memory is planned. ``check_numerics=True``
    checks every value as it is made: the first NaN or infinity raises ``sg.NumericsError`` (a
    FloatingPointError) naming its node, its role and the user's line, and no parameter changes.
    """
    if check_numerics:
        backend = as_backend(backend).replace(check_numerics=True)
    with gc_paused():
        return _compile(outputs, inputs, updates, optimize, passes, backend, user_frame())


def _compile(outputs, inputs, updates, optimize, passes, backend, source):
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"compile: outputs must be tensors, got {type(o).__name__} (at {source})")
        if is_eager(o):
            raise TypeError(f"compile: output {o.label()!r} is an eager tensor, which already holds its value; "
                            f"compile graphs of placeholders and parameters (at {source})")
    if passes is not None and not optimize:
        raise ValueError(f"compile: passes={passes!r} with optimize=False would run no pass; drop one of "
                         f"them (at {source})")
    pairs = _normalize_updates(updates, source)
    outs, pairs, found = _rolled(outs, pairs)
    implicit = _implicit_updates(found, pairs, source)
    if implicit:
        pairs += implicit
        found = ancestors(outs + [e for _, e in pairs])
    needed = _placeholders(found)
    positional = inputs is not None
    if inputs is None:
        inputs = needed
    else:
        inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        for x in inputs:
            if not isinstance(x, Tensor) or x.op != "placeholder":
                raise TypeError(f"compile: inputs must be placeholders, got {x!r} (at {source})")
        if len({x.id for x in inputs}) != len(inputs):
            raise ValueError(f"compile: a placeholder appears twice in inputs (at {source})")
        given = {x.id for x in inputs}
        missing = [x.label() for x in needed if x.id not in given]
        if missing:
            raise StaticgradError(f"compile: the outputs need placeholder(s) {', '.join(map(repr, missing))}, "
                                  f"which are not in inputs (at {source})")

    graph = Graph.from_tensors(outs, pairs, inputs, found)
    del found           # (a million entries, not needed while the passes run)
    number_draws(graph)
    graph.assign_roles()
    unoptimized = graph if len(graph.nodes) <= passes_mod.KEEP_UP_TO else None
    rows = []
    if optimize:
        pipeline = passes_mod.DEFAULT if passes is None else passes
        # (a huge graph kept as no unoptimized copy is held only by the pipeline, which drops it when done)
        box = [graph]
        del graph
        graph, rows = passes_mod.run_pipeline(box.pop(), pipeline, lazy_costs=True)
        graph.assign_roles()
    return link(graph, single, rows, unoptimized, backend=backend, positional=positional)


def link(graph, single=False, rows=(), unoptimized=None, backend="numpy", positional=True) -> Function:
    """A callable for an already optimized graph whose leaf nodes carry their tensors (``node.tensor``).

    ``sg.load`` comes in here too, with a graph rebuilt from a file. ``positional=False`` (compiled with
    ``inputs=None``) takes feeds by dict or name only: the order of ``graph.inputs`` is not the user's.
    """
    return Function(graph, single, list(rows), unoptimized, backend=backend, positional=positional)
