"""The compiled Function: checks feeds, runs the plan for their shapes, then assigns the parameter updates."""
from __future__ import annotations

import os
import sys
import threading
from collections import deque
from itertools import repeat

import numpy as np

from .feeds import Feeds, check_feed
from .graph import Graph
from .loops.reroll import is_rolled
from .lower import Backend, Program, as_backend, build_program, failed_node
from .lower.interpret import StepProgram
from .lower.standalone import module_source
from .passes import finish_rows
from .report import Report
from .tensor import FeedError, NumericsError, StaticgradError, Tensor, format_shape, gc_paused, origin


class ExecutionError(StaticgradError):
    """A kernel failed while a compiled function ran (for example sizes that disagree at run time)."""


# Only CPython's reference counts say for sure that nothing else can see an array.
_REFCOUNTS = sys.implementation.name == "cpython"

# What fn.source starts with: its names are bound by staticgrad, so the text alone does not run.
READING = ("# For reading: this code runs inside staticgrad, which binds the names it uses (P the parameters,\n"
           "# w.. workspace buffers, c.. constants, the kernels). fn.save_source('name.py') writes a module that\n"
           "# runs on its own (import name; name.run(...)), its parameters and constants in name.npz beside it.\n")


class _Idle(list):
    """The programs for one combination of feed shapes that no call is running; ``kind`` is theirs."""

    __slots__ = ("kind",)


