"""Turn a scheduled graph into straight-line Python source over numpy kernels.

The generated ``run`` takes the feeds positionally, reads each parameter's current value once, computes
every node in schedule order, drops each intermediate right after its last use, and returns the outputs
and the new parameter values. It does no graph work: kernels, constants and attributes are pre-bound.
With a memory plan, results go into workspace buffers through ``out=`` (allocated once per plan).
"""
from __future__ import annotations

import keyword
import re

import numpy as np

from ..ops.registry import BROADCAST, REGISTRY, VIEW, is_a
from ..tensor import LEAVES, VARIABLES
from .numerics import all_finite, checked

_LITERAL_TYPES = (bool, int, float, str, type(None))
_KEYWORD_OUT = (np.maximum, np.minimum)      # numpy deprecates a positional out for these two
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")
_RESERVED = re.compile(r"^[vcawkr]\d+$|^[a-z_0-9]+_\d+$")   # the shapes of generated names


def _is_literal(value) -> bool:
    if isinstance(value, _LITERAL_TYPES):
        return not (isinstance(value, float) and not np.isfinite(value))
    if isinstance(value, tuple):
        return all(_is_literal(v) for v in value)
    return False


def identifier(name, taken) -> str | None:
    if not name:
        return None
    name = re.sub(r"\W", "_", name)
    if not name.isidentifier() or keyword.iskeyword(name) or name in taken or _RESERVED.match(name):
        return None
    return name


class Program:
    """Generated source, the namespace it runs in, and the line -> node map used to explain failures.

    ``handoff`` maps an update's index to the namespace name of the workspace buffer its new value is
    written into: after a call that buffer is the parameter's, and the caller must rebind the name.
    ``stats`` counts what the plan computes in one call each (batched groups, running sums, scans,
    fused regions). ``code`` is the source that runs (``source`` may go on with its loops' bodies, for
    reading), ``workspace`` the namespace names of its workspace buffers; ``run.program`` is the program.
    """

    def __init__(self, source, namespace, line_nodes, memory=None, handoff=None, workspace=()):
        self.source, self.namespace, self.line_nodes, self.memory = source, namespace, line_nodes, memory
        self.code, self.workspace = source, tuple(workspace)
        self.handoff = handoff or {}
        self.kind = "numpy"
        self.stats = {}
        self.shapes = None
        exec(compile(source, "<staticgrad>", "exec"), namespace)
        self.run = namespace["run"]
        self.run.program = self         # (a loop's runner holds only its body's run: saving finds the body)


class _Names:
    """Pre-bound globals of the generated module: one name per distinct kernel, constant or attribute."""

    def __init__(self):
        self.namespace = {"np": np}
        self._by_id, self._bound = {}, {}

    def bind(self, prefix, value):
        # Keyed by id(value) in one dict per prefix: a plan binds one constant per batched row (millions in
        # a huge one), and a (prefix, id) tuple per constant weighs more than the entry itself.
        bound = self._bound.get(prefix)
        if bound is None:
            bound = self._bound[prefix] = {}
        name = bound.get(id(value))
        if name is None:
            name = bound[id(value)] = f"{prefix}{len(self.namespace)}"
            self.namespace[name] = value
        return name

    def kernel(self, op, kernel):
        name = self._by_id.get(("kernel", op, id(kernel)))     # (asked once per node: the prefix only once)
        if name is not None:
            return name
        return self._named(("kernel", op, id(kernel)), re.sub(r"[^a-z0-9_]", "_", op.lower()) + "_", kernel)

    def _named(self, key, prefix, value):
        name = self._by_id.get(key)
        if name is None:
            name = f"{prefix}{len(self.namespace)}"
            self.namespace[name] = value
            self._by_id[key] = name
        return name


