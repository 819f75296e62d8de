"""Reverse mode: the one reverse sweep, which ``sg.grad`` and eager ``backward()`` both run.

``grad`` builds the adjoint graph out of ordinary staticgrad ops; eager mode runs the same sweep over its
tape with values. The sweep is the only place that sums gradient contributions at forks and that
reduces a broadcast gradient back to the shape of the input it belongs to (``sum_to_shape``).

The order: every node after all of its consumers, and among the nodes ready, the earliest made first
(``networkx.lexicographical_topological_sort`` of the reversed graph, keyed by creation order). Eager
mode walks its tape with the same tie-break, so both add the contributions meeting at a fork in the
same order, and their gradients have the same bits.
"""
from __future__ import annotations

from collections.abc import Sequence

from . import stable
from .graph import ancestors, reverse_order
from .ops.broadcast import broadcast_to
from .ops.elementwise import cast
from .ops.reduce import sum as reduce_sum
from .ops.registry import REGISTRY, apply, as_tensor, broadcast_shapes
from .rewrite import rewrite_tensors
from .tensor import CONTEXT, GradError, Tensor, TensorLike, building, format_shape, gc_paused, user_frame


# ------------------------------------------------------------------ the sweep both modes run
class Mode:
    """What differs between the two runs of the sweep: which inputs need a gradient, how a VJP rule is
    run, where each node's total gradient goes, and whose VJP the new tensors belong to."""

    name = "grad"
    keeps_parts = False     # whether ``reached`` is given each node's terms (else None: they can go once added)

    def needs(self, x) -> bool:
        raise NotImplementedError

    def vjp(self, opdef, g, node, needs):
        if opdef.takes_needs:
            return opdef.vjp(g, node, *node.inputs, needs=needs, **node.attrs)
        return opdef.vjp(g, node, *node.inputs, **node.attrs)

    def reached(self, node, g, parts):
        """``node``'s total gradient ``g`` (summed from ``parts``, with ``keeps_parts``); returns a list to
        record its sends in (two ids a send: the input's, then its contribution's), or None."""
        return None

    def provenance(self, node):
        """(the tensor whose VJP this is, the rule's name) for tensors made by ``node``'s VJP."""
        return node, node.op


def reverse_sweep(order, seeds, mode: Mode):
    """Push ``seeds`` ([(tensor, its gradient)]) back through ``order`` (consumers before their inputs).

    Each node's contributions are summed as they arrive (the first as it is, then ``total + term``), so
    a compiled plan can drop each term once added; VJP results are reduced to their input's shape.
    """
    pending = {t.id: (s, [s] if mode.keeps_parts else None) for t, s in seeds}
    for node in order:
        entry = pending.pop(node.id, None)
        if entry is None:
            continue
        g, parts = entry
        sends = mode.reached(node, g, parts)
        if not node.inputs:
            continue
        opdef = REGISTRY[node.op]
        if opdef.vjp is None or node.dtype.kind not in "fcO":
            continue        # (an integer or boolean value carries no gradient: abs(x > 0) is a step)
        needs = [mode.needs(x) and x.dtype.kind in "fcO" for x in node.inputs]
        if any(needs):
            _check_real(node, needs, mode.name)
            _send(node, opdef, g, needs, mode, pending, sends)


def _check_real(node, needs, who):
    if node.dtype.kind == "c" or _complex_needed(node.inputs, needs):
        raise GradError(f"{who}: the gradient would pass through a complex value at {node.op} (made at "
                        f"{node.source}); the VJP rules are written for real values")


def _complex_needed(inputs, needs) -> bool:
    for x, n in zip(inputs, needs):      # (a loop, not any() over a generator: asked of every node)
        if n and x.dtype.kind == "c":
            return True
    return False


def _send(node, opdef, g, needs, mode, pending, sends):
    """Run ``node``'s VJP rule and add each needed input's contribution to what it has received so far."""
    adjoint_of, rule = mode.provenance(node)
    with building(role="backward", adjoint_of=adjoint_of, rule=rule, forward_source=node.source):
        if not _ours(opdef):
            CONTEXT.source = None            # a VJP written outside the package: its own lines
        grads = mode.vjp(opdef, g, node, needs)
        siblings = node.inputs if opdef.core_axes is not None else ()
        for x, gx, need in zip(node.inputs, grads, needs):
            if gx is None or not need:
                continue
            if isinstance(gx, Cotangents):
                _gather(x, gx, mode, pending)
                continue
            core = min(opdef.core_axes, x.ndim) if siblings else 0
            contribution = sum_to_shape(as_tensor(gx, like=x.dtype), x, siblings, core)
            if sends is not None:
                sends += (x.id, contribution.id)
            if x.id not in pending:
                pending[x.id] = (contribution, [contribution] if mode.keeps_parts else None)
                continue
            total, parts = pending[x.id]
            if parts is not None:
                parts.append(contribution)
            with building(adjoint_of=mode.provenance(x)[0], rule="sum at fork"):
                pending[x.id] = (total + contribution, parts)


