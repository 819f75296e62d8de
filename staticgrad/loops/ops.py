"""The loop ops' registrations: ``scan`` and ``loop_output``, with how a plan runs them.

A scan node makes several values at once (its final carries, its stacked per-step outputs); each is read
through a ``loop_output`` node, which is what the rest of the graph sees. A plan runs a scan with the
program of its body built for the step's sizes, called once per step (:class:`ScanRunner`).
"""
from __future__ import annotations

import numpy as np

from .. import ops as ops_package
from ..ops.registry import apply, defop
from ..tensor import ShapeError, format_shape

MULTI = np.dtype(object)     # the dtype of a node of several values


def multi_infer(inputs, **attrs):
    return (), MULTI


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
        raise ShapeError(f"scan (built at {node.source}): its xs have {len(lengths)} different lengths "
                         f"{sorted(lengths)}" + (f" (length={attrs['length']})" if attrs["length"] else ""))
    return lengths.pop()


class ScanLowering:
    """How a plan runs a scan: its body is fed one step's sizes, and :class:`ScanRunner` loops."""

    def feeds(self, node, in_shapes):
        C, X = node.attrs["n_carry"], node.attrs["n_xs"]
        return {"body": list(in_shapes[:C]) + [s[1:] for s in in_shapes[C:C + X]] + list(in_shapes[C + X:])}

    def out_shapes(self, node, in_shapes, body_shapes):
        C = node.attrs["n_carry"]
        outs = body_shapes["body"]
        for c in range(C):
            if tuple(outs[c]) != tuple(in_shapes[c]):
                raise ShapeError(f"scan (built at {node.source}): its body turns carry {c} of shape "
                                 f"{format_shape(in_shapes[c])} into one of shape {format_shape(outs[c])}")
        T = scan_length(node, in_shapes)
        return list(outs[:C]) + [(T,) + tuple(s) for s in outs[C:]]

    def dtypes(self, node):
        body = node.attrs["body"].graph
        return [body.nodes[o].dtype for o in body.outputs]

    def runner(self, node, programs, in_shapes, out_shapes, out_dtypes):
        return ScanRunner(programs["body"], node.attrs, scan_length(node, in_shapes), out_shapes, out_dtypes)


class ScanRunner:
    """Runs a scan in a plan: the body's program once per step, each step's outputs written into the
    stacked result (fresh arrays per call: they are the caller's)."""

    name = "scan"

    def __init__(self, program, attrs, length, out_shapes, out_dtypes):
        self.program, self.length = program, length
        self.C, self.X, self.reverse = attrs["n_carry"], attrs["n_xs"], attrs["reverse"]
        C = self.C
        self.stacked = [(s, d) for s, d in zip(out_shapes[C:], out_dtypes[C:])]

    def __call__(self, *arrays):
        C, X, T = self.C, self.X, self.length
        carry = list(arrays[:C])
        xs, caps = arrays[C:C + X], arrays[C + X:]
        ys = [np.empty(shape, dtype) for shape, dtype in self.stacked]
        run = self.program.run
        for t in (range(T - 1, -1, -1) if self.reverse else range(T)):
            outs, _ = run(*carry, *[x[t] for x in xs], *caps)
            carry = outs[:C]
            for buf, y in zip(ys, outs[C:]):
                buf[t] = y
        if T == 0:
            carry = [np.array(c) for c in carry]       # never hand back the caller's own arrays
        return (*carry, *ys)


def _pick(values, index, **_):
    return values[index]


def _output_infer(inputs, index, shape, dtype):
    return shape, dtype


def loop_output(loop, index):
    """Value ``index`` of a loop node (its final carries, then its stacked outputs, for a scan)."""
    shape, dtype = loop.attrs["body"].outputs[index].shape, loop.attrs["body"].outputs[index].dtype
    if index >= loop.attrs["n_carry"]:
        shape = (loop.attrs["length"],) + shape
    return apply("loop_output", (loop,), {"index": index, "shape": shape, "dtype": dtype})


def _publish(opdef, fn):
    """Export an op registered here (above the ops package) as ops' own are: ``sg.ops.<name>``."""
    opdef.publish(fn)
    ops_package.OPS[opdef.name] = fn
    ops_package.__all__.append(opdef.name)
    setattr(ops_package, opdef.name, fn)


def register(scan_fn, scan_vjp, output_vjp):
    """Register the ops (called once by loops.scan, which owns their VJP rules and public function)."""
    scan = defop("scan", _unlowered, multi_infer, vjp=scan_vjp,
                 doc="A loop over steps: see staticgrad.scan.", bodies=("body",), lowering=ScanLowering(),
                 takes_needs=True, flops=0,
                 unsupported={"scalar": "a loop: its body runs as a program of its own",
                              "torch": "a loop: the study runs its body op by op"})
    out = defop("loop_output", _pick, _output_infer, vjp=output_vjp, public=False, flops=0,
                doc="One of the values a loop makes (its index among them).",
                unsupported={"scalar": "reads a loop's values", "torch": "reads a loop's values"})
    _publish(scan, scan_fn)
    _publish(out, loop_output)
    return scan, out