class PlanFacts:
    """What a plan knows about its values, as an op's ``fast_kernel`` hook may ask it."""

    def __init__(self, nodes, memory):
        self.nodes, self.memory = nodes, memory

    def may_broadcast(self, i) -> bool:
        """Whether value ``i`` may be a view with a step of 0: a broadcast, or a view of one."""
        node = self.nodes[i]
        while True:
            if is_a(node, BROADCAST):
                return True
            if not node.inputs or not REGISTRY[node.op].has(VIEW):
                return False    # a fresh result, a C-ordered feed, a parameter's or constant's own array
            node = self.nodes[node.inputs[0]]

    def fixed_scalar(self, i):
        """The value of a constant of one real number no call can change, else None. (Batching and scans
        turn rows of their stacked buffers into "constant" nodes too: writable views, filled at run time.)"""
        node = self.nodes[i]
        value = node.value
        if node.op != "constant" or np.size(value) != 1 or np.asarray(value).dtype.kind not in "biuf":
            return None
        if isinstance(value, np.ndarray) and (value.base is not None or value.flags.writeable):
            return None
        return float(np.asarray(value).reshape(()))

    def slot(self, i):
        """(shape, dtype) of the workspace buffer value ``i`` is written into, or None."""
        memory = self.memory
        if memory is None or i not in memory.slot or i in memory.fixed_out:
            return None
        shape, dtype = memory.slots[memory.slot[i]]
        return shape, np.dtype(dtype)

    def dtype(self, i):
        return self.nodes[i].dtype


def kernel_for(nodes, node, memory):
    """The kernel a plan calls for ``node``: its op's, or a cheaper one its ``fast_kernel`` hook picks with
    what the plan knows (sparing per-call checks a training step need not pay)."""
    opdef = REGISTRY[node.op]
    if opdef.fast_kernel is not None:
        fast = opdef.fast_kernel(node, PlanFacts(nodes, memory))
        if fast is not None:
            return fast
    return opdef.kernel


def generate(graph, order, params, inputs, memory=None, fused=(), writer=None, numerics=None) -> Program:
    """Source for ``graph``'s nodes in ``order``; ``params``/``inputs`` are leaf node ids in call order.

    ``memory`` (a memory.MemoryPlan) sends results into workspace slots with ``out=``. ``fused`` lists
    (kernel, fuse.Region) pairs: each region's nodes are computed by one kernel call, made where the
    region's last node stands (its nodes are consecutive in ``order``). ``writer``: the class that writes
    the program (default: the source writer; ``interpret.StepWriter`` writes steps for a loop to run).
    ``numerics`` (a numerics.Reporter) checks every float feed, parameter and value as soon as it exists.
    """
    writer = (writer or Writer)(graph, order, memory, fused, numerics)
    writer.header(params, inputs)
    for step, i in enumerate(order):
        writer.node(step, i)
    return writer.finish()


class Call:
    """One kernel call of a plan: ``var = kernel(*args, **attrs, out=out)``, by names of the generated
    module (attrs: (key, literal value, None) or (key, None, the bound value's name))."""

    __slots__ = ("var", "kernel", "args", "attrs", "out", "positional")

    def __init__(self, var, kernel, args, attrs, out, positional):
        self.var, self.kernel, self.args, self.attrs = var, kernel, args, attrs
        self.out, self.positional = out, positional


