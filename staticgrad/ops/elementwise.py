"""Elementwise ops: arithmetic, selection, comparisons and logic, casts; and the builders of public functions."""
from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ..tensor import Tensor, TensorLike
from .registry import (
    COMMUTATIVE,
    ELEMENTWISE,
    IDENTITY,
    INPLACE,
    OUT,
    VIEW,
    apply,
    broadcast_shapes,
    coerce,
    defop,
    elementwise_spec,
    kernel_dtype,
    stored_dtype,
)


# ------------------------------------------------------------------ public functions from registrations
def binary(opdef):
    """The public function of a two-input op: Python scalars adopt the other operand's dtype."""
    def fn(a: TensorLike, b: TensorLike) -> Tensor:
        a, b = coerce(a, b)
        return apply(opdef.name, (a, b))
    return opdef.publish(fn)


def unary(opdef):
    def fn(x: TensorLike) -> Tensor:
        (x,) = coerce(x)
        return apply(opdef.name, (x,))
    return opdef.publish(fn)


def float_unary(opdef):
    """For an op numpy lacks: integers become the float dtype numpy's exp would give them first."""
    def fn(x: TensorLike) -> Tensor:
        (x,) = coerce(x)
        return apply(opdef.name, (as_float(x),))
    return opdef.publish(fn)


def as_float(x):
    """``x`` cast to the float dtype numpy's exp gives it (bool and int8 -> float16, int64 -> float64), for
    ops numpy does not have: their kernels negate and compare, which wraps unsigned and refuses bool."""
    if x.dtype.kind in "fc":
        return x
    return cast(x, kernel_dtype(np.exp, (x.dtype,)))


def elementwise(name, kernel, vjp, flags=0, **facts):
    """Register an elementwise op whose shape and dtype are numpy's for ``kernel``."""
    return defop(name, kernel, elementwise_spec(kernel), vjp, flags | ELEMENTWISE, **facts)


# ------------------------------------------------------------------ arithmetic
add = binary(elementwise("add", np.add, lambda g, out, x, y: (g, g), COMMUTATIVE, scalar="({0} + {1})",
                         torch=lambda T: T.add))
sub = binary(elementwise("sub", np.subtract, lambda g, out, x, y: (g, neg(g)), scalar="({0} - {1})",
                         torch=lambda T: T.sub))
mul = binary(elementwise("mul", np.multiply, lambda g, out, x, y: (g * y, g * x), COMMUTATIVE,
                         scalar="({0} * {1})", torch=lambda T: T.mul))
div = binary(elementwise("div", np.true_divide, lambda g, out, x, y: (g / y, neg(g / y * out)),
                         scalar="({0} / {1})", torch=lambda T: T.div))
neg = unary(elementwise("neg", np.negative, lambda g, out, x: (neg(g),), scalar="(-{0})",
                        torch=lambda T: T.neg))


def identity_kernel(x):
    return x


stop_gradient = unary(elementwise(
    "stop_gradient", identity_kernel, None, VIEW | IDENTITY, scalar="{0}", torch=lambda T: T.Tensor.detach,
    doc="identity whose gradient is zero"))


# ------------------------------------------------------------------ casts
def cast_kernel(x, dtype):
    return x.astype(dtype)


def _cast_spec(inputs, dtype):
    (x,) = inputs
    return x.shape, stored_dtype(dtype)


def _cast_vjp(g, out, x, dtype):
    # Rounding to integers (or bools) is piecewise constant: no gradient flows back through it.
    if x.dtype.kind not in "fc" or np.dtype(dtype).kind not in "fc":
        return (None,)
    return (cast(g, x.dtype),)


def _cast_template(node, shapes, nodes):
    # float() of a float or a bool is exact; a narrower float is rounded by the backend (numba) or refused
    # by the scalar path, which computes float64 only.
    return "float({0})" if node.dtype.kind == "f" else None


def _cast_torch(T, dtype):
    to = T.from_numpy(np.zeros((), dtype)).dtype
    return lambda x: x.to(to)


