"""The loop ops' registrations: ``scan`` and ``loop_output``, with how a plan runs them.

A scan node makes several values at once (its final carries, its stacked per-step outputs); each is read
through a ``loop_output`` node, which is what the rest of the graph sees. A plan runs a scan with the
program of its body built for the step's sizes, called once per step (:class:`ScanRunner`).
"""
from __future__ import annotations

import numpy as np

from .. import ops as ops_package
from ..ops.registry import IDENTITY, REGISTRY, SHAPE_REF, VIEW, apply, defop
from ..tensor import ShapeError, format_shape
from .body import Body
from .checkpoint import LazyRows, Segments

MULTI = np.dtype(object)     # the dtype of a node of several values


def scan_infer(inputs, body, n_carry, n_xs, length, reverse, checkpoint):
    """A scan's shape rule: one node of several values, once its attributes and its body fit its inputs
    (a scan read from a file is checked here as it loads, so a tampered one is refused, not run)."""
    _check_scan_attrs(len(inputs), body, n_carry, n_xs, length, reverse, checkpoint)
    C, X = n_carry, n_xs
    ins, outs = body.specs()
    if len(ins) != len(inputs):
        raise TypeError(f"its body takes {len(ins)} values, the node gives it {len(inputs)} ({C} carries and "
                        f"{X} xs, then captures)")
    for k, (x, (shape, dtype)) in enumerate(zip(inputs, ins)):
        if C <= k < C + X and not x.shape:
            raise ShapeError(f"xs {k - C} is 0-d: it has no axis to loop over")
        given = x.shape[1:] if C <= k < C + X else x.shape
        if not fits(given, shape) or x.dtype != dtype:
            raise ShapeError(f"input {k} gives the body {format_shape(given)} {x.dtype} where it takes "
                             f"{format_shape(shape)} {dtype}")
    if len(outs) < C:
        raise TypeError(f"its body makes {len(outs)} values, fewer than its {C} carries")
    for c in range(C):
        if not fits(outs[c][0], ins[c][0]) or outs[c][1] != ins[c][1]:
            raise ShapeError(f"its body turns carry {c} of {format_shape(ins[c][0])} {ins[c][1]} into "
                             f"{format_shape(outs[c][0])} {outs[c][1]}")
    if any(dtype == MULTI for _, dtype in outs):
        raise TypeError("its body hands back a loop node itself, not one of its values")
    steps = {x.shape[0] for x in inputs[C:C + X] if x.shape[0] is not None} | ({length} - {None})
    if len(steps) > 1 or (not X and length is None):
        raise ShapeError(f"its xs and length={length} disagree on the number of steps ({sorted(steps)})"
                         if steps else "a scan without xs needs a length")
    return (), MULTI


def _check_scan_attrs(n_inputs, body, n_carry, n_xs, length, reverse, checkpoint):
    if not isinstance(body, Body):
        raise TypeError(f"body must be a Body, got {type(body).__name__}")
    if not (_count(n_carry) and _count(n_xs) and n_carry + n_xs <= n_inputs):
        raise ValueError(f"n_carry={n_carry!r:.20} and n_xs={n_xs!r:.20} do not count {n_inputs} inputs")
    if not (length is None or _count(length)) or not (checkpoint is None or _count(checkpoint) and checkpoint):
        raise ValueError(f"length={length!r:.20} and checkpoint={checkpoint!r:.20} must be counts or None")
    if type(reverse) is not bool:
        raise TypeError(f"reverse must be True or False, got {reverse!r:.20}")


def _count(value):
    return type(value) is int and value >= 0


def fits(given, shape):
    """Whether a value of static shape ``given`` may feed one of ``shape`` (an unknown size fits any)."""
    return len(given) == len(shape) and all(a is None or b is None or a == b for a, b in zip(given, shape))


def _unlowered(*arrays, **attrs):
    raise TypeError("a loop runs only inside a compiled plan (its body is lowered with the plan); "
                    "call the compiled function, or run the loop eagerly on eager tensors")