_OURS = {}       # op name -> (its VJP, whether that is the package's own): asked once per node of a sweep


def _ours(opdef) -> bool:
    known = _OURS.get(opdef.name)
    if known is None or known[0] is not opdef.vjp:
        known = _OURS[opdef.name] = (opdef.vjp, (getattr(opdef.vjp, "__module__", None) or "").startswith(__package__))
    return known[1]


class Cotangents:
    """The gradient arriving at a node of several values (a loop's): {output index: tensor}, summed per
    index as its readers send their parts (a loop's outputs are read by ``loop_output`` nodes)."""

    __slots__ = ("parts",)

    def __init__(self, parts):
        self.parts = dict(parts)

    def __add__(self, other):
        parts = dict(self.parts)
        for k, g in other.parts.items():
            parts[k] = parts[k] + g if k in parts else g
        return Cotangents(parts)

    def get(self, k):
        return self.parts.get(k)

    @property
    def id(self):
        return None

    def __repr__(self):
        return f"Cotangents({sorted(self.parts)})"


def _gather(x, gx, mode, pending):
    """Add the parts ``gx`` to what a node of several values has received."""
    if x.id not in pending:
        pending[x.id] = (gx, [gx] if mode.keeps_parts else None)
        return
    total, parts = pending[x.id]
    if parts is not None:
        parts.append(gx)
    with building(adjoint_of=mode.provenance(x)[0], rule="sum at fork"):
        pending[x.id] = (total + gx, parts)


def sum_to_shape(g: Tensor, x: Tensor, siblings=(), core=0) -> Tensor:
    """Undo broadcasting: sum ``g`` over the axes along which ``x`` was stretched to ``g``'s shape.

    Decided on static shapes where they settle it. Where ``x`` has an unknown size that a sibling input
    of the same op could have stretched (the sibling's size there is not 1), only the run-time shapes
    can tell, and a ``sum_like`` node decides when the function runs (each plan turns it into a plain
    sum or into nothing, so it costs nothing per call).
    """
    if g.shape == x.shape and g.dtype == x.dtype and None not in g.shape:
        return g        # (nothing was stretched: the common case, once per VJP input of a big sweep)
    if _maybe_stretched(g, x, siblings, core):
        g = apply("sum_like", (g, x))
    else:
        lead = tuple(range(g.ndim - x.ndim))
        if lead:
            g = reduce_sum(g, axis=lead)
        stretched = tuple(a for a, (d, dg) in enumerate(zip(x.shape, g.shape)) if d == 1 and dg != 1)
        if stretched:
            g = reduce_sum(g, axis=stretched, keepdims=True)
    if g.dtype != x.dtype and x.dtype.kind in "fc":
        g = cast(g, x.dtype)
    return g


def summed_from(contribution, shape):
    """The gradient of ``shape`` that sum_to_shape reduced into ``contribution`` (through its sums and
    cast), or None: the per-element terms of a broadcast input's contribution."""
    t = contribution
    while t.op in ("sum", "cast") and t.inputs:
        t = t.inputs[0]
        if t.shape == shape:
            return t
    return None


def _maybe_stretched(g, x, siblings, core=0):
    """Whether ``x`` has an unknown size along an axis that g has with a known size != 1 (any op that
    broadcasts, broadcast_to or getitem_grad too, may have stretched it) or that a sibling of size != 1
    may have stretched.

    ``core`` trailing axes take no part in broadcasting (a matrix product's two matrix axes).
    """
    for a, d in enumerate(x.shape[:x.ndim - core]):
        if d is not None:
            continue
        if g.ndim - x.ndim + a < 0:
            continue
        ga = g.shape[g.ndim - x.ndim + a]
        if ga == 1:
            continue
        if ga is not None:
            return True      # g is known to be larger there: x is that size, or 1 and was broadcast to it
        for s in siblings:
            k = s.ndim - x.ndim + a
            if s is not x and 0 <= k < s.ndim and s.shape[k] != 1:
                return True
    return False


def stable_twin(order, keep, origin=None):
    """{id: tensor} of the numerically stable form of the tensors in ``order`` (inputs first), the tensors
    in ``keep`` never rewritten away: what both modes differentiate, so values and gradients stay finite
    (log(sigmoid(-1000)) has gradient 1)."""
    if not any(t.op in stable.TRIGGERS for t in order):
        return {}
    twin = rewrite_tensors(order, stable.RULES, keep=keep, origin=origin)
    return twin if any(twin[t.id] is not t for t in order) else {}


