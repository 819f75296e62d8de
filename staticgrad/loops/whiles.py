"""``while_loop`` and ``fori_loop``: loops whose length the data decides, with reverse-mode gradients.

A ``while_loop`` node runs its body while its condition holds. Its VJP records what the backward pass
needs as it runs: the loop that sg.grad makes instead (``record``) appends, per iteration, the values its
body's VJP reads to a tape (one value of the node: a list, so the iteration count is the tape's length),
and a ``reverse_tape`` node runs the body's VJP over that tape, last iteration first. (JAX refuses
reverse mode here; TF1 stacks every iteration's state the same way.)
"""
from __future__ import annotations

import numpy as np

from ..eager import is_eager, lift
from ..ops.registry import apply, as_tensor, defop
from ..ops.shape import zeros_like
from ..tensor import GradError, ShapeError, format_shape, user_frame
from .body import Body, ReadsEager, arg_placeholder, eager_leaves, trace
from .branch import shared_inputs
from .ops import MULTI, carries_kept, fits, loop_output, publish
from .pytree import flatten, unflatten
from .scan import _carries_needing, _check_carry, _ReverseBody, traced_scan


def while_loop(cond_fn, body_fn, init, max_iterations=None):
    """Repeat ``state = body_fn(state)`` while ``cond_fn(state)`` is true (at most ``max_iterations``
    times, if given), from ``init`` (a pytree of tensors), as ``jax.lax.while_loop``; returns the final
    state. Both functions are traced once; on eager tensors (in ``init``, or read by either function) it is
    a Python ``while``. Gradients flow in reverse mode: the iterations' values the backward pass needs are
    recorded when the function runs."""
    source = user_frame()
    leaves, tree = flatten(init)
    if max_iterations is not None and (type(max_iterations) is not int or max_iterations < 0):
        raise ValueError(f"while_loop: max_iterations must be a count or None, got {max_iterations!r} "
                         f"(at {source})")
    if any(is_eager(v) for v in leaves):
        return _eager_while(cond_fn, body_fn, unflatten(tree, eager_leaves(leaves)), max_iterations)
    try:
        return _traced_while(cond_fn, body_fn, leaves, tree, max_iterations, source)
    except ReadsEager:      # (a function reads eager tensors: define-by-run code; the state becomes eager)
        state = [lift(as_tensor(v), "while_loop") for v in leaves]
        return _eager_while(cond_fn, body_fn, unflatten(tree, state), max_iterations)


def _traced_while(cond_fn, body_fn, leaves, tree, max_iterations, source):
    init_t = [as_tensor(v) for v in leaves]

    def placeholders():
        return [arg_placeholder(t.shape, t.dtype, t.name or f"state{k}") for k, t in enumerate(init_t)]
    ph_c, ph_b = placeholders(), placeholders()

    def test():
        flag = as_tensor(cond_fn(unflatten(tree, ph_c)))
        if flag.shape != ():
            raise ShapeError(f"while_loop: cond_fn must return a scalar, got shape {format_shape(flag.shape)} "
                             f"(at {source})")
        return [flag]
    cond_body, caps_c = trace(test, ph_c, name="while condition")
    body, caps_b = trace(lambda: _check_carry(body_fn(unflatten(tree, ph_b)), tree, init_t, source), ph_b,
                         name="while body")
    cond_body, body = shared_inputs(cond_body, caps_c, body, caps_b)
    attrs = {"cond": cond_body, "body": body, "n_carry": len(init_t), "max_iterations": max_iterations,
             "record": None}
    node = apply("while_loop", init_t + caps_c + caps_b, attrs, source=source)
    return unflatten(tree, [loop_output(node, k) for k in range(len(init_t))])


def _eager_while(cond_fn, body_fn, state, max_iterations):
    n = 0
    while (max_iterations is None or n < max_iterations) and bool(cond_fn(state)):
        state = body_fn(state)
        n += 1
    return state


