"""Algebraic simplification that keeps IEEE results exact."""
import math

import numpy as np

from ..ops.registry import BROADCAST, ELEMENTWISE, LAYOUT, REGISTRY, SHAPE_OF_REF, is_a
from ..rewrite import rewrite_graph, same_type, scalar_value, when_an_input
from ..tensor import LEAVES, ShapeError
from .stats import PassStats


# What a rule needs among a node's inputs to match at all (see rewrite.when_an_input).
def _constant(x) -> bool:
    return x.op == "constant"


def _constant_or_negation(x) -> bool:
    return x.op == "constant" or x.op == "neg"


def _broadcast(x) -> bool:
    opdef = REGISTRY.get(x.op)         # (is_a, one call less: asked of every input of every node)
    return opdef is not None and opdef.flags & BROADCAST != 0


def _identity_operand(rw, node, neutral, positions=(0, 1)):
    """The operand ``x`` of ``x op neutral`` when the result is x itself (same shape and dtype)."""
    a, b = rw.inputs(node)
    for k, (x, other) in enumerate(((a, b), (b, a))):
        if k in positions and same_type(x, node) and _all_equal(rw, other, neutral):
            return x
    return None


def _all_equal(rw, n, value) -> bool:
    v = rw.const_value(n)
    if v is None or v.size == 0:
        return False
    if v.size == 1:
        return v.item() == value         # most constants are scalars: no numpy call per node
    return bool(np.all(v == value))


def _zero_operand(rw, node, positions):
    """The operand ``x`` of ``x + z`` / ``x - z`` for a zero ``z`` of x's dtype and shape.

    The result is x, with one IEEE difference this pass accepts (as PyTensor does): -0.0 + 0.0 and
    -0.0 - (-0.0) are +0.0, where x itself keeps -0.0. Values are equal (-0.0 == 0.0); NaN and infinities
    pass unchanged. An integer zero is neutral only in integer arithmetic: on floats it changes the dtype.
    """
    kind = node.dtype.kind
    if kind in "iub":
        return _identity_operand(rw, node, 0, positions)
    if kind != "f":
        return None
    a, b = rw.inputs(node)
    for k, (x, z) in enumerate(((a, b), (b, a))):
        v = rw.const_value(z)
        if (k in positions and same_type(x, node) and v is not None and v.size and v.dtype.kind == "f"
                and not np.any(v)):
            return x
    return None


def _negation_is_exact(b, node) -> bool:
    """Whether ``-b`` can stand for b's negation inside ``node``: so a + -b == a - b and a - -b == a + b.

    Floating negation is exact. Integer negation wraps (-uint8(3) is 253, -INT_MIN is INT_MIN), which is
    harmless only when the arithmetic wraps the same way, in b's own dtype; promoted to a wider integer or
    to a float, the wrapped value is wrong (10.0 + -uint8(1) is 265.0, not 9.0).
    """
    return b.dtype.kind in "fc" or b.dtype == node.dtype


@when_an_input(_constant_or_negation)
def add_zero(rw, node):
    """x + 0 -> x; a + -b -> a - b; -a + b -> b - a."""
    x = _zero_operand(rw, node, positions=(0, 1))
    if x is not None:
        return x
    a, b = rw.inputs(node)
    for keep, negated in ((a, b), (b, a)):
        if negated.op == "neg":
            inner = rw.inputs(negated)[0]
            if _negation_is_exact(inner, node):
                return rw.make("sub", [keep, inner])
    return None


@when_an_input(_constant_or_negation)
def sub_zero(rw, node):
    """x - 0 -> x; a - -b -> a + b."""
    x = _zero_operand(rw, node, positions=(0,))
    if x is not None:
        return x
    a, b = rw.inputs(node)
    if b.op == "neg" and _negation_is_exact(rw.inputs(b)[0], node):
        return rw.make("add", [a, rw.inputs(b)[0]])
    return None


def _exact_merge(inner, outer) -> bool:
    """Whether (x * inner) * outer == x * (inner * outer) for every x: ``inner`` is a power of two and both
    are at least 1 in magnitude. Then x * inner is exact (it cannot underflow, and it overflows only where
    the other side does too) and both sides round x * inner * outer once. Other pairs can round twice, in
    the subnormal range too ((3e-324 * 1.5) * 2**60), or overflow on one side only (1e308 * 2 * 0.5)."""
    try:
        a, b = abs(float(inner)), abs(float(outer))
    except TypeError:            # complex factors: left alone
        return False
    return a >= 1.0 and b >= 1.0 and math.isfinite(a) and math.frexp(a)[0] == 0.5


