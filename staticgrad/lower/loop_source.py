"""A scan's body as one generated function that runs the whole loop (the loop is in the source).

Called once per step, a body's function costs a Python call, a list of slices and a copy per output on
top of its kernels; in a loop of a thousand small steps that is most of the time. ``LoopWriter`` writes
the body's lines inside ``for t in range(T):`` instead: the slices are read by index, each stacked output
is written into its row, and the new carries are rebound to the carries' names.
"""
from __future__ import annotations

import numpy as np

from ..ops.registry import OUT, is_a
from .codegen import Program, Writer, _unused

_SPREAD = ("add", "sub", "mul", "div")     # (each element's result the same whatever the operands' layout)


def loop_writer(spec):
    """The writer class for ``codegen.generate`` that puts the body of ``spec``'s loop in the source
    (``spec``: ``C`` carries, ``X`` slices, ``reverse``, ``length``, and the stacked outputs' (row shape,
    dtype) as ``stacked``; a loop op's lowering makes it, e.g. ``loops.ops.LoopSpec``)."""
    class Bound(LoopWriter):
        loop = spec
    return Bound


class LoopWriter(Writer):
    loop = None         # (what loop_writer binds: the spec of the loop to write)

    def header(self, params, inputs):
        self.taken.update(("t", "T"))     # (the loop's own names: an input named so is renamed)
        super().header(params, inputs)
        spec, ns = self.loop, self.ns
        names = [self.names[i] for i in inputs]
        slices = names[spec.C:spec.C + spec.X]
        whole = []
        for name in slices:
            whole.append(_unused(f"{name}_steps", self.taken))
            self.taken.add(whole[-1])
        args = names[:spec.C] + whole + names[spec.C + spec.X:]
        self.lines[0] = f"def run({', '.join(args)}):"
        steps = f"len({whole[0]})" if spec.length is None and whole else str(spec.length)
        self.lines.append(f"    T = {steps}")
        for k in self._read_only_risks(inputs):
            self.lines.append(f"    if not {names[k]}.flags.writeable: {names[k]} = np.array({names[k]})")
        self.stacks, self.kept = [], []
        for k, (shape, dtype) in enumerate(spec.stacked):
            name = _unused(f"stacked{k}", self.taken)
            self.taken.add(name)
            self.stacks.append(name)
            if spec.keep_stacked and spec.length is not None:
                # (allocated once, with the plan: a fresh array of every step's rows each call costs the
                # page faults of its first writes, on this machine as much as the loop's small ops)
                buffer = np.empty((spec.length, *shape), np.dtype(dtype))
                self.kept.append(ns.bind("w", buffer))
                self.lines.append(f"    {name} = {self.kept[-1]}  # {buffer.shape} {buffer.dtype}, the plan's own")
            else:
                self.lines.append(f"    {name} = np.empty((T, *{tuple(shape)!r}), {ns.bind('dtype', np.dtype(dtype))})")
        # A stacked output an out= kernel computes is written straight into its row (no copy after).
        self.direct, self.written, self.row_used = {}, set(), set()
        for stack, o, (shape, _) in zip(self.stacks, self.graph.outputs[spec.C:], spec.stacked):
            # (a row of one number indexes as a numpy scalar, which no out= takes)
            if o not in self.direct and o not in inputs and tuple(shape):
                self.direct[o] = stack
        self.spread = self._spread(names[spec.C + spec.X:], inputs[spec.C + spec.X:])
        self.rows = {stack: _unused(f"row{k}", self.taken) for k, stack in enumerate(self.stacks)}
        self.taken.update(self.rows.values())
        self.sliced = list(zip(slices, whole))
        self.lines.append("")           # (the loop's line: finish writes it, knowing which rows are written)
        self.first_body_line = len(self.lines)

    def _read_only_risks(self, inputs):
        """The positions of the carries and every-step values a compiled region reads as arrays. numba
        compiles a region's loop once per argument type, read-only or not; a constant's array is read-only
        (a reverse loop's zero carry, say), and the first step would compile a region a second time (0.2 s
        or more, cold): such an input is copied once per call instead."""
        spec, read = self.loop, set()
        for kernel, region in self.region_at.values():
            read.update(j for j, how in zip(region.inputs, getattr(kernel, "passing", ())) if how == "array")
        return [k for k, i in enumerate(inputs) if i in read and not spec.C <= k < spec.C + spec.X]

    def loop_line(self):
        """``for t in range(T):``, the slices and the rows written through ``out=`` taken by the loop itself
        (a step costs a view of each either way; iterating makes it a third cheaper than indexing)."""
        order = "range(T - 1, -1, -1)" if self.loop.reverse else "range(T)"
        written = [stack for stack in self.stacks if self.rows[stack] in self.row_used]
        names = ["t"] + [name for name, _ in self.sliced] + [self.rows[stack] for stack in written]
        steps = [whole for _, whole in self.sliced] + written
        if not steps:
            return f"    for t in {order}:"
        steps = [f"{x}[::-1]" if self.loop.reverse else x for x in steps]
        return f"    for {', '.join(names)} in zip({order}, {', '.join(steps)}):"

    def _spread(self, names, reads):
        """{(value every step reads, node): the buffer it is spread into}, for each such value an arithmetic
        op broadcasts to a larger shape: numpy adds a (64,) bias to an (8, 64) array three times slower
        than an (8, 64) one. The buffer is filled once before the loop (the same numbers, the same bits)."""
        spread, buffers = {}, {}
        for i, node in self.graph.nodes.items():
            if node.op not in _SPREAD or any(s is None for s in node.shape) or i in self.region_end:
                continue        # (a region's compiled loop reads a broadcast operand as it is)
            for j in node.inputs:
                read = self.nodes[j]
                if j not in reads or not read.shape or tuple(read.shape) == tuple(node.shape) or \
                        read.dtype != node.dtype:
                    continue
                key = (j, tuple(node.shape))
                if key not in buffers:
                    buffers[key] = self.ns.bind("w", np.empty(node.shape, node.dtype))
                    self.kept.append(buffers[key])
                    name = names[reads.index(j)]
                    self.lines.append(f"    np.copyto({buffers[key]}, {name})  # {name} spread to {tuple(node.shape)} "
                                      "once: each step's op then broadcasts nothing")
                spread[(j, i)] = buffers[key]
        return spread

    def call_parts(self, i, node):
        call = super().call_parts(i, node)
        if self.spread:
            call.args = [self.spread.get((j, i), name) for j, name in zip(node.inputs, call.args)]
        stack = self.direct.get(i)
        if stack is not None and call.out is None and is_a(node, OUT) and not (node.meta or {}).get("kernel"):
            call.out = self.rows[stack]
            self.row_used.add(call.out)
            self.written.add(i)
        return call

    def destination(self, o, kernel):
        """A stacked output a compiled region makes is written straight into its row."""
        stack = self.direct.get(o)
        if stack is None or o in self.written:
            return super().destination(o, kernel)
        self.names[o] = row = self.rows[stack]
        self.row_used.add(row)
        self.written.add(o)
        return row

    def finish(self):
        spec = self.loop
        outs = [self.names[o] for o in self.graph.outputs]
        carries = [self.names[i] for i in self.graph.inputs[:spec.C]]
        for stack, o in zip(self.stacks, self.graph.outputs[spec.C:]):
            if not (o in self.written and self.direct[o] == stack):
                self.lines.append(f"    {stack}[t] = {self.names[o]}")
        if carries:
            self.lines.append(f"    ({', '.join(carries)},) = ({', '.join(outs[:spec.C])},)")
        for k in range(self.first_body_line, len(self.lines)):
            self.lines[k] = "    " + self.lines[k]
        self.lines[self.first_body_line - 1] = self.loop_line()
        # A carry the body passes on from one of its inputs (itself, a slice, a value every step reads, or
        # a view of one) would be handed back as that array: the caller's feed or a buffer the outer plan
        # reuses. It leaves the loop as a copy, as a body program's outputs do.
        copied = [c for c, (_, copy) in zip(carries, self.results()[0][:spec.C]) if copy]
        if copied:
            self.lines.append(f"    ({', '.join(copied)},) = ({', '.join(f'np.array({c})' for c in copied)},)")
        if carries:         # (no step ran: never hand back the caller's own arrays)
            copies = ", ".join(f"np.array({c})" for c in carries)
            self.lines.append(f"    if not T: ({', '.join(carries)},) = ({copies},)")
        self.lines.append(f"    return [{', '.join(carries + self.stacks)}], []")
        program = Program("\n".join(self.lines) + "\n", self.ns.namespace, self.line_nodes, self.memory, {},
                          [*self.slots.values(), *self.kept])
        if self.memory is not None:
            self.memory.workspace_bytes += sum(self.ns.namespace[name].nbytes for name in self.kept)
        program.loop = True
        return program
