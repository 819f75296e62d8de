"""``scan``: a loop over steps held in the graph, traced once, differentiated as a reverse scan.

``scan(fn, init, xs)`` traces ``fn(carry, x) -> (carry, y)`` once into a :class:`Body`; the graph holds one
``scan`` node and a ``loop_output`` per final carry and per stacked ``y``. Its VJP is another scan, run
the other way over the steps: each step runs the body's VJP (built by the same reverse sweep as
``sg.grad``), fed the step's slices, the carry the forward loop started that step with, and the values of
the forward step the VJP reads (its residuals), which the forward loop stacks as extra outputs. The
gradients of the values every step reads (weights) are carried as running sums.
"""
from __future__ import annotations

import operator

import numpy as np

from .. import eager
from ..autodiff import Cotangents, vjp
from ..eager import is_eager
from ..ops.broadcast import expand_dims
from ..ops.registry import REGISTRY, apply, as_tensor
from ..ops.shape import concatenate, zeros_like
from ..tensor import GradError, ShapeError, Tensor, _ids, format_shape, user_frame
from .body import Body, ReadsEager, arg_placeholder, clone, eager_leaves, outputs_as_tensors, trace
from .ops import loop_output, register
from .pytree import flatten, unflatten


def scan(fn, init, xs=None, length=None, reverse=False, checkpoint=None):
    """Loop ``fn(carry, x) -> (carry, y)`` over the leading axis of ``xs`` (or ``length`` times with
    ``x = None``), as ``jax.lax.scan``: returns ``(final carry, ys)``, the ``y`` of every step stacked on
    a new first axis (in step order even when ``reverse=True`` runs the steps last to first).

    ``init``, ``xs`` and the carries and ``y``s are pytrees (tuples, lists, dicts) of tensors; ``y`` may be
    None. ``xs`` may have an unknown length, taken from the feed when the function runs. ``fn`` is traced
    once; on eager tensors (in ``init`` or ``xs``, or read by ``fn``) the loop simply runs. ``checkpoint=k``
    keeps every k-th carry for the backward pass and recomputes the steps between (less memory, one more
    forward step per step).
    """
    source = user_frame()
    init_leaves, init_tree = flatten(init)
    xs_leaves, xs_tree = flatten(xs)
    if checkpoint is not None and _count(checkpoint, source, "checkpoint", 1) < 1:
        raise ValueError(f"scan: checkpoint must be a positive int or None, got {checkpoint!r} (at {source})")
    checkpoint = None if checkpoint is None else int(checkpoint)
    if not any(is_eager(v) for v in init_leaves + xs_leaves):
        try:
            return traced_scan(fn, init_leaves, init_tree, xs_leaves, xs_tree, xs, length, reverse, checkpoint,
                               source)
        except ReadsEager:
            pass         # (fn reads eager tensors: define-by-run code, whatever init and xs hold)
    return _eager_scan(fn, eager_leaves(init_leaves), init_tree, xs_leaves, xs_tree, xs, length, reverse, source)


def traced_scan(fn, init_leaves, init_tree, xs_leaves, xs_tree, xs, length, reverse, checkpoint, source):
    """The scan node of ``fn`` traced once (see :func:`scan`); raises ReadsEager if ``fn`` reads an eager
    tensor."""
    init_t = [as_tensor(v) for v in init_leaves]
    xs_t = [as_tensor(v) for v in xs_leaves]
    length = _static_length(xs_t, length, source)
    carry_ph = [arg_placeholder(t.shape, t.dtype, _name(t, f"carry{k}")) for k, t in enumerate(init_t)]
    x_ph = [arg_placeholder(t.shape[1:], t.dtype, _name(t, f"x{k}", "_t")) for k, t in enumerate(xs_t)]
    y_tree = []

    def call():
        carry = unflatten(init_tree, carry_ph)
        x = unflatten(xs_tree, x_ph) if xs is not None else None
        result = fn(carry, x)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise TypeError(f"scan: fn must return (carry, y), got {type(result).__name__} (at {source})")
        new_carry = _check_carry(result[0], init_tree, init_t, source)
        y_leaves, tree = flatten(result[1])
        y_tree.append(tree)
        return new_carry + outputs_as_tensors(y_leaves, what="scan: y leaf")

    body, captured = trace(call, carry_ph + x_ph, name="scan body")
    attrs = {"body": body, "n_carry": len(init_t), "n_xs": len(xs_t), "length": length,
             "reverse": bool(reverse), "checkpoint": checkpoint}
    outs = loop_outputs(apply("scan", init_t + xs_t + captured, attrs, source=source), body, length, source)
    return unflatten(init_tree, outs[:len(init_t)]), unflatten(y_tree[0], outs[len(init_t):])