def scan_length(node, in_shapes):
    """The number of steps at these sizes (every xs must have it as its first size)."""
    attrs = node.attrs
    C, X = attrs["n_carry"], attrs["n_xs"]
    lengths = {s[0] for s in in_shapes[C:C + X]}
    if attrs["length"] is not None:
        lengths.add(attrs["length"])
    if len(lengths) != 1:
        raise ShapeError(f"scan (built at {node.source}): {_disagree(lengths, attrs['length'])}")
    return lengths.pop()


def _disagree(lengths, length):
    return f"its xs have {len(lengths)} different lengths {sorted(lengths)}" + (
        f" (length={length})" if length else "")


# ------------------------------------------------------------------ a scan's length check, hoisted
def _same_length_infer(inputs, length):
    if not inputs or any(not x.shape for x in inputs):
        raise ShapeError("takes one or more values of one or more axes")
    lengths = {x.shape[0] for x in inputs} | ({length} - {None})
    if len(lengths - {None}) > 1:
        raise ShapeError(_disagree(lengths - {None}, length))
    return inputs[0].shape, inputs[0].dtype


def _same_length_kernel(x, *others, length):
    return x


def _same_length_vjp(g, out, x, *others, length):
    return (g,) + (None,) * len(others)


SAME_LENGTH = defop(
    "same_length", _same_length_kernel, _same_length_infer, _same_length_vjp, VIEW | IDENTITY | SHAPE_REF,
    public=False, checks="scan",
    unsupported={"scalar": "a check of its inputs' lengths: a plan at known sizes runs nothing for it"},
    torch=lambda T, length: lambda x, *others: x,
    doc="Its first input, once every input has as many rows (and ``length``, unless None) when the call runs: "
        "the loops pass puts it before work on a scan's slices it hoists out of the loop, so xs of different "
        "lengths fail as the scan does (a plan at known sizes then runs nothing for it).")


def same_length(x, *others, length=None):
    """``x``, once ``x`` and ``others`` have as many rows (and ``length``, unless None) when the call runs
    (a ShapeError otherwise, naming the scan built at that line)."""
    return apply("same_length", (x, *others), {"length": length})


class LoopSpec:
    """The loop a plan may write around a scan's body (lower/loop_source.py): ``C`` carries, ``X`` slices,
    ``reverse``, ``length`` steps, the stacked outputs' (row shape, dtype); ``keep_stacked``: the plan
    may keep the stacked outputs' buffers from call to call (no value of the loop outlives a call)."""

    def __init__(self, C, X, reverse, length, stacked, keep_stacked=False):
        self.C, self.X, self.reverse, self.length, self.stacked = C, X, reverse, length, list(stacked)
        self.keep_stacked = keep_stacked


