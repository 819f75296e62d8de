"""``sg.summary``: a model's layers as a table, as Keras's ``model.summary()`` gives them, with the FLOPs of a
call and the peak bytes of its plan.

A layer here is a name scope: ``nn`` layers build in scopes of their own (Sequential's k-th in "k.name",
a Conv2d in "conv2d", ...), and any ``with sg.name_scope(...)`` of the user's is one too. Each forward
node belongs to the layer of its innermost scope path; a gradient node to the layer of the forward node
whose gradient it computes; an update node to the layer whose parameter it updates (an optimizer's
scalars shared by every parameter, the step count, to none). What belongs to no layer is one row,
"(unscoped)", last.

Rows are counted on the graph as written (the passes fuse nodes across layers: a conv, its bias and the
relu after it become one node); the totals are the optimized plan's, what a call runs.
"""
from __future__ import annotations

import math
import numbers

from ..compiler import compile as compile_graph
from ..eager import is_eager
from ..function import Function
from ..loops.pytree import flatten
from ..lower import Backend, build_program
from ..lower.costs import node_flops
from ..lower.shapes import at_sizes, concrete_shapes
from ..nn.layers import Module
from ..ops.registry import REGISTRY
from ..tensor import LEAVES, Tensor, format_shape, placeholder
from .summary_modules import module_rows, module_types
from .summary_table import ROLES, Summary

UNSCOPED = "(unscoped)"


def summary(target, batch: int | None = None, feeds=None, input_shape=None, dtype="float64") -> Summary:
    """A table of ``target``'s layers: names, output shapes, parameter counts, FLOPs, then the totals.

    ``target`` is a compiled Function (one row per name scope of its graph, with its FLOPs per call
    split into forward, backward and update, and the peak bytes of its plan), a Tensor (compiled here
    first), or an ``nn.Module`` (one row per layer with its parameters' shapes; with ``input_shape``,
    e.g. ``(None, 784)``, its forward graph is built on a placeholder of that shape and compiled, which
    adds output shapes, FLOPs and peak bytes).

    Sizes unknown until a call (a None batch) are taken as 1 unless ``batch`` (the first axis of every
    input whose first size is unknown) or ``feeds`` (arrays as a call takes them: a list in inputs order
    or a dict) give them; the table then says the figures are for that size 1, per example.

    Returns a :class:`Summary`: ``print`` it (its ``str`` is the table; in a notebook it shows as an HTML
    table), or read ``rows``, ``total_params``, ``trainable_params``, ``non_trainable_params``,
    ``optimizer_params``, ``flops``, ``flops_by_role``, ``peak_bytes``.
    """
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, numbers.Integral) or batch < 1):
        raise ValueError(f"summary: batch must be a positive int, got {batch!r}")
    if isinstance(target, Module):
        return _module_summary(target, batch, feeds, input_shape, dtype)
    if input_shape is not None:
        raise TypeError("summary: input_shape is for an nn.Module; a function's or tensor's graph has its inputs")
    if isinstance(target, Tensor):
        if is_eager(target):
            raise TypeError("summary: an eager tensor keeps no graph to summarize; give the model "
                            "(sg.summary(model, input_shape=...)) or a compiled function")
        target = compile_graph(target)
    if not isinstance(target, Function):
        raise TypeError(f"summary: expected a compiled Function, a Tensor or an nn.Module, got {type(target).__name__}")
    return function_summary(target, batch, feeds)


