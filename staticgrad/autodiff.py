"""Reverse mode: ``grad`` builds the adjoint graph out of ordinary staticgrad ops.

This is the only place that sums gradient contributions at forks and that reduces a broadcast gradient
back to the shape of the input it belongs to.
"""
from __future__ import annotations

import networkx as nx

from . import ops
from . import stable
from .graph import post_order, to_digraph
from .rewrite import rewrite_tensors
from .ops.registry import ELEMENTWISE, REGISTRY, apply
from .tensor import CONTEXT, GradError, Tensor, building, format_shape, gc_paused, user_frame


def sum_to_shape(g: Tensor, x: Tensor, siblings=(), core=0) -> Tensor:
    """Undo broadcasting: sum ``g`` over the axes along which ``x`` was stretched to ``g``'s shape.

    Decided on static shapes where they settle it. Where ``x`` has an unknown size that a sibling input
    of the same op could have stretched (the sibling's size there is not 1), only the run-time shapes
    can tell, and a ``sum_like`` node decides when the function runs (each plan turns it into a plain
    sum or into nothing, so it costs nothing per call).
    """
    if _maybe_stretched(g, x, siblings, core):
        g = apply("sum_like", (g, x))
        if g.dtype != x.dtype and x.dtype.kind in "fc":
            g = ops.cast(g, x.dtype)
        return g
    extra = g.ndim - x.ndim
    lead = tuple(range(extra))
    if lead:
        g = ops.sum(g, axis=lead)
    stretched = tuple(a for a, (d, dg) in enumerate(zip(x.shape, g.shape)) if d == 1 and dg != 1)
    if stretched:
        g = ops.sum(g, axis=stretched, keepdims=True)
    if g.dtype != x.dtype and x.dtype.kind in "fc":
        g = ops.cast(g, x.dtype)
    return g


def _maybe_stretched(g, x, siblings, core=0):
    """Whether ``x`` has an unknown size along an axis that a sibling of size != 1 may have stretched.

    ``core`` trailing axes take no part in broadcasting (a matrix product's two matrix axes).
    """
    for a, d in enumerate(x.shape[:x.ndim - core]):
        if d is not None:
            continue
        ga = g.shape[g.ndim - x.ndim + a]
        if ga == 1:
            continue
        for s in siblings:
            k = s.ndim - x.ndim + a
            if s is not x and 0 <= k < s.ndim and s.shape[k] != 1 and g.ndim - x.ndim + a >= 0:
                return True
    return False


def _check_wrt(wrt, source):
    for w in wrt:
        if not isinstance(w, Tensor):
            raise TypeError(f"grad: wrt must hold tensors, got {type(w).__name__} (at {source})")
        if w.is_leaf and not w.requires_grad:
            what = f"{w.op} {w.name!r}" if w.name else w.op
            hint = " (create it with requires_grad=True)" if w.op == "placeholder" else ""
            raise GradError(f"grad: {what} does not require grad{hint}, so it has no gradient (at {source})")
        if w.dtype.kind != "f":
            raise GradError(f"grad: {w!r} has dtype {w.dtype}; only real floating tensors have gradients "
                            f"(at {source})")


def grad(y, wrt, grad_output=None):
    """Gradients of ``y`` with respect to each tensor in ``wrt``, as tensors of the same graph.

    ``y`` must be a scalar unless ``grad_output`` (the incoming gradient, shaped like ``y``) is given,
    which makes this a vector-Jacobian product. A list in gives a list out; a single tensor in gives a
    single tensor out. Tensors that ``y`` does not depend on get zeros of their shape.
    """
    source = user_frame()
    single = isinstance(wrt, Tensor)
    wrt = [wrt] if single else list(wrt)
    if not isinstance(y, Tensor):
        raise TypeError(f"grad: y must be a tensor, got {type(y).__name__} (at {source})")
    _check_wrt(wrt, source)
    if y.dtype.kind != "f":
        raise GradError(f"grad: y has dtype {y.dtype}; only real floating outputs can be differentiated "
                        f"(at {source})")

    # Built-in VJP rules are package code: every tensor they make belongs to this line of the user's.
    with building(role="backward", source=source):
        # The seed (dy/dy, or grad_output) is y's own adjoint: drawn and commented as belonging to y.
        with building(adjoint_of=y, rule="seed"):
            seed = _seed(y, grad_output, source)
        with gc_paused():
            adjoint, sweep = _reverse_sweep(y, wrt, seed)
        return _results(wrt, adjoint, single, sweep, y)


def _seed(y, grad_output, source):
    if grad_output is None:
        if y.shape != ():
            raise GradError(f"grad: y has shape {format_shape(y.shape)}; pass grad_output for a non-scalar "
                            f"y (a vector-Jacobian product) or reduce it first (at {source})")
        return ops.as_tensor(1.0, like=y.dtype)
    seed = ops.as_tensor(grad_output, like=y.dtype)
    try:
        ops.registry.broadcast_shapes(seed.shape, y.shape)
    except ValueError:
        raise GradError(f"grad: grad_output of shape {format_shape(seed.shape)} does not match y of "
                        f"shape {format_shape(y.shape)} (at {source})") from None
    known = None not in y.shape and None not in seed.shape
    if known and seed.shape != y.shape:
        seed = ops.broadcast_to(seed, y.shape)
    elif not known and seed is not y:
        # Run-time sizes on either side, even where the static shapes agree ((None, 3) and (None, 3) may be
        # 1 and 4 rows): broadcast to y's shape when the call runs (a size that cannot broadcast is an
        # error there). At equal sizes the plan makes no call for it.
        seed = apply("broadcast_like", (seed, y))
    return seed


