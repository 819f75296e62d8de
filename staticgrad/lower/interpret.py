"""Huge plans run by one loop over a list of steps instead of as generated source.

Python compiles a function of a million lines slowly (seconds per 100,000 lines) and in gigabytes of
memory, before it runs it once. Above ``INTERPRET_ABOVE`` scheduled nodes (500,000) a plan is therefore written as
steps ``(kernel, argument registers, attrs, out register, result register)`` that :func:`_loop` runs:
the same kernels on the same values in the same order as the generated source would call them, so
the results have the same bits. Values live in a list of registers made for each call; a register is
reused once the value in it is dead (where the source would ``del`` it).

The program keeps the interface of :class:`codegen.Program`: ``run``, ``namespace`` (kernels, constants
and workspace buffers, under the names the source would use), ``handoff``, ``memory``, ``kind``,
``stats``, ``shapes``, ``line_nodes``; ``source`` is a summary followed by the first lines of the
source the steps stand for. All mutable state of a call is in ``namespace``: :meth:`StepProgram.relinked`
makes the same program over another namespace (a copy with fresh workspace buffers, for another thread).
"""
from __future__ import annotations

import operator

import numpy as np

from ..ops.registry import REGISTRY
from ..tensor import NO_ATTRS
from .codegen import Writer
from .codegen import generate as generate_source

# Scheduled nodes; below, the generated source is compiled: it runs each call about 2.4x faster than the
# loop (a 100,000-op chain of 250,000 nodes: 28 against 68 ms), for about a second more of first call.
INTERPRET_ABOVE = 500_000
LISTED = 200                   # lines of the source kept for reading
_GETTERS = {}                  # k -> operator.itemgetter(k), for the results of one call giving several


def generate(graph, order, params, inputs, memory=None, fused=(), interpret=None, writer=None):
    """The program for ``graph``'s nodes in ``order`` (see codegen.generate): generated source, or for
    more than INTERPRET_ABOVE nodes (or ``interpret=True``) steps run by one loop."""
    if interpret is None:
        interpret = len(order) > INTERPRET_ABOVE
    if writer is None and interpret:
        writer = StepWriter
    return generate_source(graph, order, params, inputs, memory, fused, writer=writer)


def _loop(R, steps, nodes):      # (``nodes``, each step's node, and ``at`` are read by failed_node)
    for at, (kernel, args, attrs, out, result) in enumerate(steps):     # noqa: B007
        if out is None:
            R[result] = kernel(*[R[j] for j in args], **attrs)
        else:
            R[result] = kernel(*[R[j] for j in args], out=R[out], **attrs)


_LOOP = _loop.__code__


def failed_node(program, err, nodes):
    """The node that raised ``err`` while ``program`` (a plan of the graph of ``nodes``) ran, and the nodes
    of the graph that holds it (``nodes``, or a loop body's): (node, nodes), or (None, nodes).

    Each plan and each loop body's program has its own generated function (or step list), so the traceback
    holds one frame per level: the plan's line calling a loop's runner, then the line of the body's
    program that raised. Each frame is read with its own program's line table (the function's globals
    are that program's namespace), and the nodes followed down from the plan's graph into the loop's
    bodies: the innermost node found is named.
    """
    found, scope = None, nodes
    for i in _path(program, err):
        if found is not None:
            # (the next frame runs a body of the loop ``found``; or, a checkpointed scan's rows read by a
            # reverse loop, of another loop beside it that recomputes them)
            inner = _body_holding(found, i) or next(filter(None, (_body_holding(n, i) for n in scope.values())),
                                                     None)
            if inner is None:
                break
            scope = inner
        if scope.get(i) is None:
            break
        found = scope[i]
    return found, scope


def _body_holding(node, i):
    """The nodes of the body of loop ``node`` that holds a node ``i`` (None if none does)."""
    for attr in getattr(REGISTRY.get(node.op), "bodies", ()):
        body = node.attrs.get(attr)
        if body is not None and i in body.graph.nodes:
            return body.graph.nodes
    return None


