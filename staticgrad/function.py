"""The compiled Function: checks feeds, runs the generated code, then assigns the parameter updates."""
from __future__ import annotations

import sys

import numpy as np

from .lower import batching, scalarize
from .lower.codegen import generate
from .graph import Graph
from .lower.plan import concrete_shapes, plan_memory, skip_identities, specialize
from .tensor import FeedError, FeedTypeError, StaticgradError, Tensor, format_shape, gc_paused


_MISSING = object()


class ExecutionError(StaticgradError):
    """A kernel failed while a compiled function ran (for example sizes that disagree at run time)."""


# Only CPython's reference counts say for sure that nothing else can see an array.
_REFCOUNTS = sys.implementation.name == "cpython"


def _num(value) -> str:
    return "?" if value is None else f"{value:,}"


class Report:
    """What each pass did, as ``.rows`` (one dict per pass run); ``str(report)`` is a table.

    It is also the sequence of those rows (``len``, ``report[0]``, iteration), and ``report["plans"]``
    reads the summary that follows the table (plans, backend, memory of the newest plan, ...).
    """

    COLUMNS = ("pass", "nodes_before", "nodes_after", "seconds", "changed")

    def __init__(self, rows, summary=None):
        self.rows = rows
        self.summary = summary or {}

    def __str__(self):
        # peak bytes of intermediates with memory planning, and with every one kept until the call returns
        header = (f"{'pass':<15}{'before':>7}{'after':>7}{'changed':>8}{'ms':>8}{'flops':>11}{'peak B':>10}"
                  f"{'unplanned':>10}{'fixed':>6}  ops removed / added")
        lines = [header, "-" * len(header)]
        for r in self.rows:
            delta = ", ".join([f"-{n} {op}" for op, n in r["removed"].items()] +
                              [f"+{n} {op}" for op, n in r["added"].items()])
            lines.append(f"{r['pass']:<15}{r['nodes_before']:>7}{r['nodes_after']:>7}{str(r['changed']):>8}"
                         f"{r['seconds'] * 1e3:>8.2f}{_num(r.get('flops')):>11}{_num(r.get('peak_bytes')):>10}"
                         f"{_num(r.get('peak_bytes_unplanned')):>10}"
                         f"{'yes' if r.get('fixed_point', True) else 'no':>6}  {delta}")
        for key, value in self.summary.items():
            lines.append(f"{key}: {value}")
        return "\n".join(lines)

    def __repr__(self):
        return str(self)

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.summary[key]
        return self.rows[key]

    def __contains__(self, key):
        # "plans" in report: the summary's keys, as report["plans"] reads them (a row is there too)
        return key in self.summary if isinstance(key, str) else key in self.rows

    def get(self, key, default=None):
        return self.summary.get(key, default)


class ScalarProgram:
    """A plan run as Python scalar code, falling back to the numpy plan where float semantics differ."""

    def __init__(self, source, params, fallback):
        namespace = dict(scalarize.HELPERS, P=params)
        exec(compile(source, "<staticgrad scalar>", "exec"), namespace)
        scalar, numpy_run = namespace["run"], fallback.run

        def run(*feeds):
            try:
                return scalar(*feeds)
            except (ArithmeticError, ValueError, IndexError):
                return numpy_run(*feeds)     # numpy's inf/nan semantics, or its clear error

        self.run, self.source, self.fallback = run, source, fallback
        self.regions = getattr(fallback, "regions", 0)
        self.memory, self.line_nodes, self.shapes = fallback.memory, fallback.line_nodes, fallback.shapes
        # When the fallback runs, its new parameter values may be its workspace buffers (see _assign).
        self.handoff, self.namespace = fallback.handoff, fallback.namespace


def _maybe_scalar(graph, order, param_ids, shapes, program, feeds):
    """The scalar version of ``program`` (the caller checked it is eligible), if it agrees on ``feeds``."""
    try:
        source = scalarize.generate(graph, order, param_ids, graph.inputs, shapes)
    except Exception:       # anything the scalar generator cannot express stays with numpy
        return program
    params = [graph.nodes[i].tensor for i in param_ids]
    candidate = ScalarProgram(source, params, program)
    try:
        want, got = program.run(*feeds), candidate.run(*feeds)
    except Exception:
        return program
    for a, b in zip(want[0] + want[1], got[0] + got[1]):
        if not np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-9, atol=1e-12,
                           equal_nan=True):
            return program
    return candidate