def _cone(graph: nx.DiGraph, y_id, wrt_ids):
    """Nodes on some path from a wrt tensor to y: the only ones whose adjoint matters."""
    reach = set()
    for w in wrt_ids:
        if w in graph:
            reach.add(w)
            reach.update(nx.descendants(graph, w))
    return reach


def _reverse_sweep(y, wrt, seed):
    graph = to_digraph([y])
    order = [graph.nodes[i]["tensor"] for i in nx.topological_sort(graph)]
    # Differentiate the numerically stable form of the graph (same math, finite gradients).
    origin = {}
    twin = rewrite_tensors(order, stable.RULES, keep=wrt, origin=origin)
    if any(twin[t.id] is not t for t in order):
        y = twin[y.id]
        adjoint, sweep = _reverse_sweep_plain(y, [twin.get(w.id, w) for w in wrt], seed, origin)
        return {w.id: adjoint[twin.get(w.id, w).id] for w in wrt if twin.get(w.id, w).id in adjoint}, sweep
    return _reverse_sweep_plain(y, wrt, seed)


def _provenance(node, origin):
    """(adjoint_of, rule) for the VJP of ``node``: a twin's adjoint nodes belong to the user's tensor it
    stands for, and name the stable form whose rule made them."""
    user = origin.get(node.id) if origin else None
    if user is None:
        return node, node.op
    # "VJP of softplus (stable form of log) node N": N is the node standing for the user's log in the graph
    return user, (node.op if node.op == user.op else f"{node.op} (stable form of {user.op})")


def _reverse_sweep_plain(y, wrt, seed, origin=None):
    graph = to_digraph([y])
    cone = _cone(graph, y.id, [w.id for w in wrt])
    # node id -> (running sum, contributions). Summing as contributions arrive (not when the node is
    # reached) lets the executor drop each contribution right after it was added.
    contributions = {y.id: (seed, [seed])} if y.id in cone else {}
    adjoint = {}
    sweep = []      # one step per node visited: what a reader of the backward pass wants to see
    # eager mode's order (graph.post_order): fork sums add their terms in the same order, same bits
    for node in reversed(post_order([y], lambda x: x.id in cone)):
        node_id = node.id
        entry = contributions.pop(node_id, None)
        if entry is None:
            continue
        g, parts = entry
        adjoint[node_id] = g
        step = {"node": node_id, "op": node.op, "parts": [p.id for p in parts], "adjoint": g.id, "sends": []}
        sweep.append(step)
        opdef = REGISTRY.get(node.op)
        if node.is_leaf or opdef is None or opdef.vjp is None or node.dtype.kind not in "fc":
            continue        # (an integer or boolean value carries no gradient: abs(x > 0) is a step)
        needed = [x.id in cone and x.dtype.kind in "fc" for x in node.inputs]
        if not any(needed):
            continue
        if node.dtype.kind == "c" or any(n and x.dtype.kind == "c" for x, n in zip(node.inputs, needed)):
            raise GradError(f"grad: the gradient would pass through a complex value at {node.op} (made at "
                            f"{node.source}); the VJP rules are written for real values")
        adjoint_of, rule = _provenance(node, origin)
        with building(adjoint_of=adjoint_of, rule=rule):
            if not (getattr(opdef.vjp, "__module__", None) or "").startswith(__package__):
                CONTEXT.source = None            # a VJP written outside the package: its own lines
            grads = opdef.vjp(g, node, *node.inputs, **node.attrs)
            for x, gx, need in zip(node.inputs, grads, needed):
                if gx is None or not need:
                    continue
                siblings = node.inputs if REGISTRY[node.op].has(ELEMENTWISE) or node.op == "matmul" else ()
                core = min(2, x.ndim) if node.op == "matmul" else 0
                contribution = sum_to_shape(ops.as_tensor(gx, like=x.dtype), x, siblings, core)
                step["sends"].append((x.id, contribution.id))
                if x.id not in contributions:
                    contributions[x.id] = (contribution, [contribution])
                    continue
                total, parts = contributions[x.id]
                parts.append(contribution)
                with building(adjoint_of=_provenance(x, origin)[0], rule="sum at fork"):
                    contributions[x.id] = (total + contribution, parts)
    return adjoint, sweep


def _results(wrt, adjoint, single, sweep, y):
    out = []
    for w in wrt:
        g = adjoint.get(w.id)
        if g is None:
            # y does not depend on w: its gradient is zero (TF1 returns None here; zeros compose better).
            # It still reads w's shape, so a function of this gradient takes w as an input (as it does
            # when w has unknown dims); constant folding makes it a constant where the shape is static.
            g = apply("zeros_like", (w,), {"dtype": w.dtype})
        # The sweep that made g, for fn.trace and the DOT pictures; a shared tensor keeps the first.
        if g.meta is None:
            g.meta = {}
        g.meta.setdefault("sweep", sweep)
        g.meta.setdefault("grad_of", w.id)
        g.meta.setdefault("y", y)
        out.append(g)
    return out[0] if single else out