def _name(t, default, suffix=""):
    return (t.name + suffix) if t.name else default


def _static_length(xs_t, length, source):
    """The number of steps xs and ``length`` agree on (None: known when the function runs)."""
    for x in xs_t:
        if x.ndim == 0:
            raise ShapeError(f"scan: xs leaves need a leading axis to loop over; got a 0-d {_label(x)} "
                             f"(at {source})")
    sizes = {x.shape[0] for x in xs_t if x.shape[0] is not None}
    if length is not None:
        sizes.add(_count(length, source))
    if len(sizes) > 1:
        raise ShapeError(f"scan: xs and length disagree on the number of steps: {sorted(sizes)} (at {source})")
    if not xs_t and length is None:
        raise ValueError(f"scan: give xs or length (at {source})")
    return sizes.pop() if sizes else None


def _count(value, source, what="length", least=0):
    """``value`` as a Python int (numpy's integers too), if it is an integer of at least ``least``."""
    try:
        n = operator.index(value) if not isinstance(value, (bool, np.bool_)) else least - 1
    except TypeError:
        n = least - 1
    if n < least:
        kind = "a non-negative int" if least == 0 else "a positive int or None"
        raise ValueError(f"scan: {what} must be {kind}, got {value!r} (at {source})")
    return n


def _label(x):
    return x.label() if isinstance(x, Tensor) else f"{type(x).__name__} {x!r:.40}"


def _check_carry(new, init_tree, init_t, source):
    leaves, tree = flatten(new)
    if tree != init_tree:
        raise TypeError(f"scan: fn must return a carry of the same structure as init: {init_tree!r}, got "
                        f"{tree!r} (at {source})")
    out = outputs_as_tensors(leaves, like=init_t, what="scan: carry leaf")
    for k, (a, b) in enumerate(zip(init_t, out)):
        same = len(a.shape) == len(b.shape) and all(p is None or q is None or p == q
                                                     for p, q in zip(a.shape, b.shape))
        if not same or a.dtype != b.dtype:
            raise ShapeError(f"scan: fn turns carry leaf {k} of shape {format_shape(a.shape)} and dtype "
                             f"{a.dtype} into one of shape {format_shape(b.shape)} and dtype {b.dtype}; a "
                             f"carry keeps its shape and dtype (at {source})")
    return out


def loop_outputs(node, body=None, length=None, source=None):
    """One ``loop_output`` per value of a loop node (a scan's: final carries, then the stacked ``y``s)."""
    return [loop_output(node, k) for k in range(len(REGISTRY[node.op].lowering.values(node)))]


def _eager_scan(fn, init_leaves, init_tree, xs_leaves, xs_tree, xs, length, reverse, source):
    """The same loop run in Python on eager tensors (define-by-run: each step is taped as it runs), with
    the checks of the traced loop (a carry keeps its structure, shapes and dtypes; y keeps its structure)."""
    from .. import ops
    init_t = [_as_eager(v, source) for v in init_leaves]
    xs_t = [_as_eager(v, source) for v in xs_leaves]
    steps = _static_length(xs_t, length, source)
    carry, ys, y_tree = unflatten(init_tree, init_t), [None] * steps, None
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        x = unflatten(xs_tree, [v[t] for v in xs_t]) if xs is not None else None
        new, y = _pair(fn(carry, x), source)
        carry = unflatten(init_tree, [_as_eager(v, source) for v in _check_carry(new, init_tree, init_t, source)])
        leaves, tree = flatten(y)
        if y_tree is not None and tree != y_tree:
            raise TypeError(f"scan: fn returned a y of structure {y_tree!r}, then one of {tree!r}; every step's "
                            f"y has one structure (at {source})")
        y_tree, ys[t] = tree, [_as_eager(v, source) for v in outputs_as_tensors(leaves, what="scan: y leaf")]
    if steps == 0:
        return carry, _no_steps(fn, init_t, init_tree, xs_t, xs_tree, xs, source)
    stacked = [ops.stack([ys[t][k] for t in range(steps)]) for k in range(y_tree.size)]
    return carry, unflatten(y_tree, stacked)


