"""Rolling: a huge graph that repeats one stretch of ops many times over, held as a scan of one copy.

A Python ``for`` that builds ``x = tanh(x * c + d)`` a million times makes a million-node graph. Every node
of straight-line code costs tens of microseconds once (differentiating, the passes, lowering, the step
list), a minute or more at that size. Recognised as one stretch of ops copied again and again, the graph
is held as a ``scan`` over one copy: those costs are paid for the copy, and the loop runs it step by step
(a slower call than straight-line code, which is why graphs under ``MIN_NODES`` forward op nodes are left as
they are). ``sg.grad`` and ``sg.compile`` roll a graph before they work on it.

What is recognised, in creation order: at least ``MIN_STEPS`` copies of a stretch of at most
``MAX_PERIOD`` op nodes, equal in op, attributes, dtype, shape and inputs, where each copy reads only
itself, the copy before it (its carries) and values made before the stretch or constants equal in every
copy (weights: read every step). Values of the last copy that later nodes read come out as the scan's
final carries; a stretch that a later node reads in the middle is cut short there. Never rolled: random
draws, ops with state (a batch norm's statistics), loops, eager tensors, a function's outputs (they stay
values of the graph), and a tensor a gradient is asked for with all it reads (it must stay the tensor it
is). Copies are told apart by signatures (op, attributes, dtype, shape, and each input by its distance
back when it is read only close by, by value when it is a small constant, else by identity), compared
shifted by 1 to ``MAX_PERIOD`` with numpy. Forward values come from the same ops in the same order (the
same bits); the gradient of a value read every step is summed in the reverse loop's order.
"""
from __future__ import annotations

import numpy as np

from ..eager import is_eager
from ..effects import has_updates
from ..graph import ancestors
from ..ops.registry import REGISTRY, as_tensor
from ..tensor import NO_ATTRS, building
from .body import clone, copy_tensor
from .scan import scan

MIN_NODES = 200_000     # forward op nodes a graph holds before rolling is tried
MIN_STEPS = 1_000       # copies a stretch needs to be rolled
MAX_PERIOD = 64         # the most op nodes a copy may hold
_SMALL = 16             # constants of at most this many elements are told apart by value
TITLE = "rolled stretch of {} ops"      # a rolled loop's body's name (fn.report() counts them by it)


def is_rolled(body) -> bool:
    """Whether a loop's ``body`` is a rolled stretch's (see above)."""
    return body.name.startswith(TITLE.split("{")[0])


def roll(tensors, found, keep=()):
    """(``tensors``, ``found``) with the graph's long repeated stretches rolled into scans (see above):
    each tensor that reads one rebuilt on the scan's results. ``found`` is ``ancestors(tensors)``;
    ``keep``: tensors that must stay in the graph as they are, with all they read (those a gradient is
    asked for). Both come back as they are when nothing is rolled."""
    # A tensor a gradient is asked of must stay the very tensor it is, so nothing it reads may change;
    # the outputs may be rebuilt (the same values), but are never rolled away.
    frozen = ancestors([t for t in keep if t.inputs])
    pinned = set(frozen) | {t.id for t in tensors}
    twin = {} if frozen else _remembered(found, pinned)
    if twin:
        tensors, found = _rebuilt(tensors, found, twin)
    if len(found) < MIN_NODES or _forward_ops(found) < MIN_NODES:
        return tensors, found
    ops = sorted((t for t in found.values() if t.inputs), key=_id)
    index = {t.id: i for i, t in enumerate(ops)}
    last_reader = _last_readers(ops, index)
    codes = _signatures(ops, index, last_reader, pinned)
    twin, done = {}, 0
    for start, period, steps in _periodic(codes):
        clone(ops[done:start], twin, ())        # (what this stretch reads may read an earlier one)
        done = _rolled(ops, index, last_reader, (start, period, steps), twin)
    if not twin:
        return tensors, found
    return _rebuilt(tensors, found, twin)


def _id(t):
    return t.id