def function_summary(fn, batch=None, feeds=None, types=None) -> Summary:
    """The summary of compiled function ``fn``; ``types``: {row name: the layer's type} where known."""
    shapes, known = _feed_shapes(fn, batch, feeds)
    graph = fn.unoptimized if fn.unoptimized is not None else fn.ir
    sizes, flops = _costs(graph, shapes)
    rows = _layer_rows(graph, sizes if known else None, flops, types or {})
    plan_flops = _costs(fn.ir, shapes)[1] if graph is not fn.ir else flops
    by_role = dict.fromkeys(ROLES, 0)
    for i, n in plan_flops.items():
        by_role[fn.ir.nodes[i].role] += n
    names = ", ".join(n.label() for n in fn.feeds.nodes)
    result = Summary(f"Function({names}): {len(fn.ir.nodes):,} nodes after the passes", rows)
    result.count_state(fn.ir)
    result.flops_by_role = {role: n for role, n in by_role.items() if n or role == "forward"}
    result.flops, result.flops_as_written = sum(by_role.values()), sum(flops.values())
    result.peak_bytes = _plan_peak(fn, shapes)
    result.set_sizes([n.label() for n in fn.feeds.nodes], shapes, known)
    result.notes += _caveats(fn)
    if fn.unoptimized is None:
        result.flops_as_written = None
    return result


def _caveats(fn) -> list:
    notes = []
    if fn.unoptimized is None:
        notes.append("Note: the rows are counted on the optimized graph (this function keeps no graph as written)")
    if any(REGISTRY[n.op].bodies for n in fn.ir.nodes.values() if n.op in REGISTRY):
        notes.append("Note: loops (scan, while_loop, cond) count as 0 FLOPs: the cost model does not look into "
                     "their bodies")
    return notes


def _module_summary(model, batch, feeds, input_shape, dtype):
    if input_shape is None:
        if batch is not None or feeds is not None:
            raise TypeError("summary: batch= and feeds= size a graph; give an nn.Module its input_shape too")
        result = Summary(_title(model), module_rows(model), kind="module")
        result.count_module(model)
        return result
    x = placeholder(tuple(input_shape), dtype=dtype, name="x")
    outputs = [t for t in flatten(model(x))[0] if isinstance(t, Tensor)]     # (a recurrent layer's (y, state))
    fn = compile_graph(outputs, inputs=[x])
    result = function_summary(fn, batch, feeds, module_types(model))
    result.title = f"{_title(model)} on x {format_shape(x.shape)}"
    result.count_module(model)
    return result


def _title(model) -> str:
    text = repr(model)
    return text if "\n" not in text else type(model).__name__


# ------------------------------------------------------------------ sizes and costs
def _feed_shapes(fn, batch, feeds):
    """(a shape per input, whether those are a call's real sizes rather than 1 for each unknown one)."""
    nodes = fn.feeds.nodes
    if feeds is not None:
        if batch is not None:
            raise TypeError("summary: give batch= or feeds=, not both")
        arrays = fn.check_feeds(feeds) if isinstance(feeds, dict) else fn.check_feeds(*feeds)
        return [tuple(a.shape) for a in arrays], True
    if batch is not None:
        batch = int(batch)
        shapes = [tuple(batch if k == 0 and d is None else d for k, d in enumerate(n.shape)) for n in nodes]
        for node, shape in zip(nodes, shapes):
            if None in shape:
                raise ValueError(f"summary: batch= sizes the first axis only; placeholder {node.label()!r} has "
                                 f"shape {format_shape(shape)}: give feeds= (arrays as a call takes them)")
        return shapes, True
    shapes = [tuple(n.shape) for n in nodes]
    if all(None not in s for s in shapes):
        return shapes, True
    return [tuple(1 if d is None else d for d in s) for s in shapes], False


def _costs(graph, shapes):
    """({node id: shape} at these input shapes, {node id: FLOPs} of the nodes a plan runs), as the pass
    ledger counts them (lower.costs)."""
    order = list(graph.nodes)
    sizes = concrete_shapes(graph, order, shapes)
    _, run = at_sizes(graph, order, sizes)
    return sizes, {i: node_flops(graph.nodes[i], sizes) for i in run}