def _pair(result, source):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError(f"scan: fn must return (carry, y), got {type(result).__name__} (at {source})")
    return result


def _as_eager(v, source):
    """An eager tensor for a leaf of an eager loop (constants and numbers become eager leaves; a parameter, a
    learned initial state, stays itself so that its gradient lands in its ``.grad``)."""
    if is_eager(v):
        return v
    return eager.lift(as_tensor(v), "scan")


def _no_steps(fn, init_t, init_tree, xs_t, xs_tree, xs, source):
    """The ys of a loop of no steps: empty stacks of what ``fn`` makes, found (as a traced loop finds
    them) by running it once, untaped, on the initial carry and a zero slice."""
    zero = [eager.tensor(np.zeros(v.shape[1:], v.dtype)) for v in xs_t]
    with eager.no_grad():
        _, y = _pair(fn(unflatten(init_tree, init_t), unflatten(xs_tree, zero) if xs is not None else None),
                     source)
    leaves, tree = flatten(y)
    ys = [_as_eager(v, source) for v in outputs_as_tensors(leaves, what="scan: y leaf")]
    return unflatten(tree, [eager.tensor(np.zeros((0,) + v.shape, v.dtype)) for v in ys])


# ------------------------------------------------------------------ the VJP: a reverse scan
def _output_vjp(g, out, loop, index, **_):
    return (Cotangents({index: g}),)


def _scan_vjp(g, out, *inputs, needs, body, n_carry, n_xs, length, reverse, checkpoint):
    if not body.traced:
        raise GradError(f"grad: the scan built at {out.source} was rewritten by a pass; differentiate "
                        "before compiling")
    C, X = n_carry, n_xs
    init, xs, caps = inputs[:C], inputs[C:C + X], inputs[C + X:]
    need_x, need_cap = list(needs[C:C + X]), list(needs[C + X:])
    carries = _carries_needing(body, needs, C, X)
    rev = _ReverseBody(body, C, X, carries, need_x, need_cap, g, counted=length is None)
    shifted = _shifted_carries(body, C, rev.saved, checkpoint)
    kept = [t for t in rev.saved if t.id not in shifted]
    extended = Body(body.params, body.outputs + kept, body.n_args, body.name, hoisted=body.hoisted,
                    base=body.base)
    attrs = dict(out.attrs, body=extended)
    fwd = loop_outputs(apply("scan", inputs, attrs, source=out.source), extended, length, out.source)
    Y = len(body.outputs) - C
    by_id = dict(zip([t.id for t in kept], fwd[C + Y:]))
    stacked = [by_id[t.id] if t.id not in shifted else _carries_before(init[shifted[t.id][0]],
                                                                          fwd[shifted[t.id][1]], reverse)
               for t in rev.saved]
    r_init = [g.get(c) if g.get(c) is not None else zeros_like(init[c]) for c in carries]
    r_init += [zeros_like(caps[j]) for j in range(len(caps)) if need_cap[j]]
    r_xs = [x for x, used in zip(xs, rev.reads_x) if used] + stacked + [g.get(C + k) for k in rev.dys]
    r_attrs = {"body": rev.body, "n_carry": len(r_init), "n_xs": len(r_xs), "length": length,
               "reverse": not reverse, "checkpoint": checkpoint}     # (its memory matters as much)
    r_node = apply("scan", r_init + r_xs + rev.captured(caps), r_attrs, source=out.source)
    r_out = loop_outputs(r_node, rev.body, length, out.source)
    grads = [None] * len(inputs)
    for k, c in enumerate(carries):
        grads[c] = r_out[k] if needs[c] else None
    accs = iter(r_out[len(carries):len(r_init)])
    for j in range(len(caps)):
        if need_cap[j]:
            grads[C + X + j] = next(accs)
    dxs = iter(r_out[len(r_init):])
    for i in range(X):
        if need_x[i]:
            grads[C + i] = next(dxs)
    return grads


