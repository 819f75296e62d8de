"""Turn a scheduled graph into straight-line Python source over numpy kernels.

The generated ``run`` takes the feeds positionally, reads each parameter's current value once, computes
every node in schedule order, drops each intermediate right after its last use, and returns the outputs
and the new parameter values. It does no graph work: kernels, constants and attributes are pre-bound.
With a memory plan, results go into workspace buffers through ``out=`` (allocated once per plan).
"""
from __future__ import annotations

import keyword
import math
import re

import numpy as np

from ..ops.elementwise import float_with_ints, where_else_zero
from ..ops.registry import PAIRED, REGISTRY, VIEW

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
    """

    def __init__(self, source, namespace, line_nodes, memory=None, handoff=None):
        self.source, self.namespace, self.line_nodes, self.memory = source, namespace, line_nodes, memory
        self.handoff = handoff or {}
        exec(compile(source, "<staticgrad>", "exec"), namespace)
        self.run = namespace["run"]


class _Names:
    """Pre-bound globals of the generated module: one name per distinct kernel, constant or attribute."""

    def __init__(self):
        self.namespace = {"np": np}
        self._by_id = {}

    def bind(self, prefix, value):
        key = (prefix, id(value))
        name = self._by_id.get(key)
        if name is None:
            name = f"{prefix}{len(self.namespace)}"
            self.namespace[name] = value
            self._by_id[key] = name
        return name

    def kernel(self, op, kernel=None):
        kernel = REGISTRY[op].kernel if kernel is None else kernel
        key = ("kernel", op, id(kernel))
        name = self._by_id.get(key)
        if name is None:
            name = f"{re.sub(r'[^a-z0-9_]', '_', op.lower())}_{len(self.namespace)}"
            self.namespace[name] = kernel
            self._by_id[key] = name
        return name


def _kernel_for(nodes, node, memory):
    """The kernel a plan calls for ``node``, chosen once with what the plan knows, to spare per-call checks
    a training step need not pay: numpy's own matmul where no operand can be a broadcast view (the op's
    kernel makes such an operand contiguous); where_else_zero for a where(cond, x, +0.0) over workspace
    buffers (a ReLU gradient)."""
    if node.op == "matmul" and not any(_may_broadcast(nodes, j) for j in node.inputs):
        return np.matmul
    if node.op == "where" and memory is not None and _else_plus_zero(nodes, node, memory):
        return where_else_zero
    return REGISTRY[node.op].kernel


def _else_plus_zero(nodes, node, memory):
    """Whether where(cond, x, y) is where(cond, x, +0.0) over float values the plan keeps in workspace
    buffers of its own shape and dtype (C-ordered by construction), its result in one too."""
    cond, x, y = node.inputs
    if not _fixed_real_scalar(nodes[y]):
        return False
    value = float(np.asarray(nodes[y].value).reshape(()))
    if value != 0.0 or math.copysign(1.0, value) < 0:
        return False
    slots = [memory.slot.get(i) for i in (cond, x, node.id)]
    if None in slots or node.id in memory.fixed_out:
        return False
    (c_shape, _), (x_shape, x_dtype), (shape, dtype) = (memory.slots[k] for k in slots)
    return (c_shape == x_shape == shape and np.dtype(x_dtype) == np.dtype(dtype) and float_with_ints(np.dtype(dtype))
            and np.dtype(nodes[cond].dtype) == np.bool_)


def _fixed_real_scalar(node) -> bool:
    """A constant of one real number that no call can change. (Batching and scans turn rows of their
    stacked buffers into "constant" nodes too: writable views, filled in at run time.)"""
    value = node.value
    if node.op != "constant" or np.size(value) != 1 or np.asarray(value).dtype.kind not in "biuf":
        return False
    return not isinstance(value, np.ndarray) or (value.base is None and not value.flags.writeable)


def _may_broadcast(nodes, i):
    """Whether value ``i`` may be a view with a step of 0: a broadcast, or a view of one."""
    node = nodes[i]
    while True:
        if node.op in ("broadcast_to", "broadcast_like"):
            return True
        if not node.inputs or not REGISTRY[node.op].has(VIEW):
            return False        # a fresh result, a C-ordered feed, a parameter's or constant's own array
        node = nodes[node.inputs[0]]


def generate(graph, order, params, inputs, memory=None, fused=()) -> Program:
    """Source for ``graph``'s nodes in ``order``; ``params``/``inputs`` are leaf node ids in call order.

    ``memory`` (a plan.MemoryPlan) sends results into workspace slots with ``out=``. ``fused`` lists
    (kernel, fuse.Region) pairs: each region's nodes are computed by one kernel call, made where the
    region's last node stands (its nodes are consecutive in ``order``).
    """
    nodes = graph.nodes
    ns = _Names()
    names, taken = {}, set(ns.namespace) | {"run", "P"}
    arg_names = []
    for k, i in enumerate(inputs):
        name = identifier(nodes[i].name, taken) or f"in{k}"
        taken.add(name)
        names[i] = name
        arg_names.append(name)

    lines = [f"def run({', '.join(arg_names)}):"]
    line_nodes = {}
    ns.namespace["P"] = [nodes[i].tensor for i in params]
    for k, i in enumerate(params):
        name = identifier("p_" + (nodes[i].name or str(k)), taken) or f"p{k}"
        taken.add(name)
        names[i] = name
        lines.append(f"    {name} = P[{k}]._value{comment(nodes[i])}")
        line_nodes[len(lines)] = i

    slots = {}
    if memory is not None:
        for k, (shape, dtype) in enumerate(memory.slots):
            slots[k] = ns.bind("w", np.empty(shape, np.dtype(dtype)))

    region_end, region_at = {}, {}
    for kernel, region in fused:
        region_at[region.nodes[-1]] = (kernel, region)
        for i in region.nodes:
            region_end[i] = region.nodes[-1]
    step_of = {i: k for k, i in enumerate(order)}
    last_use = {}
    for step, i in enumerate(order):
        for j in nodes[i].inputs:
            last_use[j] = step_of[region_end[i]] if i in region_end else step
    keep = set(graph.outputs) | {e for _, e in graph.updates}
    paired = _pairs(nodes, order, memory, region_end)
    handed = set(memory.handoff) if memory is not None else set()
    updated = {e: p for k, (p, e) in enumerate(graph.updates) if k in handed}
    counter, temps = 0, set()

    def drop_dead(read, step):           # intermediates whose last reader ran at ``step``
        dead = [names[j] for j in dict.fromkeys(read)
                if last_use.get(j) == step and j not in keep and names[j] in temps]
        if dead:
            lines.append(f"    del {', '.join(dead)}")

    for step, i in enumerate(order):
        node = nodes[i]
        if node.op in ("placeholder", "parameter"):
            continue
        if i in paired:
            pair = paired[i]
            if pair is None:             # computed with its partner, earlier
                drop_dead(node.inputs, step)
                continue
            kernel, both = pair
            for j in both:
                counter += 1
                names[j] = f"v{counter}"
                temps.add(names[j])
            args = ", ".join(names[j] for j in node.inputs)
            lines.append(f"    {names[both[0]]}, {names[both[1]]} = {ns.bind(kernel.__name__.strip('_').removesuffix('kernel'), kernel)}({args})"
                         f"{comment(nodes[both[0]])}; one pass with:{comment(nodes[both[1]])[3:]}")
            line_nodes[len(lines)] = i
            drop_dead(node.inputs, step)
            continue
        if node.op == "constant":
            names[i] = ns.bind("c", node.value)
            continue
        if i in region_end:
            if i not in region_at:
                continue                 # computed inside its region's kernel
            kernel, region = region_at[i]
            outs = []
            for j in region.outputs:
                counter += 1
                names[j] = f"v{counter}"
                temps.add(names[j])
                outs.append(names[j])
            args = [names[j] for j in region.inputs]
            ops = ", ".join(dict.fromkeys(nodes[j].op for j in region.nodes))
            lines.append(f"    {', '.join(outs)}, = {ns.bind('fused', kernel)}({', '.join(args)})"
                         f"  # fused loop over {len(region.nodes)} nodes: {ops}")
            line_nodes[len(lines)] = i
            drop_dead(region.inputs, step)
            continue
        counter += 1
        var = f"v{counter}"
        names[i] = var
        args = [names[j] for j in node.inputs]
        own = (node.meta or {}).get("kernel")      # a plan's own kernel (a scan, a gather) owns its buffer
        slot = memory.slot.get(i) if memory is not None else None
        out = slots[slot] if slot is not None else None
        if memory is not None and i in memory.fixed_out and own is None:
            out = ns.bind("r", memory.fixed_out[i])
        for key, value in node.attrs.items():
            args.append(f"{key}={value!r}" if _is_literal(value) else f"{key}={ns.bind('a', value)}")
        kernel = _kernel_for(nodes, node, memory)
        kernel_name = ns.bind(f"{own.name}_", own) if own is not None else ns.kernel(node.op, kernel)
        if out is not None:
            if isinstance(kernel, np.ufunc) and kernel not in _KEYWORD_OUT and not node.attrs:
                args.append(out)     # positional out: ~10% cheaper per call on tiny arrays
            else:
                args.append(f"out={out}")
        elif own is None:
            temps.add(var)
        note = _UNPRINTABLE.sub("?", f"; {out} becomes {nodes[updated[i]].label()}'s array") if i in updated else ""
        lines.append(f"    {var} = {kernel_name}({', '.join(args)}){comment(node)}{note}")
        line_nodes[len(lines)] = i
        drop_dead(node.inputs, step)

    outs, returned = [], set()
    for o in graph.outputs:
        base = _storage(nodes, o)
        # Each output is the caller's own array: never a feed, a parameter or a constant we hold, nor
        # memory already handed out as another output (passes may merge outputs or drop copies).
        fresh = base.op not in ("constant", "parameter", "placeholder") and base.id not in returned
        outs.append(names[o] if fresh else f"np.array({names[o]})")
        returned.add(base.id)
    outs = ", ".join(outs)
    ups = ", ".join(names[e] for _, e in graph.updates)
    lines.append(f"    return [{outs}], [{ups}]")
    handoff = {k: slots[slot] for k, slot in memory.handoff.items()} if memory is not None else {}
    return Program("\n".join(lines) + "\n", ns.namespace, line_nodes, memory, handoff)


def _pairs(nodes, order, memory, fused):
    """Nodes computed together by a PAIRED kernel: the earlier one -> (kernel, (a, b)), the later -> None.

    Both must read the same inputs with the same attributes and return fresh arrays (no planned ``out=``),
    so computing the later one early cannot overwrite memory still in use.
    """
    if not PAIRED:
        return {}
    wanted = {op for pair in PAIRED for op in pair}
    seen, paired = {}, {}
    for i in order:
        node = nodes[i]
        if node.op not in wanted or i in fused or (memory is not None and (
                i in memory.slot or i in memory.fixed_out)):
            continue
        key = (tuple(node.inputs), repr(sorted(node.attrs.items())))
        for (a, b), kernel in PAIRED.items():
            other = b if node.op == a else a if node.op == b else None
            j = seen.get((other, key))
            if j is not None and j not in paired:
                both = (j, i) if node.op == b else (i, j)
                paired[j], paired[i] = (kernel, both), None
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