class Writer:
    """The lines of one generated ``run`` and the names they use."""

    def __init__(self, graph, order, memory, fused, numerics=None):
        self.graph, self.nodes, self.memory = graph, graph.nodes, memory
        self.ns = _Names()
        self.numerics = numerics
        if numerics is not None:
            self.ns.namespace.update(finite=all_finite, bad=numerics)
        self.names, self.taken = {}, set(self.ns.namespace) | {"run", "P"}
        self.lines, self.line_nodes = [], {}
        self.counter, self.temps = 0, set()
        self.region_end, self.region_at = {}, {}
        for kernel, region in fused:
            self.region_at[region.nodes[-1]] = (kernel, region)
            for i in region.nodes:
                self.region_end[i] = region.nodes[-1]
        self.last_use = last_use = {}
        nodes, region_end = self.nodes, self.region_end
        # (a map of every step's position only where fused regions need one: a plan of millions of nodes)
        step_of = {i: k for k, i in enumerate(order)} if region_end else None
        for step, i in enumerate(order):
            at = step_of[region_end[i]] if region_end and i in region_end else step
            for j in nodes[i].inputs:
                last_use[j] = at
        self.keep = set(graph.outputs) | {e for _, e in graph.updates}
        self.paired = _pairs(self.nodes, order, memory, self.region_end) if numerics is None else {}
        handed = set(memory.handoff) if memory is not None else set()
        self.updated = {e: p for k, (p, e) in enumerate(graph.updates) if k in handed}

    def header(self, params, inputs):
        nodes, arg_names = self.nodes, []
        for k, i in enumerate(inputs):
            name = identifier(nodes[i].name, self.taken) or _unused(f"in{k}", self.taken)
            self.taken.add(name)
            self.names[i] = name
            arg_names.append(name)
        self.lines.append(f"def run({', '.join(arg_names)}):")
        self.ns.namespace["P"] = [nodes[i].tensor for i in params]
        for k, i in enumerate(params):
            name = identifier("p_" + (nodes[i].name or str(k)), self.taken) or f"p{k}"
            self.taken.add(name)
            self.names[i] = name
            self.load_param(k, name, i)
        for i in list(inputs) + list(params):
            self.check(i)
        self.slots = {}
        if self.memory is not None:
            for k, (shape, dtype) in enumerate(self.memory.slots):
                self.slots[k] = self.ns.bind("w", np.empty(shape, np.dtype(dtype)))

    def load_param(self, k, name, i):
        self.emit(self.param_line(k, name, i), i)

    def param_line(self, k, name, i):
        return f"    {name} = P[{k}]._value{comment(self.nodes[i])}"

    def emit(self, line, node_id=None):
        self.lines.append(line)
        if node_id is not None:
            self.line_nodes[len(self.lines)] = node_id

    def fresh(self, i):
        """A new name for node ``i``'s value, dropped after its last use."""
        self.counter += 1
        self.names[i] = name = f"v{self.counter}"
        self.temps.add(name)
        return name

    def drop_dead(self, read, step):
        """``del`` the intermediates whose last reader ran at ``step``."""
        dead = [self.names[j] for j in dict.fromkeys(read)
                if self.last_use.get(j) == step and j not in self.keep and self.names[j] in self.temps]
        if dead:
            self.lines.append(f"    del {', '.join(dead)}")

    def node(self, step, i):
        node = self.nodes[i]
        if node.op in VARIABLES:
            return
        if i in self.paired:
            self.pair(step, i, node)
        elif node.op == "constant":
            self.names[i] = self.ns.bind("c", node.value)
        elif i in self.region_end:
            self.region(step, i)
        else:
            self.call(step, i, node)
            self.check(i)

    def check(self, i):
        """With check_numerics, the line that stops at node ``i``'s value if it is not all finite."""
        if self.numerics is not None and checked(self.nodes[i].dtype):
            name = self.names[i]
            self.emit(f"    if not finite({name}): bad({i}, {name})", i)

    def pair(self, step, i, node):
        pair = self.paired[i]
        if pair is not None:             # (else computed with its partner, earlier)
            kernel, both = pair
            outs = [self.fresh(j) for j in both]
            args = [self.names[j] for j in node.inputs]
            name = self.ns.bind(kernel.__name__.strip("_").removesuffix("kernel"), kernel)
            self.multi(i, outs, name, args, lambda: (
                f"    {outs[0]}, {outs[1]} = {name}({', '.join(args)}){comment(self.nodes[both[0]])}; one pass with:"
                f"{comment(self.nodes[both[1]])[3:]}"))
        self.drop_dead(node.inputs, step)

    def multi(self, i, outs, kernel, args, line):
        """Node ``i``'s line: ``outs`` (names) from one call of ``kernel`` on ``args``; ``line()`` is its text."""
        self.emit(line(), i)

    def region(self, step, i):
        if i not in self.region_at:
            return                       # computed inside its region's kernel
        kernel, region = self.region_at[i]
        if getattr(kernel, "writes_outputs", False):
            self.region_into(step, i, kernel, region)
            return
        outs = [self.fresh(j) for j in region.outputs]
        args = [self.names[j] for j in region.inputs]
        ops = ", ".join(dict.fromkeys(self.nodes[j].op for j in region.nodes))
        name = self.ns.bind('fused', kernel)
        self.multi(i, outs, name, args, lambda: f"    {', '.join(outs)}, = {name}({', '.join(args)})"
                                                f"  # fused loop over {len(region.nodes)} nodes: {ops}")
        self.drop_dead(region.inputs, step)

    def region_into(self, step, i, kernel, region):
        """A region whose compiled loop writes its outputs into the arrays it is given (the last
        arguments): a buffer of its own, a workspace slot, or an array made here."""
        args = []
        for j, how in zip(region.inputs, kernel.passing):
            name = self.names[j]
            if how == "literal":
                name = self.ns.bind("c", kernel.literal(self.nodes[j]))
            args.append({"float": f"float({name})", "item": f"float({name}.item())"}.get(how, name))
        outs = [self.destination(o, kernel) for o in region.outputs]
        outs = [name for o, name in zip(region.outputs, outs) if o not in kernel.over]
        ops = ", ".join(dict.fromkeys(self.nodes[j].op for j in region.nodes))
        name = self.ns.bind("fused", kernel.run)
        self.emit(f"    {name}({', '.join(args + outs)})  # fused loop over {len(region.nodes)} nodes: {ops}", i)
        self.drop_dead(region.inputs, step)

    def destination(self, o, kernel) -> str:
        """The name of the array a compiled region writes its output ``o`` into (then ``o``'s name)."""
        buffer = kernel.buffers.get(o)
        if buffer is not None:
            name = self.ns.bind("w", buffer)
        elif self.memory is not None and o in self.memory.slot:
            name = self.slots[self.memory.slot[o]]
        else:
            shape, dtype = kernel.outputs[o]
            name = self.fresh(o)
            self.emit(f"    {name} = np.empty({shape!r}, {self.ns.bind('dtype', np.dtype(dtype))})", o)
        self.names[o] = name
        return name

    def call(self, step, i, node):
        self.emit(self.call_line(i, node, self.call_parts(i, node)), i)
        self.drop_dead(node.inputs, step)

    def call_parts(self, i, node) -> Call:
        """What node ``i``'s line calls, with what, and where the result goes (names bound here)."""
        memory, ns = self.memory, self.ns
        self.counter += 1
        var = self.names[i] = f"v{self.counter}"
        own = node.meta.get("kernel") if node.meta else None    # a plan's own kernel (a scan, a gather) owns its buffer
        slot = memory.slot.get(i) if memory is not None else None
        out = self.slots[slot] if slot is not None else None
        if memory is not None and i in memory.fixed_out and own is None:
            out = ns.bind("r", memory.fixed_out[i])
        attrs = [(key, value, None) if _is_literal(value) else (key, None, ns.bind("a", value))
                 for key, value in node.attrs.items()] if node.attrs else []
        if memory is not None and i in memory.scratch:
            arrays = tuple(ns.namespace[self.slots[k]] for k in memory.scratch[i])
            attrs.append(("scratch", None, ns.bind("s", arrays)))
        kernel = kernel_for(self.nodes, node, memory)
        kernel_name = ns.bind(f"{own.name}_", own) if own is not None else ns.kernel(node.op, kernel)
        # positional out: ~10% cheaper per call on tiny arrays
        positional = isinstance(kernel, np.ufunc) and kernel not in _KEYWORD_OUT and not node.attrs
        if out is None and own is None:
            self.temps.add(var)
        return Call(var, kernel_name, [self.names[j] for j in node.inputs], attrs, out, positional)

    def call_line(self, i, node, call) -> str:
        args = list(call.args)
        args += [f"{key}={value!r}" if name is None else f"{key}={name}" for key, value, name in call.attrs]
        if call.out is not None:
            args.append(call.out if call.positional else f"out={call.out}")
        note = ""
        if i in self.updated:
            note = _UNPRINTABLE.sub("?", f"; {call.out} becomes {self.nodes[self.updated[i]].label()}'s array")
        return f"    {call.var} = {call.kernel}({', '.join(args)}){comment(node)}{note}"

    def results(self):
        """([(output name, whether it is returned as a copy)], [update names], handoff)."""
        graph, nodes = self.graph, self.nodes
        outs, returned = [], set()
        for o in graph.outputs:
            base = _storage(nodes, o)
            # Each output is the caller's own array: never a feed, a parameter or a constant we hold, nor
            # memory already handed out as another output (passes may merge outputs or drop copies).
            fresh = base.op not in LEAVES and base.id not in returned
            outs.append((self.names[o], not fresh))
            returned.add(base.id)
        memory = self.memory
        handoff = {k: self.slots[slot] for k, slot in memory.handoff.items()} if memory is not None else {}
        return outs, [self.names[e] for _, e in graph.updates], handoff

    def return_line(self, outs, ups):
        returned = ", ".join(f"np.array({name})" if copy else name for name, copy in outs)
        return f"    return [{returned}], [{', '.join(ups)}]"

    def finish(self) -> Program:
        outs, ups, handoff = self.results()
        self.lines.append(self.return_line(outs, ups))
        return Program("\n".join(self.lines) + "\n", self.ns.namespace, self.line_nodes, self.memory, handoff,
                       self.slots.values())