def _shifted_carries(body, C, saved, checkpoint):
    """{id of a saved carry placeholder: (carry, index of a y that is that carry's new value)}: the carries
    a step starts with are then the ys of the steps before, shifted by one, not a second stack. (Not for
    a checkpointed scan: its saved values stay row by row.)"""
    if checkpoint is not None:
        return {}
    found = {}
    for c, p in enumerate(body.params[:C]):
        if any(t is p for t in saved):
            k = next((k for k, y in enumerate(body.outputs[C:]) if y is body.outputs[c]), None)
            if k is not None:
                found[p.id] = (c, C + k)
    return found


def _carries_before(init, ys, reverse):
    """The carry each step starts with, from the ys that are each step's new carry: init, then ys but the
    last step's (in the order the steps run)."""
    first = expand_dims(init, 0)
    # (all the rows, then one dropped: a loop of no steps has no ys and no carries before a step either)
    return concatenate([first, ys], axis=0)[:-1] if not reverse else concatenate([ys, first], axis=0)[1:]


def _carries_needing(body, needs, C, X):
    """The carries a gradient flows through: those whose start needs one, and those a value needing one
    reaches (the least fixed point over the body's dependences)."""
    params = body.params
    deps = _dependences(body)
    live = {params[C + i].id for i in range(X) if needs[C + i]}
    live |= {params[C + X + j].id for j in range(len(params) - C - X) if needs[C + X + j]}
    chosen = {c for c in range(C) if needs[c] and params[c].dtype.kind == "f"}
    while True:
        reach = live | {params[c].id for c in chosen}
        more = {c for c in range(C) if c not in chosen and params[c].dtype.kind == "f" and deps[c] & reach}
        if not more:
            return sorted(chosen)
        chosen |= more


def _dependences(body):
    """For each body output, the ids of the params it depends on."""
    param_ids = {p.id for p in body.params}
    out = []
    for o in body.outputs:
        seen, stack, found = set(), [o], set()
        while stack:
            t = stack.pop()
            if t.id in seen:
                continue
            seen.add(t.id)
            if t.id in param_ids:
                found.add(t.id)
            else:
                stack.extend(t.inputs)
        out.append(found)
    return out


def body_order(outputs, params):
    """The tensors between ``params`` and ``outputs``, inputs first."""
    param_ids = {p.id for p in params}
    found, stack = {}, list(outputs)
    while stack:
        t = stack.pop()
        if t.id in found or t.id in param_ids:
            continue
        found[t.id] = t
        stack.extend(t.inputs)
    return [found[i] for i in sorted(found)]