def fori_loop(lower, upper, body_fn, init):
    """``state = body_fn(i, state)`` for i from ``lower`` to ``upper - 1``, as ``jax.lax.fori_loop``: a
    scan when both bounds are Python ints (reverse mode as a scan's), else a while_loop."""
    if isinstance(lower, int) and isinstance(upper, int):
        leaves, tree = flatten(init)
        if not any(is_eager(v) for v in leaves):
            steps = np.arange(lower, max(lower, upper), dtype=np.int64)
            try:
                final, _ = traced_scan(lambda state, i: (body_fn(i, state), None), leaves, tree,
                                       *flatten(steps), steps, len(steps), False, None, user_frame())
                return final
            except ReadsEager:      # (body_fn reads eager tensors: the state becomes eager)
                init = unflatten(tree, [lift(as_tensor(v), "fori_loop") for v in leaves])
        for i in range(lower, upper):
            init = body_fn(i, init)
        return init
    state = (as_tensor(lower, like=np.int64), init)
    _, final = while_loop(lambda s: s[0] < upper, lambda s: (s[0] + 1, body_fn(s[0], s[1])), state)
    return final


# ------------------------------------------------------------------ the op, its plan and its VJP
def _while_infer(inputs, cond, body, n_carry, max_iterations, record):
    for b in (cond, body):
        if not isinstance(b, Body):
            raise TypeError(f"bodies must be Bodies, got {type(b).__name__}")
    (ins_c, outs_c), (ins_b, outs_b) = cond.specs(), body.specs()
    if not (record is None or type(record) is int and record >= 0) or type(n_carry) is not int:
        raise TypeError(f"record={record!r:.20} must be None or a count, n_carry={n_carry!r:.20} a count")
    if max_iterations is not None and (type(max_iterations) is not int or max_iterations < 0):
        raise TypeError(f"max_iterations={max_iterations!r:.20} must be None or a count")
    if len(ins_c) != len(inputs) or len(ins_b) != len(inputs) or len(outs_c) != 1 or \
            len(outs_b) != n_carry + (record or 0):
        raise TypeError("its bodies do not fit its inputs and its counts")
    for k, (x, (shape, dtype)) in enumerate(zip(inputs, ins_b)):
        if not fits(x.shape, shape) or x.dtype != dtype or ins_c[k][1] != dtype:
            raise ShapeError(f"input {k} ({format_shape(x.shape)} {x.dtype}) does not fit its bodies")
    for c in range(n_carry):
        if len(outs_b[c][0]) != len(ins_b[c][0]) or outs_b[c][1] != ins_b[c][1]:
            raise ShapeError(f"its body turns state {c} of {format_shape(ins_b[c][0])} into "
                             f"{format_shape(outs_b[c][0])}")
    return (), MULTI


class WhileLowering:
    def feeds(self, node, in_shapes):
        return {"cond": list(in_shapes), "body": list(in_shapes)}

    def out_shapes(self, node, in_shapes, body_shapes):
        C = node.attrs["n_carry"]
        outs = carries_kept(node, in_shapes, body_shapes["body"])
        return list(outs[:C]) + ([()] if node.attrs["record"] is not None else [])

    def values(self, node):
        C = node.attrs["n_carry"]
        _, outs = node.attrs["body"].specs()
        return [(tuple(s), d) for s, d in outs[:C]] + ([((), MULTI)] if node.attrs["record"] is not None else [])

    def tape_entries(self, node):
        """[(shape, dtype)] of the values each entry of its tape holds (recording), for the loop reading it."""
        if node.attrs["record"] is None:
            raise TypeError("it records no tape")
        _, outs = node.attrs["body"].specs()
        return [(tuple(s), d) for s, d in outs[node.attrs["n_carry"]:]]

    def dtypes(self, node):
        return [d for _, d in self.values(node)]

    def runner(self, node, programs, in_shapes, out_shapes, out_dtypes):
        return WhileRunner(programs["cond"], programs["body"], node.attrs)

    def wiring(self, node):
        """For pictures and traces: every input feeds both bodies (the state, then the values read), the
        body's new state is the next state of both, its first outputs the final state and, recording,
        the rest the tape (see ``staticgrad.explain.loopinfo.Wiring``)."""
        C, record, most = node.attrs["n_carry"], node.attrs["record"], node.attrs["max_iterations"]
        feeds = [(k, attr, k, "carry" if k < C else "read") for attr in ("cond", "body")
                 for k in range(len(node.inputs))]
        carries = [("body", c, attr, c) for attr in ("cond", "body") for c in range(C)]
        values = [(k, "body", k, "final") for k in range(C)]
        values += [(C, "body", C + e, "tape") for e in range(record or 0)]
        title = ", ".join(([f"at most {most} iterations"] if most is not None else [])
                          + (["recording a tape"] if record is not None else []))
        return {"feeds": feeds, "carries": carries, "values": values, "title": title}