class ScanLowering:
    """How a plan runs a scan: its body is fed one step's sizes, and :class:`ScanRunner` loops."""

    def feeds(self, node, in_shapes):
        C, X = node.attrs["n_carry"], node.attrs["n_xs"]
        return {"body": list(in_shapes[:C]) + [s[1:] for s in in_shapes[C:C + X]] + list(in_shapes[C + X:])}

    def out_shapes(self, node, in_shapes, body_shapes):
        C = node.attrs["n_carry"]
        outs = carries_kept(node, in_shapes, body_shapes["body"])
        T = scan_length(node, in_shapes)
        return list(outs[:C]) + [(T,) + tuple(s) for s in outs[C:]]

    def values(self, node):
        """The static shapes and dtypes of its values (what its ``loop_output`` nodes state, or less)."""
        C, length = node.attrs["n_carry"], node.attrs["length"]
        _, outs = node.attrs["body"].specs()
        return [(tuple(s) if k < C else (length, *s), d) for k, (s, d) in enumerate(outs)]

    def loop_form(self, node, in_shapes, out_shapes, out_dtypes):
        """The loop a plan writes into the body's source (none for a checkpointed scan, whose runner keeps
        checkpoints between steps and reruns segments)."""
        if node.attrs["checkpoint"] is not None:
            return None
        C, X = node.attrs["n_carry"], node.attrs["n_xs"]
        stacked = [(s[1:], d) for s, d in zip(out_shapes[C:], out_dtypes[C:])]
        return LoopSpec(C, X, node.attrs["reverse"], scan_length(node, in_shapes), stacked)

    def dtypes(self, node):
        body = node.attrs["body"].graph
        return [body.nodes[o].dtype for o in body.outputs]

    def runner(self, node, programs, in_shapes, out_shapes, out_dtypes):
        return ScanRunner(programs["body"], node.attrs, scan_length(node, in_shapes), out_shapes, out_dtypes)

    def wiring(self, node):
        """How its inputs, its body and its values connect (what pictures and traces draw): see
        ``staticgrad.explain.loopinfo.Wiring``."""
        C, X, length = node.attrs["n_carry"], node.attrs["n_xs"], node.attrs["length"]
        ins, outs = node.attrs["body"].specs()
        feeds = [(k, "body", k, "carry" if k < C else "slice" if k < C + X else "read") for k in range(len(ins))]
        values = [(k, "body", k, "final" if k < C else "stacked") for k in range(len(outs))]
        title = f"{'?' if length is None else length} steps" + (", reverse" if node.attrs["reverse"] else "")
        if node.attrs["checkpoint"]:
            title += f", checkpoint every {node.attrs['checkpoint']}"
        return {"feeds": feeds, "carries": [("body", c, "body", c) for c in range(C)], "values": values,
                "title": title}


def carries_kept(node, in_shapes, outs):
    """``outs`` (a body's output sizes at a call's sizes), once its new carries keep their sizes."""
    for c in range(node.attrs["n_carry"]):
        if tuple(outs[c]) != tuple(in_shapes[c]):
            raise ShapeError(f"{node.op} (built at {node.source}): its body turns carry {c} of shape "
                             f"{format_shape(in_shapes[c])} into one of shape {format_shape(outs[c])}")
    return outs


class ScanRunner:
    """Runs a scan in a plan: the body's program once per step, each step's outputs written into the
    stacked result (fresh arrays per call: they are the caller's). With ``checkpoint`` and values in
    ``lazy`` (read only row by row by a reverse loop), those are kept as checkpoints instead."""

    name = "scan"

    def __init__(self, program, attrs, length, out_shapes, out_dtypes):
        self.program, self.length = program, length
        self.C, self.X, self.reverse = attrs["n_carry"], attrs["n_xs"], attrs["reverse"]
        self.checkpoint = attrs["checkpoint"]
        self.values = list(zip(out_shapes, out_dtypes))
        self.lazy = ()

    def __call__(self, *arrays):
        if getattr(self.program, "loop", False):
            return tuple(self.program.run(*arrays)[0])     # (the loop is in the body's own source)
        C, X, T = self.C, self.X, self.length
        carry = list(arrays[:C])
        if getattr(self.program, "kind", None) == "numba":
            # (numba compiles a region's loop once per argument type, read-only or not: a constant's
            # read-only array as the first carry would compile a region again at the first step)
            carry = [np.array(c) if isinstance(c, np.ndarray) and not c.flags.writeable else c for c in carry]
        xs, caps = arrays[C:C + X], arrays[C + X:]
        kept = [j for j in range(C, len(self.values)) if j not in self.lazy]
        ys = [np.empty(*self.values[j]) for j in kept]
        segments = self._segments(xs, caps) if self.lazy else None
        run = self.program.run
        for e, t in enumerate(range(T - 1, -1, -1) if self.reverse else range(T)):
            if segments is not None:
                segments.keep(e, carry)
            outs, _ = run(*carry, *[x[t] for x in xs], *caps)
            carry = outs[:C]
            for buf, j in zip(ys, kept):
                buf[t] = outs[j]
        if T == 0:
            carry = [np.array(c) for c in carry]       # never hand back the caller's own arrays
        values = dict(zip(kept, ys))
        for j in self.lazy:
            values[j] = LazyRows(segments, j, self.values[j][0])
        return (*carry, *[values[j] for j in range(C, len(self.values))])

    def _segments(self, xs, caps):
        lazy = {j: (j, self.values[j][0][1:], self.values[j][1]) for j in self.lazy}
        return Segments(self.program.run, self.C, self.reverse, self.length, self.checkpoint, lazy, xs, caps)

    def bytes_saved(self):
        """Bytes of stacked values checkpointing does not keep (less the checkpoints and a segment's rows)."""
        if not self.lazy:
            return 0
        k, T = self.checkpoint, self.length
        whole = sum(int(np.prod(self.values[j][0])) * np.dtype(self.values[j][1]).itemsize for j in self.lazy)
        carries = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in self.values[:self.C])
        return whole - whole * min(k, T) // max(T, 1) - carries * (-(-T // k))

    def can_be_lazy(self, j):
        """Whether value ``j`` may be kept as checkpoints (a stacked value of a checkpointed scan)."""
        return self.checkpoint is not None and j >= self.C

    def reads_rows(self, position):
        """Whether input ``position`` is read one row per step (a slice: a lazy value will do)."""
        return self.C <= position < self.C + self.X