class _ReverseBody:
    """The body of the reverse scan: one step of the forward body's VJP.

    Its carries: the gradient of each carry that needs one, then a running sum per captured value that
    needs one. Its slices: the forward slices it reads, the forward values it reads (``saved``: stacked by
    the forward loop, carries at the start of a step among them), the gradients of the forward ``y``s.
    Its per-step outputs: the gradients of the slices.
    """

    def __init__(self, body, C, X, carries, need_x, need_cap, g, counted=False):
        params = body.params
        p_carry, p_x, p_cap = params[:C], params[C:C + X], params[C + X:]
        Y = len(body.outputs) - C
        self.dys = [k for k in range(Y) if g.get(C + k) is not None]
        d_carry = [arg_placeholder(p_carry[c].shape, p_carry[c].dtype, f"d_{p_carry[c].name}") for c in carries]
        d_acc = [arg_placeholder(p.shape, p.dtype, f"dsum_{p.name}") for p, n in zip(p_cap, need_cap) if n]
        x2 = [arg_placeholder(p.shape, p.dtype, p.name) for p in p_x]
        c2 = [arg_placeholder(p.shape, p.dtype, p.name) for p in p_carry]
        cap2 = [arg_placeholder(p.shape, p.dtype, p.name) for p in p_cap]
        dy = [arg_placeholder(body.outputs[C + k].shape, body.outputs[C + k].dtype, f"d_y{k}") for k in self.dys]
        mapping = {p.id: q for p, q in zip(params, c2 + x2 + cap2)}
        order = body_order(body.outputs, params)
        fwd_start = next(_ids)
        fwd = clone_map(order, mapping)
        sweep_start = next(_ids)
        ys = [fwd.get(body.outputs[c].id, body.outputs[c]) for c in carries]
        ys += [fwd.get(body.outputs[C + k].id, body.outputs[C + k]) for k in self.dys]
        ys = [mapping.get(y.id, y) for y in ys]
        wrt = [c2[c] for c in carries] + [x for x, n in zip(x2, need_x) if n] + [c for c, n in zip(cap2, need_cap) if n]
        grads = vjp(ys, d_carry + dy, wrt)
        grads = [gr if gr is not None else zeros_like(w) for gr, w in zip(grads, wrt)]
        nc = len(carries)
        n_x = sum(need_x)
        acc_grads = grads[nc + n_x:]
        outputs = grads[:nc] + [a + gr for a, gr in zip(d_acc, acc_grads)] + grads[nc:nc + n_x]
        outputs = [as_tensor(o) for o in outputs]
        old = {t.id: t for t in order}
        back = {v.id: old[k] for k, v in fwd.items() if k in old}
        saved_fwd, outputs = _residuals(outputs, fwd_start, sweep_start, back, c2, p_carry)
        self.saved = [s for s, _ in saved_fwd]
        residual_ph = [ph for _, ph in saved_fwd]
        live = {t.id for t in body_order(outputs, []) }
        self.reads_x = [x.id in live for x in x2]
        if counted and x2 and not any(self.reads_x) and not residual_ph and not dy:
            self.reads_x[0] = True      # (a loop of unknown length counts its steps on an xs: one stays)
        self.reads_cap = [c.id in live for c in cap2]
        slices = [x for x, r in zip(x2, self.reads_x) if r] + residual_ph + dy
        cap_params = [c for c, r in zip(cap2, self.reads_cap) if r]
        self.body = Body(d_carry + d_acc + slices + cap_params, outputs, len(d_carry + d_acc + slices),
                         name="reverse scan body")

    def captured(self, caps):
        return [c for c, r in zip(caps, self.reads_cap) if r]


def clone_map(order, mapping):
    """{old id: new tensor} for the tensors of ``order`` rebuilt over ``mapping`` (those unchanged omitted)."""
    new = dict(mapping)
    clone(order, new, [])
    return new


def _residuals(outputs, fwd_start, sweep_start, back, c2, p_carry):
    """The forward values the VJP graph reads, each replaced by a placeholder fed its stacked value:
    ([(forward body tensor to stack, placeholder)], outputs over the placeholders)."""
    grad_part = [t for t in body_order(outputs, []) if t.id >= sweep_start]
    reads = {}
    for t in grad_part + outputs:
        for x in (t.inputs if t.id >= sweep_start else (t,)):
            if fwd_start <= x.id < sweep_start and x.inputs:
                reads.setdefault(x.id, x)
    carry_of = {c.id: k for k, c in enumerate(c2)}
    for t in grad_part + outputs:
        for x in (t.inputs if t.id >= sweep_start else (t,)):
            if x.id in carry_of:
                reads.setdefault(x.id, x)
    pairs, mapping = [], {}
    for i in sorted(reads):
        x = reads[i]
        original = p_carry[carry_of[i]] if i in carry_of else back[i]
        ph = arg_placeholder(x.shape, x.dtype, x.name or f"saved_{x.op}")
        pairs.append((original, ph))
        mapping[i] = ph
    new = dict(mapping)
    outputs = clone(grad_part, new, outputs)
    return pairs, [new.get(o.id, o) for o in outputs]


register(scan, _scan_vjp, _output_vjp)