_CAST = defop("cast", cast_kernel, _cast_spec, _cast_vjp, ELEMENTWISE, scalar=_cast_template,
              scalar_kinds=(("fb",), "f"), torch=_cast_torch)


@_CAST.publish
def cast(x: TensorLike, dtype: npt.DTypeLike) -> Tensor:
    """``x`` as ``dtype`` (numpy's astype)."""
    (x,) = coerce(x)
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    return apply("cast", (x,), {"dtype": dtype})


# ------------------------------------------------------------------ two-sided selection
def _maximum_vjp(g, out, x, y):
    # Ties split the gradient evenly, as PyTorch does.
    half = g * 0.5
    return (where(x > y, g, where(equal(x, y), half, 0)),
            where(y > x, g, where(equal(x, y), half, 0)))


def _minimum_vjp(g, out, x, y):
    half = g * 0.5
    return (where(x < y, g, where(equal(x, y), half, 0)),
            where(y < x, g, where(equal(x, y), half, 0)))


# Not COMMUTATIVE: of two equal values numpy returns the second, so maximum(-0.0, 0.0) is 0.0 and
# maximum(0.0, -0.0) is -0.0 (and of two NaNs, the first one's payload).
maximum = binary(elementwise("maximum", np.maximum, _maximum_vjp, scalar="maximum({0}, {1})",
                             torch=lambda T: T.maximum))
minimum = binary(elementwise("minimum", np.minimum, _minimum_vjp, scalar="minimum({0}, {1})",
                             torch=lambda T: T.minimum))


# ------------------------------------------------------------------ where
_SIGNED = {k: np.dtype(f"i{k}") for k in (2, 4, 8)}


def float_with_ints(dtype) -> bool:
    """Whether ``dtype`` is a float whose bits an integer dtype of its size can carry (not long double)."""
    return dtype.kind == "f" and dtype.itemsize in _SIGNED


def where_kernel(cond, x, y, out=None):
    """numpy.where, writing into ``out`` when given (numpy.where itself always allocates)."""
    if out is not None and _is_plus_zero(y) and _same_float_layout(x, cond, out):
        return where_else_zero(cond, x, y, out)
    if out is None:
        return np.where(cond, x, y)
    np.copyto(out, np.where(cond, x, y))
    return out


def _is_plus_zero(y) -> bool:
    # Runs on every call of a compiled relu gradient: plain Python on the constant, no numpy helpers.
    try:
        v = y.item() if isinstance(y, np.ndarray) else y
    except ValueError:          # more than one element
        return False
    return not isinstance(v, complex) and v == 0 and math.copysign(1.0, v) > 0


def _same_float_layout(x, cond, out) -> bool:
    return (isinstance(x, np.ndarray) and float_with_ints(x.dtype) and x.dtype == out.dtype and x.shape == out.shape
            and np.shape(cond) == out.shape and x.flags.c_contiguous and out.flags.c_contiguous)


def where_else_zero(cond, x, y, out):
    """where(cond, x, +0.0) into ``out``, for C-ordered float ``x`` and ``cond`` of out's shape and dtype
    (``y`` is not read). Plans call it directly where they know that much, sparing where_kernel's checks.

    x's bit pattern times 1 or 0, as integers: one branch-free pass instead of numpy.where's data-dependent
    one (ten times faster on a random mask), and the same bits."""
    ints = _SIGNED[x.dtype.itemsize]
    np.multiply(x.view(ints), cond, out=out.view(ints))
    return out


def _where_fast(node, plan):
    """where(cond, x, +0.0) over float values a plan keeps in workspace buffers of one shape and dtype (a
    ReLU gradient): where_else_zero, without where_kernel's per-call checks."""
    cond, x, y = node.inputs
    value = plan.fixed_scalar(y)
    if value is None or value != 0.0 or math.copysign(1.0, value) < 0:
        return None
    slots = [plan.slot(i) for i in (cond, x, node.id)]
    if None in slots:
        return None
    (c_shape, _), (x_shape, x_dtype), (shape, dtype) = slots
    if not (c_shape == x_shape == shape and x_dtype == dtype and float_with_ints(dtype)):
        return None
    return where_else_zero if plan.dtype(cond) == np.bool_ else None