def _pick(values, index, **_):
    return values[index]


def _output_infer(inputs, index, shape=None, dtype=None):
    """The loop's value ``index``: its static shape and dtype, or ``shape`` and ``dtype`` where the node
    states them (a pass may make one that states neither)."""
    if len(inputs) != 1:
        raise TypeError(f"reads one loop node, got {len(inputs)} inputs")
    loop = inputs[0]
    lowering = getattr(REGISTRY.get(loop.op), "lowering", None)
    if lowering is None or loop.dtype != MULTI:
        raise TypeError(f"reads the values of a loop node, not of a {loop.op} node")
    values = lowering.values(loop)
    if type(index) is not int or not 0 <= index < len(values):
        raise IndexError(f"index {index!r:.20} of a loop node of {len(values)} values")
    known, value_dtype = values[index]
    shape = known if shape is None else tuple(shape)
    dtype = value_dtype if dtype is None else np.dtype(dtype)
    # (a size the node leaves unknown is found when the plan runs; one it states must be the loop's)
    if len(shape) != len(known) or any(a is not None and a != b for a, b in zip(shape, known)) or \
            dtype != value_dtype:
        raise ShapeError(f"value {index} of the loop is {format_shape(values[index][0])} {values[index][1]}, "
                         f"the node says {format_shape(shape)} {dtype}")
    return shape, dtype


def loop_output(loop, index):
    """Value ``index`` of a loop node (its final carries, then its stacked outputs, for a scan)."""
    shape, dtype = REGISTRY[loop.op].lowering.values(loop)[index]
    return apply("loop_output", (loop,), {"index": index, "shape": shape, "dtype": dtype}, source=loop.source)


def publish(opdef, fn):
    """Export an op registered here (above the ops package) as ops' own are: ``sg.ops.<name>``."""
    opdef.publish(fn)
    ops_package.OPS[opdef.name] = fn
    ops_package.__all__.append(opdef.name)
    setattr(ops_package, opdef.name, fn)


def register(scan_fn, scan_vjp, output_vjp):
    """Register the ops (called once by loops.scan, which owns their VJP rules and public function)."""
    scan = defop("scan", _unlowered, scan_infer, vjp=scan_vjp,
                 doc="A loop over steps: see staticgrad.scan.", bodies=("body",), lowering=ScanLowering(),
                 takes_needs=True, flops=0,
                 unsupported={"scalar": "a loop: its body runs as a program of its own",
                              "torch": "a loop: the study runs its body op by op"})
    out = defop("loop_output", _pick, _output_infer, vjp=output_vjp, public=False, flops=0,
                doc="One of the values a loop makes (its index among them).",
                unsupported={"scalar": "reads a loop's values", "torch": "reads a loop's values"})
    publish(scan, scan_fn)
    publish(out, loop_output)
    publish(SAME_LENGTH, same_length)
    return scan, out