def check_feed(node, value):
    """``value`` as an array of the placeholder's dtype, or a FeedError naming it."""
    try:
        arr = value if type(value) is np.ndarray else np.asarray(value)
    except (ValueError, TypeError) as err:
        raise FeedTypeError(f"placeholder {node.label()!r}: expected an array of shape {format_shape(node.shape)} "
                        f"and dtype {node.dtype}, got {type(value).__name__} that numpy cannot convert "
                        f"({err})") from None
    expected = node.shape
    if arr.dtype != node.dtype:
        if not np.can_cast(arr.dtype, node.dtype, "same_kind"):
            raise FeedTypeError(f"placeholder {node.label()!r}: expected dtype {node.dtype} with shape "
                            f"{format_shape(expected)}, got dtype {arr.dtype} with shape {format_shape(arr.shape)} "
                            f"(numpy cannot cast {arr.dtype} to {node.dtype} with 'same_kind')")
        arr = arr.astype(node.dtype)
    if arr.ndim != len(expected) or any(d is not None and d != a for d, a in zip(expected, arr.shape)):
        raise FeedError(f"placeholder {node.label()!r}: expected shape {format_shape(expected)} (dtype "
                        f"{node.dtype}), got shape {format_shape(arr.shape)} (dtype {arr.dtype})")
    if not arr.flags.c_contiguous:
        # a C-ordered copy: numpy lays results out like their operands, and a plan's buffers are C-ordered,
        # so a Fortran-ordered feed would make planned sums add in another order than unplanned ones
        arr = np.ascontiguousarray(arr)
    return arr