def _path(program, err):
    """The node ids of the frames of generated code (or steps) in ``err``'s traceback, outermost first."""
    tb, path = err.__traceback__, []
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename == "<staticgrad>":
            owner = getattr(frame.f_globals.get("run"), "program", None)
            lines = owner.line_nodes if owner is not None else program.line_nodes if not path else {}
            path.append(lines.get(tb.tb_lineno))
        elif frame.f_code is _LOOP and "at" in frame.f_locals:    # (not before the first step began)
            path.append(frame.f_locals["nodes"][frame.f_locals["at"]])
        tb = tb.tb_next
    return path


class StepWriter(Writer):
    """Writes a plan's steps (and the first LISTED lines of its source, for reading)."""

    def __init__(self, graph, order, memory, fused, numerics=None):
        if numerics is not None:
            raise ValueError("check_numerics runs generated source, not steps")
        super().__init__(graph, order, memory, fused)
        self.steps, self.step_nodes = [], []
        self.registers = {}      # variable name -> register
        self.constants = {}      # namespace name -> register (filled from the namespace at every call)
        self.free, self.count = [], 0
        self.params, self.feeds = [], []

    def header(self, params, inputs):
        super().header(params, inputs)
        self.feeds = [self.define(self.names[i]) for i in inputs]

    def load_param(self, k, name, i):
        self.params.append((self.define(name), k))
        self.emit(self.param_line(k, name, i), i)

    def emit(self, line, node_id=None):
        if len(self.lines) < LISTED:
            super().emit(line, node_id)

    def define(self, name):
        """A register for a new value (``name``: its variable; None: a temporary)."""
        if self.free:
            register = self.free.pop()
        else:
            register, self.count = self.count, self.count + 1
        if name is not None:
            self.registers[name] = register
        return register

    def register(self, name):
        """The register holding ``name``: a variable's, or the one a namespace value is loaded into."""
        register = self.registers.get(name)
        if register is None:
            register = self.constants.get(name)
            if register is None:      # (never a freed one: an earlier step would write over the value)
                register = self.constants[name] = self.count
                self.count += 1
        return register

    def add(self, kernel, args, attrs, out, result, node_id):
        self.steps.append((kernel, tuple(args), attrs, out, result))
        self.step_nodes.append(node_id)

    def call(self, step, i, node):
        call = self.call_parts(i, node)
        register = self.register
        args = [register(a) for a in call.args]
        namespace = self.ns.namespace
        attrs = ({key: value if name is None else namespace[name] for key, value, name in call.attrs}
                 if call.attrs else NO_ATTRS)
        out = None
        if call.out is not None:
            if call.positional:
                args.append(self.register(call.out))
            else:
                out = self.register(call.out)
        self.add(namespace[call.kernel], args, attrs, out, self.define(call.var), i)
        if len(self.lines) < LISTED:
            self.emit(self.call_line(i, node, call), i)
        self.drop_dead(node.inputs, step)

    def multi(self, i, outs, kernel, args, line):
        whole = self.define(None)
        self.add(self.ns.namespace[kernel], [self.register(a) for a in args], NO_ATTRS, None, whole, i)
        for k, name in enumerate(outs):
            getter = _GETTERS.get(k) or _GETTERS.setdefault(k, operator.itemgetter(k))
            self.add(getter, [whole], NO_ATTRS, None, self.define(name), i)
        self.free.append(whole)
        if len(self.lines) < LISTED:
            self.emit(line(), i)

    def drop_dead(self, read, step):
        """Free the registers of the values whose last reader ran at ``step``."""
        if len(self.lines) < LISTED:
            super().drop_dead(read, step)
        last_use, keep = self.last_use, self.keep
        for j in (read if len(read) < 2 else dict.fromkeys(read)):     # (each value once)
            if last_use.get(j) == step and j not in keep:
                # (nor its name: a plan of millions of values would hold millions of names to the end)
                name = self.names.pop(j, None)
                self.temps.discard(name)
                register = self.registers.pop(name, None)
                if register is not None:
                    self.free.append(register)

    def finish(self) -> StepProgram:
        named_outs, named_ups, handoff = self.results()
        outs = [(self.register(name), copy) for name, copy in named_outs]
        ups = [self.register(name) for name in named_ups]
        listing = self.lines[:LISTED] + [self.return_line(named_outs, named_ups).replace("    ", "    # ", 1)]
        summary = [f"# {len(self.step_nodes):,} steps run by staticgrad.lower.interpret (a plan of "
                   f"{len(self.graph.nodes):,} nodes is not compiled as Python source: it would take longer",
                   "# to compile than to run); the source they stand for begins:"]
        line_nodes = {line + len(summary): i for line, i in self.line_nodes.items()}
        cut = [f"    # ... (the listing stops after {LISTED} lines)"] if len(self.lines) >= LISTED else []
        source = "\n".join(summary + listing + cut)
        return StepProgram(self.steps, self.step_nodes, self.constants, self.count, self.params, self.feeds,
                           outs, ups, self.ns.namespace, self.memory, handoff, source + "\n", line_nodes)