class WhileRunner:
    """Runs a while_loop in a plan; with ``record`` (a count, not None), also the tape: per iteration, the
    body's ``record`` values beyond the new state."""

    name = "while_loop"

    def __init__(self, cond, body, attrs):
        self.cond, self.body = cond.run, body.run
        self.C, self.most, self.record = attrs["n_carry"], attrs["max_iterations"], attrs["record"] is not None

    def __call__(self, *arrays):
        C, most = self.C, self.most
        state, caps = list(arrays[:C]), arrays[C:]
        tape, n = [], 0
        while (most is None or n < most) and self.cond(*state, *caps)[0][0]:
            outs, _ = self.body(*state, *caps)
            state = outs[:C]
            if self.record:
                tape.append(tuple(outs[C:]))
            n += 1
        if n == 0:
            state = [np.array(s) for s in state]      # never hand back the caller's own arrays
        return (*state, tape) if self.record else tuple(state)


def _while_vjp(g, out, *inputs, needs, cond, body, n_carry, max_iterations, record):
    if not body.traced:
        raise GradError(f"grad: the while_loop built at {out.source} was rewritten by a pass; differentiate "
                        "before compiling")
    C = n_carry
    caps = inputs[C:]
    need_cap = list(needs[C:])
    carries = _carries_needing(body, needs, C, 0)
    rev = _ReverseBody(body, C, 0, carries, [], need_cap, g)
    extended = Body(body.params, body.outputs[:C] + rev.saved, body.n_args, body.name, hoisted=body.hoisted,
                    base=body.base)
    recording = apply("while_loop", inputs, dict(out.attrs, body=extended, record=len(rev.saved)),
                      source=out.source)
    tape = loop_output(recording, C)
    r_init = [g.get(c) if g.get(c) is not None else zeros_like(inputs[c]) for c in carries]
    r_init += [zeros_like(caps[j]) for j in range(len(caps)) if need_cap[j]]
    attrs = {"body": rev.body, "n_carry": len(r_init), "n_xs": len(rev.saved)}
    back = apply("reverse_tape", r_init + [tape] + rev.captured(caps), attrs, source=out.source)
    values = [loop_output(back, k) for k in range(len(r_init))]
    grads = [None] * len(inputs)
    for k, c in enumerate(carries):
        grads[c] = values[k] if needs[c] else None
    accs = iter(values[len(carries):])
    for j in range(len(caps)):
        if need_cap[j]:
            grads[C + j] = next(accs)
    return grads


def _tape_infer(inputs, body, n_carry, n_xs):
    """The rule of a reverse_tape: its body takes its state, one value per entry of the tape, then the
    values it reads, and hands back a state of the same kinds (a file's node is checked by it as it loads)."""
    if not isinstance(body, Body):
        raise TypeError(f"body must be a Body, got {type(body).__name__}")
    if type(n_carry) is not int or type(n_xs) is not int or n_carry < 0 or n_xs < 0:
        raise TypeError(f"n_carry={n_carry!r:.20} and n_xs={n_xs!r:.20} must be counts")
    if len(inputs) < n_carry + 1 or inputs[n_carry].dtype != MULTI:
        raise TypeError("reads its state, then a tape of a while_loop")
    ins, outs = body.specs()
    given = list(inputs[:n_carry]) + list(inputs[n_carry + 1:])
    taken = ins[:n_carry] + ins[n_carry + n_xs:]
    if len(ins) != len(inputs) - 1 + n_xs or len(outs) < n_carry:
        raise TypeError(f"its body takes {len(ins)} values and makes {len(outs)}; the node gives it {n_carry} "
                        f"carries, {n_xs} values per entry and {len(inputs) - n_carry - 1} more")
    for k, (x, (shape, dtype)) in enumerate(zip(given, taken)):
        if not fits(x.shape, shape) or x.dtype != dtype:
            raise ShapeError(f"input {k if k < n_carry else k + 1} ({format_shape(x.shape)} {x.dtype}) does not "
                             f"fit its body")
    for c in range(n_carry):
        if not fits(outs[c][0], ins[c][0]) or outs[c][1] != ins[c][1]:
            raise ShapeError(f"its body turns carry {c} of {format_shape(ins[c][0])} into {format_shape(outs[c][0])}")
    return (), MULTI