# ------------------------------------------------------------------ sg.grad
def _check_wrt(wrt, source):
    for w in wrt:
        if not isinstance(w, Tensor):
            raise TypeError(f"grad: wrt must hold tensors, got {type(w).__name__} (at {source})")
        if w.is_leaf and not w.requires_grad:
            what = f"{w.op} {w.name!r}" if w.name else w.op
            hint = " (create it with requires_grad=True)" if w.op == "placeholder" else ""
            raise GradError(f"grad: {what} does not require grad{hint}, so it has no gradient (at {source})")
        if w.dtype.kind != "f":
            raise GradError(f"grad: {w!r} has dtype {w.dtype}; only real floating tensors have gradients "
                            f"(at {source})")


def grad(y: Tensor, wrt: Tensor | Sequence[Tensor], grad_output: TensorLike | None = None) -> Tensor | list[Tensor]:
    """Gradients of ``y`` with respect to each tensor in ``wrt``, as tensors of the same graph.

    ``y`` must be a scalar unless ``grad_output`` (the incoming gradient, shaped like ``y``) is given,
    which makes this a vector-Jacobian product. A list in gives a list out; a single tensor in gives a
    single tensor out. Tensors that ``y`` does not depend on get zeros of their shape.
    """
    source = user_frame()
    single = isinstance(wrt, Tensor)
    wrt = [wrt] if single else list(wrt)
    if not isinstance(y, Tensor):
        raise TypeError(f"grad: y must be a tensor, got {type(y).__name__} (at {source})")
    _check_wrt(wrt, source)
    if y.dtype.kind != "f":
        raise GradError(f"grad: {_y(y)} has dtype {y.dtype}; only real floating outputs can be differentiated "
                        f"(at {source})")
    # Built-in VJP rules are package code: every tensor they make belongs to this line of the user's.
    with building(role="backward", source=source):
        # The seed (dy/dy, or grad_output) is y's own adjoint: drawn and commented as belonging to y.
        with building(adjoint_of=y, rule="seed"):
            seed = _seed(y, grad_output, source)
        with gc_paused():
            adjoint, sweep = _symbolic_sweep(y, wrt, seed)
        return _results(wrt, adjoint, single, sweep, y)


def _y(y) -> str:
    """How an error names y: by the user's name for it, when it has one."""
    return f"y ({y.name!r})" if y.name else "y"


def _seed(y, grad_output, source):
    if grad_output is None:
        if y.shape != ():
            raise GradError(f"grad: {_y(y)} has shape {format_shape(y.shape)}; pass grad_output for a non-scalar "
                            f"y (a vector-Jacobian product) or reduce it first (at {source})")
        return as_tensor(1.0, like=y.dtype)
    seed = as_tensor(grad_output, like=y.dtype)
    try:
        broadcast_shapes(seed.shape, y.shape)
    except ValueError:
        raise GradError(f"grad: grad_output of shape {format_shape(seed.shape)} does not match y of "
                        f"shape {format_shape(y.shape)} (at {source})") from None
    known = None not in y.shape and None not in seed.shape
    if known and seed.shape != y.shape:
        seed = broadcast_to(seed, y.shape)
    elif not known and seed is not y:
        # Run-time sizes on either side, even where the static shapes agree ((None, 3) and (None, 3) may be
        # 1 and 4 rows): broadcast to y's shape when the call runs (a size that cannot broadcast is an
        # error there). At equal sizes the plan makes no call for it.
        seed = apply("broadcast_like", (seed, y))
    return seed


class SweepStep:
    """One node reached by sg.grad's sweep: ``step["node"]``, ``["op"]``, ``["parts"]`` (ids of the terms
    summed into its gradient), ``["adjoint"]`` (the id of that gradient), ``["sends"]`` ((input id,
    contribution id) pairs).

    A sweep of a million nodes records a million of them, kept as long as its gradients: slots, not a dict;
    one term (the usual case) as its id, not a tuple of one; the sends as one flat list of ids (input,
    contribution, input, ...), not a tuple per pair. ``parts`` and ``sends`` give them in the usual form."""

    __slots__ = ("node", "op", "_parts", "adjoint", "flat_sends")
    FIELDS = ("node", "op", "parts", "adjoint", "sends")

    def __init__(self, node, op, parts, adjoint):
        self.node, self.op, self.adjoint, self.flat_sends = node, op, adjoint, []
        self._parts = parts[0] if len(parts) == 1 else tuple(parts)

    @property
    def parts(self) -> tuple:
        parts = self._parts
        return parts if type(parts) is tuple else (parts,)

    @property
    def sends(self) -> list:
        flat = self.flat_sends
        return list(zip(flat[::2], flat[1::2]))

    def __getitem__(self, key):
        if key not in self.FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __repr__(self):
        return (f"SweepStep(node={self.node}, op={self.op!r}, parts={self.parts}, adjoint={self.adjoint}, "
                f"sends={self.sends})")