@when_an_input(_constant)
def mul_one(rw, node):
    """x * 1 -> x; x * -1 -> -x; (x * c1) * c2 -> x * (c1 * c2) for scalar constants when that is exact."""
    x = _identity_operand(rw, node, 1)
    if x is not None:
        return x
    a, b = rw.inputs(node)
    for x, c in ((a, b), (b, a)):
        cv = scalar_value(rw, c)
        if cv is None:
            continue
        if cv == -1 and same_type(x, node):
            return rw.make("neg", [x])
        if x.op == "mul":
            for y, d in (tuple(rw.inputs(x)), tuple(reversed(rw.inputs(x)))):
                dv = scalar_value(rw, d)
                if (dv is not None and same_type(y, node) and c.dtype == node.dtype and d.dtype == node.dtype
                        and _exact_merge(dv, cv)):
                    with np.errstate(all="ignore"):
                        product = np.multiply(rw.const_value(c).reshape(()), rw.const_value(d).reshape(()))
                    # An overflowing or vanishing product would turn 0*c1*c2 or inf*c1*c2 into NaN.
                    if np.isfinite(product) and product != 0:
                        return rw.make("mul", [y, rw.const(product, node.dtype)])
    return None


@when_an_input(_constant)
def div_one(rw, node):
    """x / 1 -> x."""
    return _identity_operand(rw, node, 1, positions=(0,))


def neg_neg(rw, node):
    """--x -> x."""
    (x,) = rw.inputs(node)
    return rw.inputs(x)[0] if x.op == "neg" else None


def transpose_transpose(rw, node):
    """transpose(transpose(x)) -> one transpose, or x when the permutations cancel."""
    (x,) = rw.inputs(node)
    axes = node.attrs["axes"]
    if x.op == "transpose":
        inner = x.attrs["axes"]
        axes = tuple(inner[a] for a in axes)
        x = rw.inputs(x)[0]
        if axes != tuple(range(len(axes))):
            return rw.make("transpose", [x], {"axes": axes})
    return x if axes == tuple(range(len(axes))) else None


def reshape_same(rw, node):
    """reshape to the shape x already has -> x; reshape(reshape(x)) -> reshape(x)."""
    (x,) = rw.inputs(node)
    if tuple(x.shape) == tuple(node.shape) and x.shape.count(None) <= 1:
        return x
    if is_a(x, LAYOUT) and x.op != "transpose":       # (a reshape of a reshape, squeeze or expand_dims)
        return rw.make("reshape", [rw.inputs(x)[0]], node.attrs)
    return None


def squeeze_expand(rw, node):
    """squeeze(expand_dims(x, a), a) -> x and the reverse."""
    (x,) = rw.inputs(node)
    inverse = {"squeeze": "expand_dims", "expand_dims": "squeeze"}[node.op]
    if x.op == inverse and x.attrs["axis"] == node.attrs["axis"]:
        return rw.inputs(x)[0]
    return None


def sum_size_one(rw, node):
    """A sum or mean over axes of size 1 only -> x itself (keepdims) or x squeezed.

    The same numbers, with the sign-of-zero difference of x + 0: numpy's reduction starts from +0.0, so its
    sum of a single -0.0 is +0.0. Not where the dtype changes (numpy sums int32 into int64).
    """
    (x,) = rw.inputs(node)
    axes = node.attrs["axis"]
    if not axes or any(x.shape[a] != 1 for a in axes) or x.dtype != node.dtype:
        return None
    if node.attrs["keepdims"]:
        return x
    return rw.make("squeeze", [x], {"axis": axes})


def cast_same(rw, node):
    (x,) = rw.inputs(node)
    return x if x.dtype == node.dtype else None


def _shape_root(rw, n, depth=6):
    """A node whose run-time shape ``n`` is known to have (for unknown sizes), or None."""
    for _ in range(depth):
        if None not in n.shape or n.op in LEAVES:
            return n
        if is_a(n, SHAPE_OF_REF):
            return _shape_root(rw, rw.inputs(n)[-1], depth - 1)
        if not is_a(n, ELEMENTWISE):
            return n
        full = [x for x in rw.inputs(n) if tuple(x.shape) == tuple(n.shape)]
        roots = {id(r) for r in (_shape_root(rw, x, depth - 1) for x in full)}
        if len(full) == len(rw.inputs(n)) and len(roots) == 1:
            n = full[0]
            continue
        return n
    return n