class TapeLowering:
    """A reverse_tape's body is fed the sizes of the tape's entries, known when it runs."""

    def feeds(self, node, in_shapes):
        return {"body": None}

    def check_tape(self, node, entries):
        """Raise unless its body takes what each entry of the tape holds (``entries``: (shape, dtype) each)."""
        C, E = node.attrs["n_carry"], node.attrs["n_xs"]
        ins, _ = node.attrs["body"].specs()
        if len(entries) != E:
            raise TypeError(f"each entry holds {len(entries)} values, its body takes {E}")
        for e, ((shape, dtype), (want, wanted)) in enumerate(zip(entries, ins[C:C + E])):
            if not fits(shape, want) or dtype != wanted:
                raise ShapeError(f"value {e} of an entry is {format_shape(shape)} {dtype}, its body takes "
                                 f"{format_shape(want)} {wanted}")

    def out_shapes(self, node, in_shapes, body_shapes):
        return list(in_shapes[:node.attrs["n_carry"]])

    def values(self, node):
        _, outs = node.attrs["body"].specs()
        return [(tuple(s), d) for s, d in outs[:node.attrs["n_carry"]]]

    def dtypes(self, node):
        return [d for _, d in self.values(node)]

    def runner(self, node, programs, in_shapes, out_shapes, out_dtypes):
        return TapeRunner(programs["body"], node.attrs["n_carry"])

    def wiring(self, node):
        """For pictures and traces: its carries, then one entry of the tape per iteration (a slice of it
        for each value the entry holds), then the values read every iteration."""
        C, E = node.attrs["n_carry"], node.attrs["n_xs"]
        feeds = [(k, "body", k, "carry") for k in range(C)] + [(C, "body", C + e, "slice") for e in range(E)]
        feeds += [(C + 1 + j, "body", C + E + j, "read") for j in range(len(node.inputs) - C - 1)]
        return {"feeds": feeds, "carries": [("body", c, "body", c) for c in range(C)],
                "values": [(k, "body", k, "final") for k in range(C)], "title": "over the tape, last entry first"}


class TapeRunner:
    """Runs the body once per entry of a tape, the last entry first."""

    name = "reverse_tape"

    def __init__(self, program, C):
        self.program, self.C = program, C

    def __call__(self, *arrays):
        C = self.C
        state, tape, caps = list(arrays[:C]), arrays[C], arrays[C + 1:]
        run = None
        for entry in reversed(tape):
            if run is None:
                run = self.program.run_for(tuple(np.shape(a) for a in (*state, *entry, *caps)))
            state, _ = run(*state, *entry, *caps)
            state = state[:C]
        if run is None:
            state = [np.array(s) for s in state]
        return tuple(state)


def _tape_vjp(g, out, *inputs, **attrs):
    raise GradError(f"grad: a second derivative through the while_loop built at {out.source} is not "
                    "supported (its backward pass runs over a tape recorded at run time); write the loop with "
                    "scan or fori_loop over int bounds for higher orders")


def _unlowered(*arrays, **attrs):
    raise TypeError("a while_loop runs only inside a compiled plan; call the compiled function")


publish(defop("while_loop", _unlowered, _while_infer, vjp=_while_vjp, takes_needs=True, flops=0,
              doc="A loop while a condition holds: see staticgrad.while_loop.",
              bodies=("cond", "body"), lowering=WhileLowering(),
              unsupported={"scalar": "a loop: its bodies run as programs of their own",
                           "torch": "a loop: the study runs its body op by op"}), while_loop)
publish(defop("reverse_tape", _unlowered, _tape_infer, vjp=_tape_vjp, public=False, flops=0,
              doc="A while_loop's backward pass: its body's VJP over the recorded iterations, last first.",
              bodies=("body",), lowering=TapeLowering(),
              unsupported={"scalar": "a loop", "torch": "a loop"}),
        lambda *inputs, **attrs: apply("reverse_tape", inputs, attrs))
