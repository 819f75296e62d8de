"""``cond``: a branch held in the graph; only the branch taken runs, and its gradient is a branch too.

``cond(pred, true_fn, false_fn, *operands)`` traces both functions once into bodies over the same
inputs (the operands, then every outer value either branch reads), held by one ``cond`` node whose values
are read through ``loop_output`` nodes. Its VJP is another ``cond`` on the same predicate whose branches
are the two bodies' VJPs (each recomputes its branch from the operands, then runs its reverse sweep).
"""
from __future__ import annotations

from ..autodiff import vjp
from ..eager import is_eager, value_of
from ..ops.registry import apply, as_tensor, defop
from ..ops.shape import zeros_like
from ..tensor import GradError, ShapeError, format_shape, user_frame
from .body import Body, ReadsEager, arg_placeholder, outputs_as_tensors, trace
from .ops import MULTI, fits, loop_output, publish
from .pytree import flatten, unflatten


def cond(pred, true_fn, false_fn, *operands):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, as ``jax.lax.cond``: ``pred`` is a
    boolean (or number) scalar tensor; both functions return pytrees of the same structure, shapes and
    dtypes. Both are traced once; when the function runs, only the branch taken is computed. On eager
    tensors (``pred``, the operands, or read by a branch) it is a Python ``if``."""
    source = user_frame()
    leaves, tree = flatten(list(operands))
    if not (is_eager(pred) or any(is_eager(v) for v in leaves)):
        try:
            return _traced_cond(pred, true_fn, false_fn, leaves, tree, source)
        except ReadsEager:
            pass         # (a branch reads eager tensors: define-by-run code)
    taken = bool(value_of(as_tensor(pred), "cond"))
    return true_fn(*operands) if taken else false_fn(*operands)


def _traced_cond(pred, true_fn, false_fn, leaves, tree, source):
    pred = as_tensor(pred)
    if pred.shape != ():
        raise ShapeError(f"cond: pred must be a scalar, got shape {format_shape(pred.shape)} (at {source})")
    args = [as_tensor(v) for v in leaves]
    bodies, out_tree = [], []
    for name, fn in (("true branch", true_fn), ("false branch", false_fn)):
        phs = [arg_placeholder(a.shape, a.dtype, a.name or f"operand{k}") for k, a in enumerate(args)]

        def call(fn=fn, phs=phs):
            result_leaves, result_tree = flatten(fn(*unflatten(tree, phs)))
            out_tree.append(result_tree)
            return outputs_as_tensors(result_leaves, what=f"cond: {name} output")
        bodies.append(trace(call, phs, name=name))
    if out_tree[0] != out_tree[1]:
        raise TypeError(f"cond: the branches return different structures: {out_tree[0]!r} and {out_tree[1]!r} "
                        f"(at {source})")
    (then, caps_t), (other, caps_f) = bodies
    then, other = shared_inputs(then, caps_t, other, caps_f)
    node = apply("cond", [pred] + args + caps_t + caps_f, {"then": then, "other": other}, source=source)
    outs = [loop_output(node, k) for k in range(len(then.outputs))]
    return unflatten(out_tree[0], outs)


def shared_inputs(then, caps_t, other, caps_f):
    """Both bodies over the same inputs: their own arguments, the first's captures, the second's."""
    n = then.n_args
    extra_t = [arg_placeholder(c.shape, c.dtype, c.name or "captured") for c in caps_f]
    extra_f = [arg_placeholder(c.shape, c.dtype, c.name or "captured") for c in caps_t]
    then = Body(then.params + extra_t, then.outputs, n, then.name)
    other = Body(other.params[:n] + extra_f + other.params[n:], other.outputs, n, other.name)
    return then, other


def _cond_infer(inputs, then, other):
    for body in (then, other):
        if not isinstance(body, Body):
            raise TypeError(f"branches must be Bodies, got {type(body).__name__}")
    pred = inputs[0]
    if pred.shape != () or pred.dtype == MULTI:
        raise ShapeError(f"pred must be a scalar, got {format_shape(pred.shape)}")
    (ins_t, outs_t), (ins_f, outs_f) = then.specs(), other.specs()
    if len(ins_t) != len(inputs) - 1 or len(ins_f) != len(inputs) - 1:
        raise TypeError(f"its branches take {len(ins_t)} and {len(ins_f)} values, the node gives {len(inputs) - 1}")
    for k, (x, (shape, dtype)) in enumerate(zip(inputs[1:], ins_t)):
        if not fits(x.shape, shape) or x.dtype != dtype or ins_f[k][1] != dtype:
            raise ShapeError(f"input {k} does not fit its branches")
    if len(outs_t) != len(outs_f) or any(a[1] != b[1] or len(a[0]) != len(b[0]) for a, b in zip(outs_t, outs_f)):
        raise ShapeError("its branches make values of different kinds: "
                         + ", ".join(f"{format_shape(a[0])} {a[1]} / {format_shape(b[0])} {b[1]}"
                                     for a, b in zip(outs_t, outs_f)))
    return (), MULTI


class CondLowering:
    """How a plan runs a cond: both branches are built for the call's sizes; the runner calls one."""

    def feeds(self, node, in_shapes):
        return {"then": list(in_shapes[1:]), "other": list(in_shapes[1:])}

    def out_shapes(self, node, in_shapes, body_shapes):
        a, b = body_shapes["then"], body_shapes["other"]
        for k, (x, y) in enumerate(zip(a, b)):
            if tuple(x) != tuple(y):
                raise ShapeError(f"cond (built at {node.source}): its branches make value {k} of shapes "
                                 f"{format_shape(x)} and {format_shape(y)} at these sizes")
        return [tuple(x) for x in a]

    def values(self, node):
        (_, outs_t), (_, outs_f) = node.attrs["then"].specs(), node.attrs["other"].specs()
        return [(tuple(a if a == b else None for a, b in zip(st, sf)), d) for (st, d), (sf, _) in zip(outs_t, outs_f)]

    def dtypes(self, node):
        return [d for _, d in self.values(node)]

    def runner(self, node, programs, in_shapes, out_shapes, out_dtypes):
        return CondRunner(programs["then"], programs["other"])

    def wiring(self, node):
        """For pictures and traces: every input but ``pred`` feeds both branches, and each value is the
        output of that index of the branch taken (see ``staticgrad.explain.loopinfo.Wiring``)."""
        n, values = len(node.inputs) - 1, len(node.attrs["then"].specs()[1])
        return {"feeds": [(k + 1, attr, k, "read") for attr in ("then", "other") for k in range(n)],
                "carries": [], "values": [(k, attr, k, "final") for attr in ("then", "other") for k in range(values)],
                "title": "then / other on pred"}