def _same_runtime_shape(rw, a, b) -> bool:
    if None not in a.shape and tuple(a.shape) == tuple(b.shape):
        return True
    ra, rb = _shape_root(rw, a), _shape_root(rw, b)
    return ra is not None and rb is not None and ra.id == rb.id


@when_an_input(_broadcast)
def scalar_broadcast(rw, node):
    """An elementwise op reading broadcast_to(c) of a scalar-shaped c reads c itself (numpy broadcasts),
    when another operand is known to have the broadcast's shape at run time."""
    inputs = rw.inputs(node)
    changed = False
    for k, x in enumerate(inputs):
        if node.op == "pow" and k == 1:
            continue            # a broadcast exponent is read per element, one number takes numpy's shortcuts
        if is_a(x, BROADCAST):
            src = rw.inputs(x)[0]
            others = [y for j, y in enumerate(inputs) if j != k]
            if all(d == 1 for d in src.shape) and any(_same_runtime_shape(rw, y, x) for y in others):
                inputs[k], changed = src, True
    if not changed:
        return None
    try:
        shape, dtype = REGISTRY[node.op].infer(inputs, **node.attrs)
    except ShapeError:
        return None
    if tuple(shape) != tuple(node.shape) or dtype != node.dtype:
        return None
    return rw.make(node.op, inputs, node.attrs)


@when_an_input(_broadcast)
def unary_of_broadcast(rw, node):
    """f(broadcast(c)) -> broadcast(f(c)) for a constant c, with f(c) computed now."""
    (x,) = rw.inputs(node)
    if not is_a(x, BROADCAST) or node.dtype.kind not in "fc":
        return None
    src, *refs = rw.inputs(x)
    value = rw.const_value(src)
    if value is None:
        return None
    with np.errstate(all="ignore"):
        folded = rw.const(REGISTRY[node.op].kernel(value, **node.attrs), node.dtype)
    return rw.make(x.op, [folded, *refs], x.attrs)


def layout_of_broadcast(rw, node):
    """reshape/transpose/expand_dims/squeeze of a broadcast scalar is a broadcast of that scalar."""
    (x,) = rw.inputs(node)
    if x.op != "broadcast_to" or None in node.shape:
        return None
    src = rw.inputs(x)[0]
    if not all(d == 1 for d in src.shape):
        return None
    if src.ndim > node.ndim:
        src = rw.make("reshape", [src], {"shape": ()})
    return rw.make("broadcast_to", [src], {"shape": tuple(node.shape)})


RULES = {
    "add": [add_zero, scalar_broadcast],
    "sub": [sub_zero, scalar_broadcast],
    "mul": [mul_one, scalar_broadcast],
    "div": [div_one, scalar_broadcast],
    "neg": [neg_neg],
    "transpose": [transpose_transpose],
    "reshape": [reshape_same],
    "squeeze": [squeeze_expand],
    "expand_dims": [squeeze_expand],
    "sum": [sum_size_one],
    "mean": [sum_size_one],
    "cast": [cast_same],
}
for _name, _op in REGISTRY.items():
    # Every other elementwise op also reads scalar broadcasts directly, and one whose per-element template
    # reads one operand is computed now on a broadcast constant.
    if _op.has(ELEMENTWISE) and _name != "cast":
        RULES.setdefault(_name, [scalar_broadcast])
        if isinstance(_op.scalar, str) and "{1}" not in _op.scalar:
            RULES[_name].append(unary_of_broadcast)
    if _op.has(LAYOUT):
        RULES.setdefault(_name, []).append(layout_of_broadcast)


def run(graph):
    """x+0, x-0, x*1, x/1, --x, transpose of transpose, reshape to the same shape, reshape of reshape,
    sums over size-1 axes, chained constant scalings ((x*2)*3 -> x*6), x*-1 -> -x, a + -b -> a - b
    (unless -b wraps in a narrower integer dtype than the sum's) and scalar broadcasts read directly. Each
    rewrite keeps the node's shape and dtype and every value; none turns a NaN or an infinity into a number
    (no x*0 -> 0, no x-x -> 0). The one bit it may change is the sign of a zero: x + 0 and a sum over one
    number give -0.0 where numpy's addition gives +0.0.
    """
    graph, fired, fixed = rewrite_graph(graph, RULES)
    return graph, PassStats("simplify", changed=fired, fixed_point=fixed)