def _plan_peak(fn, shapes):
    """Peak bytes of intermediates of the plan for these shapes: the latest call's plan when it is for
    them (what fn.report() shows), else the numpy plan built for them now (nothing runs)."""
    program = fn.program
    if program is None or [tuple(program.shapes[i]) for i in fn.ir.inputs] != list(shapes):
        backend = fn.backend
        numpy_only = Backend("numpy", scalar=False, memory_planning=backend.memory_planning,
                             recompute_draws=backend.recompute_draws)
        program = build_program(fn.ir, shapes, numpy_only)
    return program.memory.peak_planned if program.memory is not None else None


# ------------------------------------------------------------------ layers
def _layer_rows(graph, sizes, flops, types) -> list:
    """One row per layer (name scope) of ``graph``, in the order their first nodes were built."""
    nodes = graph.nodes
    members, param_row, read = {}, {}, set(graph.outputs)
    for node in nodes.values():
        if node.role != "forward" or node.op in LEAVES:
            continue
        key = node.scope or UNSCOPED
        members.setdefault(key, []).append(node.id)
        for j in node.inputs:
            if nodes[j].op == "parameter":
                param_row.setdefault(j, key)
            elif (nodes[j].scope or UNSCOPED) != key:
                read.add(j)             # (read by another layer: a layer's output)
    if UNSCOPED in members:             # (what no layer holds, the loss mostly, comes last, as a total does)
        members[UNSCOPED] = members.pop(UNSCOPED)
    owners = _update_owners(graph, param_row, members)
    for p, e in graph.updates:          # state a layer updates itself (running statistics) is its own
        if p not in param_row and not nodes[p].requires_grad and owners.get(e) in members:
            param_row[p] = owners[e]
    rows = {key: _row(key, types.get(key) or types.get(key.rsplit("/", 1)[-1], "")) for key in members}
    for p, key in param_row.items():
        rows[key]["params"] += math.prod(nodes[p].shape)
    for key, row in rows.items():
        # the output: the layer's last node another layer reads or the function returns, else its last
        out = next((i for i in reversed(members[key]) if i in read), members[key][-1])
        row["output_shape"] = format_shape(sizes[out] if sizes is not None else nodes[out].shape)
    for i, n in flops.items():
        if n:
            key = _owner(nodes[i], nodes, param_row, owners, members)
            rows.setdefault(key, _row(key))[nodes[i].role] += n
    return list(rows.values())


def _row(key, kind="") -> dict:
    return {"layer": key, "type": kind, "output_shape": "", "params": 0, **dict.fromkeys(ROLES, 0)}


def _update_owners(graph, param_row, members) -> dict:
    """{update node id: the layer it belongs to}: its own scope's, where that is a layer; else the layer of
    the parameters whose new values it feeds (an optimizer's moments go with their weight), if they are
    all one layer's; else none (UNSCOPED)."""
    nodes, claims = graph.nodes, {}
    for p, e in graph.updates:
        key, seen, stack = param_row.get(p), set(), [e]
        while stack:
            i = stack.pop()
            if i in seen or nodes[i].role != "update":
                continue
            seen.add(i)
            found = claims.setdefault(i, set())
            if key is not None:
                found.add(key)
            stack.extend(nodes[i].inputs)
    owners = {}
    for i, found in claims.items():
        scope = nodes[i].scope
        owners[i] = scope if scope in members else next(iter(found)) if len(found) == 1 else UNSCOPED
    return owners


def _owner(node, nodes, param_row, owners, members) -> str:
    """The layer whose row counts ``node``'s FLOPs."""
    if node.role == "update":
        return owners.get(node.id, UNSCOPED)
    if node.role == "backward":
        forward = nodes.get(node.adjoint_of)
        if forward is None and node.tensor is not None:
            forward = node.tensor.adjoint_of        # (a forward node the passes or pruning left out)
        if forward is not None:
            key = param_row.get(forward.id) if forward.op == "parameter" else forward.scope or UNSCOPED
            if key in members:
                return key
    return node.scope if node.scope in members else UNSCOPED