def _forward_ops(found) -> int:
    """The forward op nodes among ``found``: what the line is drawn on, so that compile, given a graph and
    the gradients sg.grad did not roll (its forward under the line), does not look again for nothing."""
    n = 0
    for t in found.values():
        if t.inputs and t.role == "forward":
            n += 1
    return n


def _remembered(found, pinned):
    """{id: its rolled form} for the tensors of ``found`` an earlier roll replaced (sg.grad rolled what
    compile is now given), unless a pinned tensor lies in the stretch they came from."""
    twin = {}
    for t in found.values():
        meta = t.meta
        if meta is not None and "rolled_as" in meta:
            new, lo, hi = meta["rolled_as"]
            if not any(lo <= i <= hi for i in pinned):
                twin[t.id] = new
    return twin


def _rebuilt(tensors, found, twin):
    """``tensors`` and their ancestors with the tensors of ``twin`` ({id: tensor}) in place of those ids."""
    first = min(twin)
    tensors = clone([found[i] for i in sorted(found) if i > first], twin, tensors)   # (readers come later)
    return tensors, ancestors(tensors)


# ------------------------------------------------------------------ finding the stretches
def _last_readers(ops, index):
    """For each op node, the position among ``ops`` of the last node that reads it (-1: none)."""
    last_reader = np.full(len(ops), -1, dtype=np.int64)
    for i, t in enumerate(ops):
        for x in t.inputs:
            j = index.get(x.id)
            if j is not None:
                last_reader[j] = i
    return last_reader


def _near(j, last_reader) -> bool:
    """Whether the op node at ``j`` (None: a leaf) is only read close by (a copy's own values and carries,
    read by distance); a value read far on (a weight computed once, read every step) is read by identity."""
    return j is not None and last_reader[j] - j <= MAX_PERIOD


def _signatures(ops, index, last_reader, pinned):
    """An int per op node, equal for nodes that would be equal in two copies of a stretch."""
    codes, table = [], {}
    for i, t in enumerate(ops):
        if _unrollable(t, pinned):
            sig = ("once", t.id)
        else:
            keys = [_input_key(x, i, index.get(x.id), last_reader) for x in t.inputs]
            sig = (t.op, _attrs_key(t.attrs), t.dtype, t.shape, *keys)
        codes.append(table.setdefault(sig, len(table)))
    return np.asarray(codes, dtype=np.int64)


def _input_key(x, i, j, last_reader):
    """How node ``i`` reads ``x`` (``j``: x's position among the op nodes, None for a leaf): by distance
    when x is read only close by, by value when it is a small constant, else by identity."""
    if _near(j, last_reader):
        return i - j
    if x.op == "constant" and np.size(x.value) <= _SMALL:
        return ("constant", x.dtype, x.shape, np.asarray(x.value).tobytes())
    return ("tensor", x.id)


def _attrs_key(attrs):
    if attrs is NO_ATTRS or not attrs:
        return ()
    key = tuple(sorted(attrs.items()))
    try:
        hash(key)
    except TypeError:
        return object()         # (attributes that cannot be compared: this node repeats nothing)
    return key


def _unrollable(t, pinned) -> bool:
    opdef = REGISTRY[t.op]
    if opdef.bodies or opdef.draws is not None or t.dtype.kind == "O" or t.id in pinned:
        return True
    if has_updates(t) or is_eager(t):
        return True
    return any(x.dtype.kind == "O" for x in t.inputs)


def _periodic(codes):
    """[(start, period, copies)] of the stretches that repeat at least MIN_STEPS times, none overlapping
    another; shorter periods first (a stretch repeating with period p repeats with 2p too)."""
    n, out = len(codes), []
    taken = np.zeros(n, dtype=bool)
    for p in range(1, MAX_PERIOD + 1):
        if n < p * MIN_STEPS:
            break
        same = np.concatenate(([0], (codes[:-p] == codes[p:]).view(np.int8), [0]))
        edges = np.diff(same)
        for lo, hi in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
            steps = (int(hi - lo) + p) // p      # (node i equals node i + p for lo <= i < hi)
            end = int(lo) + steps * p
            if steps >= MIN_STEPS and not taken[lo:end].any():
                taken[lo:end] = True
                out.append((int(lo), p, steps))
    return sorted(out)