class StepProgram:
    """A plan as steps run by :func:`_loop` (see the module's docstring)."""

    def __init__(self, steps, step_nodes, constants, count, params, feeds, outs, ups, namespace, memory,
                 handoff, source, line_nodes):
        self.steps, self.step_nodes, self.constants, self.count = steps, step_nodes, constants, count
        self.params, self.feeds, self.outs, self.ups = params, feeds, outs, ups
        self.namespace, self.memory, self.handoff = namespace, memory, handoff or {}
        self.source, self.line_nodes = source, line_nodes
        self.kind, self.stats, self.shapes = "numpy", {}, None
        # A handed-off buffer is rebound in the namespace after a call (Function._put): read at each call,
        # and not held here (an array that only a parameter holds is recycled as the next workspace).
        handed = set(self.handoff.values())
        self.reload = [(register, name) for name, register in constants.items() if name in handed]
        self.base = [None] * count
        for name, register in constants.items():
            if name not in handed:
                self.base[register] = namespace[name]

    def run(self, *feeds):
        if len(feeds) != len(self.feeds):
            raise TypeError(f"run() takes {len(self.feeds)} positional arguments but {len(feeds)} were given")
        R = self.base[:]
        namespace = self.namespace
        for register, name in self.reload:
            R[register] = namespace[name]
        P = namespace["P"]
        for register, k in self.params:
            R[register] = P[k]._value
        for register, value in zip(self.feeds, feeds):
            R[register] = value
        _loop(R, self.steps, self.step_nodes)
        return [np.array(R[r]) if copy else R[r] for r, copy in self.outs], [R[r] for r in self.ups]

    def relinked(self, namespace) -> StepProgram:
        """This program over ``namespace``, a copy of its own in which some values (workspace buffers,
        kernels owning buffers) are replaced: the steps use the replacements. For another thread."""
        swap = {id(value): namespace[name] for name, value in self.namespace.items()
                if namespace.get(name, value) is not value}

        def new(value):
            return swap.get(id(value), value)
        steps = [(new(kernel), args, {k: new(v) for k, v in attrs.items()} if attrs else attrs, out, result)
                 for kernel, args, attrs, out, result in self.steps] if swap else self.steps
        program = StepProgram(steps, self.step_nodes, self.constants, self.count, self.params, self.feeds,
                              self.outs, self.ups, namespace, self.memory, self.handoff, self.source,
                              self.line_nodes)
        program.kind, program.stats, program.shapes = self.kind, self.stats, self.shapes
        return program