class Function:
    """A compiled graph: call it with the feeds, get the outputs; parameters are updated afterwards.

    The first call with a new combination of feed shapes builds a plan for exactly those shapes (sizes
    of every intermediate, memory planned into a reusable workspace); later calls with the same shapes
    reuse it, so alternating batch sizes never recompile.
    """

    MAX_PLANS = 32

    def __init__(self, ir, single, rows, unoptimized=None, memory_planning=True, scalar=True, backend="numpy",
                 positional=True):
        from .compiler import schedule
        self.ir = ir                       # the optimized staticgrad.graph.Graph
        self._order = schedule(ir)
        self._param_ids = [i for i in self._order if ir.nodes[i].op == "parameter"]
        self._single = single
        # With inputs=None the order of several placeholders is not the user's: dict or names only.
        self._positional = positional or len(ir.inputs) <= 1
        self._inputs = [ir.nodes[i] for i in ir.inputs]
        self._dtypes = [n.dtype for n in self._inputs]
        self._by_key = {}
        for node in self._inputs:
            self._by_key[node.tensor] = node
            if node.name is not None:
                self._by_key.setdefault(node.name, node)
        self._params = [ir.nodes[i].tensor for i in self._param_ids]
        self._updates = [(ir.nodes[p].tensor, k) for k, (p, _) in enumerate(ir.updates)]
        self._rows = rows
        self._unoptimized = unoptimized
        self._memory_planning = memory_planning
        self._graph = None
        self._plans = {}
        self._last = None
        self._preview = None            # fn.source before any call
        self._scalar = scalar
        if backend not in ("numpy", "numba"):
            raise ValueError(f"unknown backend {backend!r}: expected 'numpy' or 'numba'")
        if backend == "numba":
            from .lower.numba_backend import require
            require()
        self._backend = backend
        self._backend_seconds = 0.0
        self._fast = self._make_fast_path()

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        if kwargs or len(args) != len(self._dtypes) or (args and isinstance(args[0], dict)) or not self._positional:
            return self._call_keyed(args, kwargs)
        return self._fast(*args)

    def _call_keyed(self, args, kwargs):
        """A call by dict or keywords, or one the positional fast path does not take."""
        keyed = None
        if kwargs and not args:
            keyed = kwargs
        elif len(args) == 1 and type(args[0]) is dict and not kwargs:
            keyed = args[0]
        values = None if keyed is None else self._in_order(keyed)
        if values is None:
            return self._call(self._feeds(args, kwargs))    # (and every error about the feeds)
        return self._fast(*values)

    def _in_order(self, feeds):
        """The values of a dict (or keywords) that feeds every input exactly once, in inputs order; None for
        anything else, which the full check then explains. Lets a dict call take the fast path."""
        if len(feeds) != len(self._inputs):
            return None
        values = []
        for node in self._inputs:
            value = feeds.get(node.tensor, _MISSING)
            if value is _MISSING and node.name is not None:
                value = feeds.get(node.name, _MISSING)
            if value is _MISSING:
                return None
            values.append(value)
        return values

    def _make_fast_path(self):
        """A call specialized to this function's inputs: arrays of the right dtype pass untouched (their
        shapes are checked once per plan, when the plan for those shapes is built)."""
        names = [f"a{k}" for k in range(len(self._inputs))]
        lines = [f"def fast({', '.join(names)}):"]
        for k, name in enumerate(names):
            lines.append(f"    if type({name}) is not ndarray or {name}.dtype is not D{k} or not {name}.flags.c_contiguous: "
                         f"{name} = check(N{k}, {name})")
        key = "(" + "".join(f"{n}.shape, " for n in names) + ")"
        lines += [f"    program = plans.get({key})",
                  f"    if program is None: return call(({', '.join(names)},))" if names else
                  "    if program is None: return call(())",
                  "    try:",
                  f"        outputs, new_values = program.run({', '.join(names)})",
                  "    except StaticgradError:",
                  "        raise",
                  "    except Exception as err:",
                  "        raise explain(err, program) from err",
                  # (the feeds too: an update simplified to a feed must copy the caller's array)
                  f"    if new_values: assign(new_values, outputs, program, ({''.join(n + ', ' for n in names)}))"]
        if self._single:
            lines += ["    out = outputs[0]", "    return out if type(out) is ndarray else asarray(out)"]
        else:
            lines += ["    return [o if type(o) is ndarray else asarray(o) for o in outputs]"]
        namespace = {"ndarray": np.ndarray, "asarray": np.asarray, "check": check_feed, "plans": self._plans,
                     "call": self._call, "explain": self._explain, "assign": self._assign,
                     "StaticgradError": StaticgradError}
        for k, node in enumerate(self._inputs):
            namespace[f"D{k}"], namespace[f"N{k}"] = node.dtype, node
        exec("\n".join(lines) + "\n", namespace)
        return namespace["fast"]

    def _call(self, feeds):
        key = tuple([f.shape for f in feeds])
        program = self._plans.get(key)
        if program is None:
            program = self._plan(key, feeds)
        try:
            outputs, new_values = program.run(*feeds)
        except StaticgradError:
            raise
        except Exception as err:
            raise self._explain(err, program) from err
        if new_values:
            self._assign(new_values, outputs, program, feeds)
        # Reductions give numpy scalars; callers always get arrays (0-d for a scalar).
        if self._single:
            out = outputs[0]
            return out if type(out) is np.ndarray else np.asarray(out)
        return [o if type(o) is np.ndarray else np.asarray(o) for o in outputs]

    def _plan(self, key, feeds=None):
        """The program specialized to feed shapes ``key`` (built once, then cached).

        Tiny plans run as Python scalar code instead (see scalarize.eligible), checked on these feeds.
        """
        with gc_paused():
            return self._build_plan(key, feeds)

    def _build_plan(self, key, feeds):
        ir = self.ir
        program = numpy_program = self._numpy_program(key, feeds)
        concrete, order, shapes = program.concrete, program.order, program.shapes
        if self._scalar and feeds is not None and scalarize.eligible(concrete, order, shapes):
            program = _maybe_scalar(concrete, order, self._param_ids, shapes, program, feeds)
        if self._backend == "numba" and program is numpy_program:
            # (a plan that runs as scalar code never needs the interpreter, nor its compile)
            from .lower.numba_backend import fused_program
            fused, seconds = fused_program(concrete, order, self._param_ids, ir.inputs, shapes)
            self._backend_seconds += seconds
            if fused is not None:               # else no region gains from a kernel: the numpy plan runs
                fused.shapes = shapes
                program = fused
        if len(self._plans) >= self.MAX_PLANS:
            self._plans.pop(next(iter(self._plans)))
        self._plans[key] = program
        self._last = program
        return program

    def _numpy_program(self, key, feeds):
        """The straight-line numpy plan for feed shapes ``key`` (not cached here)."""
        ir, order = self.ir, self._order
        shapes = concrete_shapes(ir, order, key, [f.dtype for f in feeds] if feeds is not None else None)
        concrete = Graph(specialize(ir, order, shapes), ir.outputs, ir.updates, ir.inputs)
        concrete, order = skip_identities(concrete, order)
        batched = batching.batch(concrete, order, dict(shapes)) if self._memory_planning else None
        if batched is not None:
            memory = plan_memory(batched.graph, batched.order, batched.shapes, True, batched.fixed_out,
                                 batched.nbytes)
            program = generate(batched.graph, batched.order, self._param_ids, ir.inputs, memory)
            program.batched, program.folds, program.scans = len(batched.groups), len(batched.folds), len(batched.scans)
        else:
            memory = plan_memory(concrete, order, shapes, enable=self._memory_planning)
            program = generate(concrete, order, self._param_ids, ir.inputs, memory)
        program.shapes, program.concrete, program.order = shapes, concrete, order
        return program

    def _feeds(self, args, kwargs):
        inputs = self._inputs
        if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
            return self._feeds_from_dict(args[0])
        if kwargs:
            if args:
                raise FeedError("give the feeds either positionally or by name, not both")
            return self._feeds_from_dict(kwargs)
        if args and not self._positional:
            names = ", ".join(repr(n.label()) for n in inputs)
            raise FeedError(f"this function was compiled with inputs=None: feed its placeholders ({names}) "
                            "by dict or by name, or compile with inputs=[...] to fix a positional order")
        if len(args) != len(inputs):
            names = ", ".join(repr(n.label()) for n in inputs)
            missing = "; ".join(f"missing feed for placeholder {n.label()!r} (expected shape {format_shape(n.shape)}, "
                                f"dtype {n.dtype})" for n in inputs[len(args):])
            raise FeedError(f"expected {len(inputs)} feeds ({names}) in inputs order, got {len(args)}"
                            + (f": {missing}" if missing else ""))
        return [check_feed(node, value) for node, value in zip(inputs, args)]

    def _feeds_from_dict(self, feed_dict):
        given = {}
        for key, value in feed_dict.items():
            node = self._by_key.get(key) if isinstance(key, (Tensor, str)) else None
            if node is None:
                what = key.label() if isinstance(key, Tensor) else key
                known = ", ".join(repr(n.label()) for n in self._inputs)
                raise FeedError(f"{what!r} is not an input placeholder of this function (inputs: {known})")
            if node.id in given:
                raise FeedError(f"placeholder {node.label()!r} is fed twice")
            given[node.id] = value
        missing = [n.label() for n in self._inputs if n.id not in given]
        if missing:
            detail = "; ".join(f"{n.label()!r} expects shape {format_shape(n.shape)} dtype {n.dtype}"
                               for n in self._inputs if n.id not in given)
            raise FeedError(f"missing feed for placeholder {', '.join(map(repr, missing))}: {detail}")
        return [check_feed(node, given[node.id]) for node in self._inputs]

    def _assign(self, new_values, outputs, program, feeds=()):
        if not self._handed_over(new_values, outputs, program):
            self._assign_checked(new_values, outputs, program, feeds)

    def _handed_over(self, new_values, outputs, program) -> bool:
        """The training step's case, without the general checks: every new value is still in the
        workspace buffer the plan wrote it to, and no output shows that memory. Such a buffer is the
        plan's own (fresh, or a replaced value nothing else referred to), so it is of the parameter's shape
        and dtype, and neither a feed's nor another parameter's: it can become the parameter's as it is."""
        handoff, namespace = program.handoff, program.namespace
        if len(handoff) != len(self._updates):
            return False
        checked, buffers = [], set()
        for param, k in self._updates:
            value = new_values[k]
            if namespace[handoff[k]] is not value:
                return False
            buffers.add(id(value))
            checked.append((param, k, value))
        for o in outputs:
            if id(o) in buffers or (type(o) is np.ndarray and o.base is not None and id(o.base) in buffers):
                return False
        if len(buffers) != len(handoff):
            return False
        self._put(checked, program)
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
        checked = []
        for param, k in self._updates:
            value = new_values[k]
            if type(value) is not np.ndarray or value.shape != param.shape or value.dtype != param.dtype:
                value = self._conform(param, value)
            if id(value) in held or value.base is not None or not value.flags.writeable:
                value = value.copy()
            held.add(id(value))
            checked.append((param, k, value))
        self._put(checked, program)

    @staticmethod
    def _put(checked, program):
        """Give each parameter its new value. Where the plan wrote that value into one of its workspace
        buffers, the buffer now belongs to the parameter, and the replaced array takes its place if nothing
        else can see it (the caller, a view, another parameter); else the plan gets a new buffer."""
        handoff, namespace = program.handoff, program.namespace
        probe = object()        # referred to by this frame only: the count `old` must match to be alone
        alone_count = sys.getrefcount(probe) if _REFCOUNTS else -1
        for param, k, value in checked:
            old = param._value
            param._value = value
            name = handoff.get(k)
            if name is None or namespace[name] is not value:
                continue
            if sys.getrefcount(old) == alone_count and type(old) is np.ndarray and old.base is None:
                flags = old.flags
                if flags.c_contiguous and flags.writeable:
                    namespace[name] = old
                    continue
            namespace[name] = np.empty_like(value)

    @staticmethod
    def _conform(param, value):
        value = np.asarray(value)
        if value.shape != param.shape:
            try:
                value = np.broadcast_to(value, param.shape)
            except ValueError:
                raise ExecutionError(f"update of parameter {param.label()!r}: the new value has shape "
                                     f"{format_shape(value.shape)}, expected "
                                     f"{format_shape(param.shape)}") from None
        if value.dtype != param.dtype:
            value = value.astype(param.dtype)
        return value

    def _explain(self, err, program):
        tb = err.__traceback__
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "<staticgrad>":
                line = tb.tb_lineno
            tb = tb.tb_next
        node = self.ir.nodes.get(program.line_nodes.get(line))
        if node is None:
            return ExecutionError(f"compiled function failed: {type(err).__name__}: {err}")
        inputs = ", ".join(format_shape(self.ir.nodes[i].shape) for i in node.inputs)
        return ExecutionError(f"{node.op} (built at {node.source}) failed at run time on inputs of static "
                              f"shapes {inputs}: {type(err).__name__}: {err}")

    def trace(self, feeds, **kwargs):
        """Print the backward sweep on ``feeds`` as a table (node, rule, contributions, fork sums);
        returns a staticgrad.Trace."""
        from .explain.trace import trace
        return trace(self, feeds, **kwargs)

    def run_batches(self, batches, progress=None, desc=None, name="loss"):
        """Call this function on every batch (see staticgrad.data.run_batches)."""
        from .data import run_batches
        return run_batches(self, batches, progress=progress, desc=desc, name=name)

    # ------------------------------------------------------------------ looking inside
    @property
    def source(self) -> str:
        """The generated executor code: the plan for the latest feed shapes; before any call, the numpy plan
        for the inputs' static shapes (memory planning and all), or the shape-generic code where a size is
        unknown."""
        if self._last is not None:
            return self._last.source
        if self._preview is None:
            key = tuple(n.shape for n in self._inputs)
            if any(None in shape for shape in key):
                self._preview = generate(self.ir, self._order, self._param_ids, self.ir.inputs)
            else:
                self._preview = self._numpy_program(key, None)
        return self._preview.source

    @property
    def graph(self):
        """The optimized graph as a networkx.DiGraph (node attributes: op, shape, dtype, role, ...)."""
        if self._graph is None:
            self._graph = self.ir.to_networkx()
        return self._graph

    @property
    def inputs(self):
        return [n.tensor for n in self._inputs]

    def parameters(self) -> list:
        """The parameters this function reads or updates, in graph order (``.value`` is each one's array);
        after ``sg.load`` these are the fresh parameters holding the saved values."""
        return list(self._params)

    def report(self) -> Report:
        """What each pass did (``.rows``), plus the plans built so far and the memory of the latest one."""
        summary = {"nodes": len(self.ir.nodes), "ops": dict(sorted(self.ir.op_counts().items())),
                   "plans": len(self._plans), "backend": self._backend}
        if self._last is not None:
            summary["program"] = "scalar" if isinstance(self._last, ScalarProgram) else self._backend
        if self._backend == "numba":
            summary["numba_compile_seconds"] = round(self._backend_seconds, 3)
            fused = getattr(self._last, "fallback", self._last)
            summary["fused_regions"] = getattr(fused, "regions", 0)
        for key, attr in (("batched_groups", "batched"), ("running_sums", "folds"), ("scans", "scans")):
            if getattr(self._last, attr, 0):        # what the latest numpy plan computes in one call each
                summary[key] = getattr(self._last, attr)
        memory = self._last.memory if self._last is not None else None
        if memory is not None:
            summary.update({"peak_bytes": memory.peak_planned, "peak_bytes_unplanned": memory.peak_unplanned,
                            "workspace_slots": len(memory.slots), "in_place": memory.inplace,
                            "plan_shapes": [self._last.shapes[i] for i in self.ir.inputs]})
        from .passes import finish_rows
        return Report(finish_rows(self._rows), summary)

    def to_dot(self, stage="optimized", **kwargs):
        from .explain.dot import to_dot
        return to_dot(self, stage=stage, **kwargs)

    def __repr__(self):
        names = ", ".join(n.label() for n in self._inputs)
        return f"<staticgrad.Function({names}) {len(self.ir.nodes)} nodes>"