class Function:
    """A compiled graph: call it with the feeds, get the outputs; parameters are updated afterwards.

    The first call with a new combination of feed shapes builds a plan for exactly those shapes (sizes
    of every intermediate, memory planned into a reusable workspace); later calls with the same shapes
    reuse it, so alternating batch sizes never recompile.

    What inspection reads: ``ir`` (the optimized IR graph), ``unoptimized`` (the graph before the passes,
    None for a loaded function or one of more than passes.KEEP_UP_TO nodes), ``report()`` (its rows: what
    each pass did), ``program`` (the plan of the latest call), ``plans_built`` (plans built so far, counting
    any rebuilt after the cache of MAX_PLANS dropped them), ``source``, ``graph`` (networkx), ``check_feeds``.
    """

    MAX_PLANS = 32

    def __init__(self, ir: Graph, single, rows, unoptimized=None, backend="numpy", positional=True):
        self.ir = ir
        self.single = bool(single)
        self.feeds = Feeds([ir.nodes[i] for i in ir.inputs], positional)
        self.positional = self.feeds.positional
        self.unoptimized = unoptimized
        self._backend = as_backend(backend)
        self._dtypes = [n.dtype for n in self.feeds.nodes]
        self._params = [ir.nodes[i].tensor for i in ir.parameter_ids()]
        self._updates = [(ir.nodes[p].tensor, k) for k, (p, _) in enumerate(ir.updates)]
        self._update_params = [param for param, _ in self._updates]
        self._rows = rows
        self._graph = None
        self._plans = {}                # feed shapes -> the idle programs for them
        self._building = threading.RLock()
        self._lock = threading.RLock() if self._updates else None
        self._last = None
        self._preview = None            # fn.source before any call
        self._backend_seconds = 0.0
        self.plans_built = 0
        self._fast = self._make_fast_path()

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs) -> np.ndarray | list[np.ndarray]:
        if kwargs or len(args) != len(self._dtypes) or (args and isinstance(args[0], dict)) or not self.positional:
            return self._call_keyed(args, kwargs)
        return self._fast(*args)

    def _call_keyed(self, args, kwargs):
        """A call by dict or keywords, or one the positional fast path does not take."""
        keyed = None
        if kwargs and not args:
            keyed = kwargs
        elif len(args) == 1 and type(args[0]) is dict and not kwargs:
            keyed = args[0]
        values = None if keyed is None else self.feeds.in_order(keyed)
        if values is None:
            return self._call(self.check_feeds(*args, **kwargs))    # (and every error about the feeds)
        return self._fast(*values)

    def check_feeds(self, *args, **kwargs) -> list:
        """The arrays a call with these arguments feeds, checked, in inputs order (or the FeedError)."""
        return self.feeds.check(args, kwargs)

    def _make_fast_path(self):
        """A call specialized to this function's inputs: arrays of the right dtype pass untouched (their
        shapes are checked once per plan, when the plan for those shapes is built).

        Each call takes a program from the idle ones for its shapes and puts it back when done, so calls
        from several threads at once each run their own (a program's workspace is written by every call).
        A call interrupted before it puts its program back just loses it: the next call builds another,
        so no half-done handover is ever run again. Calls that update parameters hold the function's lock
        from reading the parameters to assigning them: each sees the previous one's updates.
        """
        names = [f"a{k}" for k in range(len(self.feeds.nodes))]
        feeds = f"({''.join(n + ', ' for n in names)})"
        lines = [f"def fast({', '.join(names)}):"]
        for k, name in enumerate(names):
            lines.append(f"    if type({name}) is not ndarray or {name}.dtype is not D{k} "
                         f"or not {name}.flags.c_contiguous: {name} = check(N{k}, {name})")
        key = "(" + "".join(f"{n}.shape, " for n in names) + ")"
        body = ["try:",
                "    program = idle.pop()",
                "except IndexError:",
                f"    program = spare(idle, {key}, {feeds})",
                "try:",
                f"    outputs, new_values = program.run({', '.join(names)})",
                "except StaticgradError:",
                "    idle.append(program)",
                "    raise",
                "except Exception as err:",
                "    idle.append(program)",
                "    raise explain(err, program) from err",
                # (the feeds too: an update simplified to a feed must copy the caller's array)
                f"if new_values: assign(new_values, outputs, program, {feeds})",
                "idle.append(program)"]
        lines += [f"    idle = plans.get({key})", f"    if idle is None: return call({feeds})"]
        if self._lock is not None:
            # An exception raised at some lines (a nested `try:`, the `finally:`) escapes between taking the
            # lock and giving it back; the lock is reentrant, so this thread's next call finds it still its
            # own and drops that hold (other threads wait until then).
            lines += ["    while owned(): release()", "    acquire()", "    try:"]
            lines += ["        " + line for line in body] + ["    finally:", "        release()"]
        else:
            lines += ["    " + line for line in body]
        if self.single:
            lines += ["    out = outputs[0]", "    return out if type(out) is ndarray else asarray(out)"]
        else:
            lines += ["    return [o if type(o) is ndarray else asarray(o) for o in outputs]"]
        namespace = {"ndarray": np.ndarray, "asarray": np.asarray, "check": check_feed, "plans": self._plans,
                     "call": self._call, "explain": self._explain, "assign": self._assign, "spare": self._spare,
                     "StaticgradError": StaticgradError}
        if self._lock is not None:
            lock = self._lock
            namespace.update(owned=lock._is_owned, acquire=lock.acquire, release=lock.release)
        for k, node in enumerate(self.feeds.nodes):
            namespace[f"D{k}"], namespace[f"N{k}"] = node.dtype, node
        exec("\n".join(lines) + "\n", namespace)
        return namespace["fast"]

    def _call(self, feeds):
        """A call whose feeds are checked arrays: builds the plan for their shapes if there is none yet."""
        key = tuple([f.shape for f in feeds])
        if key not in self._plans:
            building = self._building
            while building._is_owned():      # (not `with`: see _make_fast_path)
                building.release()
            building.acquire()
            try:
                if key not in self._plans:
                    self._plan(key, feeds)
            finally:
                building.release()
        return self._fast(*feeds)

    def _plan(self, key, feeds):
        """Build and cache the program for feed shapes ``key``, after refusing what it must not run."""
        for node, shape in zip(self.feeds.nodes, key):
            if self._updates and 0 in shape:
                raise FeedError(f"placeholder {node.label()!r}: an empty batch (shape {format_shape(shape)}) into a "
                                "function that updates parameters (a mean over it would write NaN into them)")
        with gc_paused():
            program = build_program(self.ir, key, self.backend, feeds)
        self._check_update_shapes(program)
        self._backend_seconds += program.seconds
        self.plans_built += 1
        if len(self._plans) >= self.MAX_PLANS:
            self._plans.pop(next(iter(self._plans)), None)
        idle = _Idle([program])
        idle.kind = program.kind
        self._plans[key] = idle
        self._last = program
        return program

    def _spare(self, idle, key, feeds):
        """A program for shapes ``key`` of this call's own: the idle ones are all running in other threads
        (or were lost to an interrupted call). It is the same code as theirs, and joins them when done."""
        program = build_program(self.ir, key, self.backend, feeds, kind=idle.kind)
        self._backend_seconds += program.seconds
        return program

    def _check_update_shapes(self, program):
        """Refuse a plan whose update values do not have their parameters' shapes (a None size of the
        update's expression is known only now)."""
        shapes, nodes = program.shapes, self.ir.nodes
        for p, e in self.ir.updates:
            param = nodes[p].tensor
            if tuple(shapes[e]) != param.shape:
                raise ExecutionError(f"update of parameter {param.label()!r}: the new value (built at "
                                     f"{nodes[e].source}) has shape {format_shape(shapes[e])} with these feeds, "
                                     f"expected {format_shape(param.shape)}")

    def _assign(self, new_values, outputs, program, feeds=()):
        if not self._handed_over(new_values, outputs, program):
            self._assign_checked(new_values, outputs, program, feeds)

    def _handed_over(self, new_values, outputs, program) -> bool:
        """The training step's case, without the general checks: every new value is still in the
        workspace buffer the plan wrote it to, and no output shows that memory. Such a buffer is the
        plan's own (fresh, or a replaced value nothing else referred to), so it is of the parameter's shape
        and dtype, and neither a feed's nor another parameter's: it can become the parameter's as it is."""
        handoff, namespace = program.handoff, program.namespace
        if len(handoff) != len(new_values):
            return False
        buffers = set()
        for k, name in handoff.items():
            value = new_values[k]
            if namespace[name] is not value:
                return False
            buffers.add(id(value))
        for o in outputs:
            if id(o) in buffers or (type(o) is np.ndarray and o.base is not None and id(o.base) in buffers):
                return False
        if len(buffers) != len(handoff):
            return False
        self._commit(new_values, program)
        return True

    def _assign_checked(self, new_values, outputs, program, feeds=()):
        # Check every new value before assigning any, so a failing call changes no parameter.
        # A value the caller or another parameter also holds is copied: a parameter owns its array
        # (an update to a feed, x itself or x * 1, must not follow the caller's later writes to x).
        held = {id(p._value) for p in self._params}
        held.update(map(id, outputs))
        held.update(map(id, feeds))
        # (an output may also be a view of a new value: the memory it shows is the caller's too)
        held.update([id(o.base) for o in outputs if type(o) is np.ndarray and o.base is not None])
        values = []
        for param, k in self._updates:
            value = new_values[k]
            if type(value) is not np.ndarray or value.shape != param.shape or value.dtype != param.dtype:
                value = self._conform(param, value)
            if id(value) in held or value.base is not None or not value.flags.writeable:
                value = value.copy()
            held.add(id(value))
            values.append(value)
        self._commit(values, program)

    def _commit(self, values, program):
        """Give each parameter its new value (``values`` in updates order), all in one step.

        Where the plan wrote a value into one of its workspace buffers, the buffer now belongs to the
        parameter, and the replaced array takes its place if nothing else can see it (the caller, a view,
        another parameter); else the plan gets a new buffer. That is decided first; then one C call assigns
        every parameter, so no Python line runs between two assignments and neither an exception nor a
        KeyboardInterrupt can fall there. An interrupt after it, before the buffers are replaced, costs the
        program: the caller puts it back among the idle ones only after this returns.
        """
        params, handoff, namespace = self._update_params, program.handoff, program.namespace
        probe = object()        # referred to by this frame only: `old` is alone with one more, its parameter's
        alone_count = sys.getrefcount(probe) + 1 if _REFCOUNTS else -1
        buffers = {}
        for k, name in handoff.items():
            value = values[k]
            if namespace[name] is not value:
                continue
            old = params[k]._value
            if sys.getrefcount(old) == alone_count and type(old) is np.ndarray and old.base is None:
                flags = old.flags
                if flags.c_contiguous and flags.writeable:
                    buffers[name] = old
                    continue
            buffers[name] = np.empty_like(value)
        deque(map(setattr, params, repeat("_value"), values), 0)
        namespace.update(buffers)

    @staticmethod
    def _conform(param, value):
        value = np.asarray(value)
        if value.shape != param.shape:        # (the plan's shapes were checked: a kernel broke its shape rule)
            raise ExecutionError(f"update of parameter {param.label()!r}: the new value has shape "
                                 f"{format_shape(value.shape)}, expected {format_shape(param.shape)}")
        if value.dtype != param.dtype:
            value = value.astype(param.dtype)
        return value

    def _explain(self, err, program):
        node, nodes = failed_node(program, err, self.ir.nodes)     # (a loop body's node: its body's nodes)
        numerics = isinstance(err, FloatingPointError)     # (under np.errstate(all="raise"))
        if node is None:
            cls = NumericsError if numerics else ExecutionError
            return cls(f"compiled function failed: {type(err).__name__}: {err}")
        inputs = ", ".join(format_shape(nodes[i].shape) for i in node.inputs)
        message = (f"{node.op} node {node.id} ({origin(node, nodes.get(node.adjoint_of))}) failed at run time on "
                   f"inputs of static shapes {inputs}: {type(err).__name__}: {err}")
        return NumericsError(message) if numerics else ExecutionError(message)

    def run_batches(self, batches, progress=None, desc=None, name="loss"):
        """Call this function on every batch (see staticgrad.data.run_batches)."""
        from .data import run_batches
        return run_batches(self, batches, progress=progress, desc=desc, name=name)

    @property
    def backend(self) -> Backend:
        """How this function's plans run (a staticgrad.lower.Backend); setting it drops the plans built."""
        return self._backend

    @backend.setter
    def backend(self, backend):
        self._backend = as_backend(backend)
        self._plans.clear()
        self._last = self._preview = None

    # ------------------------------------------------------------------ looking inside
    @property
    def program(self) -> Program | None:
        """The plan the latest call ran (None before any call): its ``source``, ``kind`` ("numpy", "scalar"
        or "numba"), ``stats``, ``memory`` plan and ``namespace``."""
        return self._last

    @property
    def source(self) -> str:
        """The generated executor code: the plan for the latest feed shapes; before any call, the numpy plan
        for the inputs' static shapes (memory planning and all), or the shape-generic code where a size is
        unknown."""
        program = self._last
        if program is None:
            if self._preview is None:
                key = tuple(n.shape for n in self.feeds.nodes)
                shapes = None if any(None in shape for shape in key) else key
                numpy_only = Backend("numpy", scalar=False, memory_planning=self.backend.memory_planning)
                self._preview = build_program(self.ir, shapes, numpy_only)
            program = self._preview
        # (a plan run as steps is too large to save as source: its summary says what it is)
        return program.source if isinstance(program, StepProgram) else READING + program.source

    def save_source(self, path) -> str:
        """Write this function's plan as a module that runs on its own: ``path`` (``name.py``), and beside it
        ``name.npz`` with the parameters' current values and the plan's constants (loaded without pickles).

        ``import name``, then ``name.run(*feeds)`` gives the outputs and the new values of the parameters it
        updates, as lists; ``name.step(*feeds)`` also gives the parameters (``name.P``) those values. The
        plan is the numpy one (whatever this function's backend, and without numerics checks) for the feed
        shapes of the latest plan built, or before any call the inputs' static shapes. Returns ``path``.
        """
        shapes = self._saved_shapes()
        backend = self.backend.replace(name="numpy", scalar=False, check_numerics=False)
        with gc_paused():
            program = build_program(self.ir, shapes, backend)
        nodes, parameters = self.ir.nodes, self.ir.parameter_ids()
        feeds = [(node.dtype, shape) for node, shape in zip(self.feeds.nodes, shapes)]
        outputs = [nodes[o].label() for o in self.ir.outputs]
        updated = [(parameters.index(p), nodes[p].label()) for p, _ in self.ir.updates]
        name = os.path.splitext(os.path.basename(path))[0]
        text, arrays = module_source(program, name, feeds, outputs, updated)
        np.savez(os.path.splitext(path)[0] + ".npz", **arrays)
        with open(path, "w") as fh:
            fh.write(text)
        return path

    def _saved_shapes(self):
        if self._last is not None:
            return [tuple(self._last.shapes[i]) for i in self.ir.inputs]
        for node in self.feeds.nodes:
            if None in node.shape:
                raise FeedError(f"save_source: placeholder {node.label()!r} has shape {format_shape(node.shape)}, "
                                "and a saved plan is for known sizes: call the function once first")
        return [node.shape for node in self.feeds.nodes]

    @property
    def graph(self):
        """The optimized graph as a networkx.DiGraph (node attributes: op, shape, dtype, role, ...; a loop's
        node also ``bodies``: {attribute: its body as such a DiGraph}; see ``Graph.to_networkx``)."""
        if self._graph is None:
            self._graph = self.ir.to_networkx()
        return self._graph

    @property
    def inputs(self):
        return [n.tensor for n in self.feeds.nodes]

    def parameters(self) -> list[Tensor]:
        """The parameters this function reads or updates, in graph order (``.value`` is each one's array);
        after ``sg.load`` these are the fresh parameters holding the saved values."""
        return list(self._params)

    def report(self) -> Report:
        """What each pass did (``.rows``), plus the plans built so far and the memory of the latest one."""
        summary = {"nodes": len(self.ir.nodes), "ops": dict(sorted(self.ir.op_counts().items())),
                   "plans": len(self._plans), "backend": self.backend.name}
        rolled = sum(1 for n in self.ir.nodes.values() if n.op == "scan" and is_rolled(n.attrs["body"]))
        if rolled:
            summary["rolled_loops"] = rolled       # (loops.reroll: stretches of a huge graph held as scans)
        last = self._last
        if last is not None:
            summary["program"] = last.kind if last.kind == "scalar" else self.backend.name
        if self.backend.name == "numba":
            summary["numba_compile_seconds"] = round(self._backend_seconds, 3)
            summary["fused_regions"] = last.stats.get("fused_regions", 0) if last is not None else 0
        if last is not None:
            summary.update((k, n) for k, n in last.stats.items() if k != "fused_regions")
            memory = last.memory
            if memory is not None:
                summary.update({"peak_bytes": memory.peak_planned, "peak_bytes_unplanned": memory.peak_unplanned,
                                "workspace_slots": len(memory.slots), "in_place": memory.inplace,
                                "plan_shapes": [last.shapes[i] for i in self.ir.inputs]})
        return Report(finish_rows(self._rows), summary)

    def __repr__(self):
        names = ", ".join(n.label() for n in self.feeds.nodes)
        return f"<staticgrad.Function({names}) {len(self.ir.nodes)} nodes>"