class CondRunner:
    """Runs a cond in a plan: the program of the branch ``pred`` picks."""

    name = "cond"

    def __init__(self, then, other):
        self.then, self.other = then.run, other.run

    def __call__(self, pred, *args):
        outs, _ = (self.then if pred else self.other)(*args)
        return tuple(outs)


def _unlowered(*arrays, **attrs):
    raise TypeError("a cond runs only inside a compiled plan; call the compiled function")


# ------------------------------------------------------------------ the VJP: a cond of the branches' VJPs
def _cond_vjp(g, out, pred, *args, needs, then, other):
    if not (then.traced and other.traced):
        raise GradError(f"grad: the cond built at {out.source} was rewritten by a pass; differentiate before "
                        "compiling")
    wanted = [k for k in range(len(then.outputs)) if g.get(k) is not None]
    needed = [k for k, n in enumerate(needs[1:]) if n]
    dys = [g.get(k) for k in wanted]
    branches = [_branch_vjp(body, wanted, needed) for body in (then, other)]
    node = apply("cond", [pred] + list(args) + dys, {"then": branches[0], "other": branches[1]},
                 source=out.source)
    grads = [None] * (1 + len(args))
    for j, k in enumerate(needed):
        grads[1 + k] = loop_output(node, j)
    return grads


def _branch_vjp(body, wanted, needed):
    """One branch's VJP as a body over (its inputs, the cotangents of its outputs ``wanted``): the gradients
    of its inputs ``needed`` (zeros where the branch does not read one)."""
    from .scan import body_order, clone_map
    params = [arg_placeholder(p.shape, p.dtype, p.name) for p in body.params]
    dys = [arg_placeholder(body.outputs[k].shape, body.outputs[k].dtype, f"d_out{k}") for k in wanted]
    fwd = clone_map(body_order(body.outputs, body.params), {p.id: q for p, q in zip(body.params, params)})
    ys = [fwd.get(body.outputs[k].id, body.outputs[k]) for k in wanted]
    wrt = [params[k] for k in needed]
    grads = vjp(ys, dys, wrt) if wrt else []
    outputs = [gr if gr is not None else zeros_like(w) for gr, w in zip(grads, wrt)]
    outputs = [as_tensor(o) for o in outputs]
    return Body(params + dys, outputs, len(params) + len(dys), f"{body.name} VJP")


publish(defop("cond", _unlowered, _cond_infer, vjp=_cond_vjp, doc="A branch: see staticgrad.cond.",
              bodies=("then", "other"), lowering=CondLowering(), takes_needs=True, flops=0,
              unsupported={"scalar": "a branch: its bodies run as programs of their own",
                           "torch": "a branch: the study runs its body op by op"}), cond)