class _Symbolic(Mode):
    """sg.grad's sweep: tensors on a path from a ``wrt`` to y need gradients; every step is recorded."""

    keeps_parts = True      # (tensors of the graph: the record costs no memory at run time)

    def __init__(self, cone, origin):
        self.cone, self.origin, self.adjoint, self.steps = cone, origin, {}, []

    def needs(self, x) -> bool:
        return x.id in self.cone

    def reached(self, node, g, parts):
        self.adjoint[node.id] = g
        if isinstance(g, Cotangents):       # (a loop's: its parts are the gradients of its outputs)
            parts = [t for p in parts for t in p.parts.values()]
        step = SweepStep(node.id, node.op, [p.id for p in parts], g.id)
        self.steps.append(step)     # what a reader of the backward pass wants to see
        return step.flat_sends

    def provenance(self, node):
        # A twin's adjoint nodes belong to the user's tensor it stands for, and name the stable form whose
        # rule made them: "VJP of softplus (stable form of log) node N".
        user = self.origin.get(node.id)
        if user is None:
            return node, node.op
        return user, (node.op if node.op == user.op else f"{node.op} (stable form of {user.op})")


def _symbolic_sweep(y, wrt, seed):
    """({wrt id: gradient}, the sweep's steps), over the stable twin of y's graph where it has one."""
    return _sweep_from([y], [seed], wrt)


# Rewrites of the whole graph before it is differentiated, each ``(ys, ancestors of ys, wrt) -> (ys,
# ancestors)``, given by the layers above (loops rolls huge repeated stretches into scans: autodiff cannot
# import loops, which builds its reverse bodies with this sweep).
BEFORE_SWEEP = []


def _sweep_from(ys, seeds, wrt):
    origin = {}
    found = ancestors(ys)
    for rewrite in BEFORE_SWEEP:
        ys, found = rewrite(ys, found, wrt)
    twin = stable_twin(sorted(found.values(), key=lambda t: t.id), wrt, origin)
    tys, twrt = [twin.get(y.id, y) for y in ys], [twin.get(w.id, w) for w in wrt]
    cone = set().union(*[_cone(ty, twrt) for ty in tys])
    roots = [(ty, s) for ty, s in zip(tys, seeds) if ty.id in cone]
    # (the consumers of a tensor of the cone are in the cone: the order of the cone alone is the order of
    # the whole graph with the other tensors left out)
    order = reverse_order([ty for ty, _ in roots], lambda x: x.id in cone)
    mode = _Symbolic(cone, origin)
    seeded = {}
    for ty, s in roots:      # (two outputs may be one tensor: its seeds add)
        seeded[ty.id] = (ty, seeded[ty.id][1] + s) if ty.id in seeded else (ty, s)
    reverse_sweep(order, list(seeded.values()), mode)
    return {w.id: mode.adjoint[t.id] for w, t in zip(wrt, twrt) if t.id in mode.adjoint}, mode.steps


def vjp(ys, seeds, wrt) -> list:
    """The vector-Jacobian product of several outputs at once: for each tensor of ``wrt``, the sum over
    ``ys`` of the gradient of ``y`` seeded with its ``seeds`` entry (a tensor of y's shape), or None where
    no y depends on it. Loops build their reverse bodies with it."""
    with gc_paused():
        adjoint, _ = _sweep_from(list(ys), list(seeds), list(wrt))
    return [adjoint.get(w.id) for w in wrt]


def _cone(y, wrt) -> set:
    """Ids of the tensors on a path from a tensor of ``wrt`` to ``y``: the only ones that need a gradient."""
    found = ancestors([y])
    cone = {w.id for w in wrt if w.id in found}
    for i in sorted(found):          # (creation order: every tensor after its inputs)
        if i not in cone and any(x.id in cone for x in found[i].inputs):
            cone.add(i)
    return cone


def _results(wrt, adjoint, single, sweep, y):
    out = []
    for w in wrt:
        g = adjoint.get(w.id)
        if g is None:
            # y does not depend on w: its gradient is zero (TF1 returns None here; zeros compose better).
            # It still reads w's shape, so a function of this gradient takes w as an input (as it does
            # when w has unknown dims); constant folding makes it a constant where the shape is static.
            g = apply("zeros_like", (w,), {"dtype": w.dtype})
        # The sweep that made g, for fn.trace and the DOT pictures; a shared tensor keeps the first.
        if g.meta is None:
            g.meta = {}
        g.meta.setdefault("sweep", sweep)
        g.meta.setdefault("grad_of", w.id)
        g.meta.setdefault("y", y)
        out.append(g)
    return out[0] if single else out