# ------------------------------------------------------------------ one stretch as a scan
def _rolled(ops, index, last_reader, stretch, twin):
    """Roll ``stretch`` (start, period, copies) into a scan: ``twin`` gets {id: final carry} for the values
    of its last copy that later nodes read (reading what ``twin`` already replaces). Returns where the
    rolled copies end, or ``start`` where it cannot be rolled (a copy reading two copies back, a start of
    unknown shape)."""
    start, period, steps = stretch
    steps = _cut(last_reader, start, period, steps)
    end = start + steps * period
    template = ops[start:start + period]
    wiring = _wiring(template, index, last_reader, start, twin)
    read_after = [q for q in range(period) if last_reader[end - period + q] >= end]
    if steps < MIN_STEPS or wiring is None or not read_after:
        return start
    reads, carried = wiring
    slots = sorted(carried | set(read_after))
    init = _init(ops, start, period, slots, carried, template)
    if init is None:
        return start
    final = _scan(template, reads, slots, [twin.get(x.id, x) for x in init], steps)
    lo, hi = ops[start].id, ops[end - 1].id
    for q in read_after:
        last = ops[end - period + q]
        twin[last.id] = final[slots.index(q)]
        if last.meta is None:
            last.meta = {}
        last.meta["rolled_as"] = (twin[last.id], lo, hi)
    return end


def _cut(last_reader, start, period, steps):
    """The copies kept: up to the first copy something after the stretch reads (the last one, usually)."""
    end = start + steps * period
    outside = np.flatnonzero(last_reader[start:end - period] >= end)
    return steps if not len(outside) else int(outside[0]) // period + 1


def _wiring(template, index, last_reader, start, twin):
    """(per node of the first copy, where each input comes from: ("body", position), ("carry", position of
    the previous copy) or ("outer", tensor); the positions carried to the next copy), or None. Read as the
    signatures read it (``_input_key``): by distance, or else the same tensor every copy."""
    reads, carried, period = [], set(), len(template)
    for q, t in enumerate(template):
        row = []
        for x in t.inputs:
            j = index.get(x.id)
            k = start + q - j if _near(j, last_reader) else None
            if k is None:
                row.append(("outer", twin.get(x.id, x)))
            elif k <= q:
                row.append(("body", q - k))
            elif k <= q + period:
                carried.add(q - k + period)
                row.append(("carry", q - k + period))
            else:
                return None       # (a value carried over two copies)
        reads.append(row)
    return reads, carried


def _init(ops, start, period, slots, carried, template):
    """What each carry starts from: the node a copy before the first would have made there, or zeros for
    a value only read after the loop."""
    init = []
    for q in slots:
        like = template[q]
        if q in carried:
            first = ops[start - period + q]
            if first.shape != like.shape or first.dtype != like.dtype:
                return None
            init.append(first)
        elif None in like.shape:
            return None
        else:
            init.append(as_tensor(np.zeros(like.shape, like.dtype)))
    return init


def _scan(template, reads, slots, init, steps):
    """The final carries of a scan whose body is one copy of ``template``."""
    def step(carry, _):
        made = []
        for t, row in zip(template, reads):
            inputs = tuple(made[r] if kind == "body" else carry[slots.index(r)] if kind == "carry" else r
                           for kind, r in row)
            made.append(copy_tensor(t, inputs))
        return tuple(made[q] for q in slots), None

    with building(role="forward", source=template[0].source):
        final, _ = scan(step, tuple(init), length=steps)
    # (pictures and the generated source title the loop by its body: say it is the graph's own stretch)
    final[0].inputs[0].attrs["body"].name = TITLE.format(len(template))
    return final