def _unused(name, taken):
    """``name``, or with a suffix when a user's name took it (a placeholder named "in1")."""
    k = 0
    while name in taken:
        k += 1
        name = f"{name}x{k}"
    return name


def _pairs(nodes, order, memory, fused):
    """Nodes computed together by a kernel their ops pair: the earlier one -> (kernel, (a, b)), the later
    -> None.

    Both must read the same inputs with the same attributes and return fresh arrays (no planned ``out=``),
    so computing the later one early cannot overwrite memory still in use.
    """
    partners = {}          # op -> [(the other op, kernel, whether this op's result comes first)]
    for name, opdef in REGISTRY.items():
        for other, kernel in opdef.paired.items():
            partners.setdefault(name, []).append((other, kernel, True))
            partners.setdefault(other, []).append((name, kernel, False))
    seen, paired = {}, {}
    for i in order:
        node = nodes[i]
        if node.op not in partners or i in fused or (memory is not None and (
                i in memory.slot or i in memory.fixed_out)):
            continue
        key = (tuple(node.inputs), repr(sorted(node.attrs.items())))
        for other, kernel, first in partners[node.op]:
            j = seen.get((other, key))
            if j is not None and j not in paired:
                paired[j], paired[i] = (kernel, (i, j) if first else (j, i)), None
                break
        seen.setdefault((node.op, key), i)
    return paired


def _storage(nodes, i):
    """The node whose memory node ``i``'s value lives in (following views back to their source)."""
    node = nodes[i]
    while node.inputs and REGISTRY[node.op].has(VIEW):
        node = nodes[node.inputs[0]]
    return node


def comment(node) -> str:
    what = f"{node.op} {node.name}" if node.name else node.op
    if node.rule and node.adjoint_of is None:           # a plan's own node: what it stands for
        what += f" ({node.rule})"
    role = "" if node.role == "forward" else f" [{node.role}]"
    if node.adjoint_of is not None and node.role == "backward":
        what_for = {"sum at fork": "sum at the fork of", "seed": "seed: the gradient arriving at"}.get(
            node.rule, f"VJP of {node.rule}")
        role = f" [backward: {what_for} node {node.adjoint_of}]"
    # Names and file names are user text: keep them on the comment's line, whatever they contain.
    return _UNPRINTABLE.sub("?", f"  # {what}{role} @ {node.source}")