def _where_spec(inputs):
    cond, x, y = inputs
    return broadcast_shapes(cond.shape, x.shape, y.shape), np.result_type(x.dtype, y.dtype)


def _where_vjp(g, out, cond, x, y):
    return None, where(cond, g, 0), where(cond, 0, g)


_WHERE = defop("where", where_kernel, _where_spec, _where_vjp, ELEMENTWISE | OUT | INPLACE,
               scalar="({1} if {0} else {2})", scalar_kinds=(("b", "f", "f"), "f"), fast_kernel=_where_fast,
               torch=lambda T: T.where)


@_WHERE.publish
def where(cond: TensorLike, x: TensorLike, y: TensorLike) -> Tensor:
    """``x`` where ``cond`` holds, else ``y`` (numpy.where with three arguments)."""
    x, y = coerce(x, y)
    (cond,) = coerce(cond)
    if cond.dtype != np.bool_:
        cond = cast(cond, bool)
    return apply("where", (cond, x, y))


# ------------------------------------------------------------------ clip
def _clip_vjp(g, out, x, lo, hi):
    # numpy's clip is minimum(maximum(x, lo), hi): where lo > hi every result is hi, whatever x is.
    inside = logical_and(x >= lo, x <= hi)
    below = x < lo
    to_lo = logical_and(below, lo <= hi)
    to_hi = logical_or(x > hi, logical_and(below, lo > hi))
    return where(inside, g, 0), where(to_lo, g, 0), where(to_hi, g, 0)


def _clip_kernel(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


def _clip_spec(inputs):
    x, lo, hi = inputs
    return broadcast_shapes(x.shape, lo.shape, hi.shape), kernel_dtype(_clip_kernel, (x.dtype, lo.dtype, hi.dtype))


_CLIP = defop("clip", _clip_kernel, _clip_spec, _clip_vjp, ELEMENTWISE, scalar="minimum(maximum({0}, {1}), {2})",
              torch=lambda T: lambda x, lo, hi: T.minimum(T.maximum(x, lo), hi))


def _unbounded(dtype, side):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if side < 0 else info.max
    return side * np.inf


@_CLIP.publish
def clip(x: TensorLike, a_min: TensorLike | None, a_max: TensorLike | None) -> Tensor:
    """Limit ``x`` to [a_min, a_max] (either may be None, as in numpy); the gradient passes where
    a_min <= x <= a_max."""
    (x,) = coerce(x)
    if a_min is None:
        a_min = _unbounded(x.dtype, -1)
    if a_max is None:
        a_max = _unbounded(x.dtype, 1)
    x, a_min, a_max = coerce(x, a_min, a_max)
    return apply("clip", (x, a_min, a_max))


# ------------------------------------------------------------------ comparisons and logic (not differentiable)
def _comparison(name, kernel, symbol, torch_name):
    return binary(elementwise(name, kernel, None, scalar=f"({{0}} {symbol} {{1}})", scalar_kinds=(("f",), "b"),
                              torch=lambda T: getattr(T, torch_name)))


less = _comparison("less", np.less, "<", "lt")
less_equal = _comparison("less_equal", np.less_equal, "<=", "le")
greater = _comparison("greater", np.greater, ">", "gt")
greater_equal = _comparison("greater_equal", np.greater_equal, ">=", "ge")
equal = _comparison("equal", np.equal, "==", "eq")
not_equal = _comparison("not_equal", np.not_equal, "!=", "ne")
# (on Python bools ``and`` and ``or`` give bools: the scalar path takes only those)
logical_and = binary(elementwise("logical_and", np.logical_and, None, scalar="({0} and {1})",
                                 scalar_kinds=(("b",), "b"), torch=lambda T: T.logical_and))
logical_or = binary(elementwise("logical_or", np.logical_or, None, scalar="({0} or {1})",
                                scalar_kinds=(("b",), "b"), torch=lambda T: T.logical_or))
