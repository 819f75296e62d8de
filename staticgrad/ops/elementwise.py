"""Elementwise ops: arithmetic, unary math, comparisons, selection."""
from __future__ import annotations

import functools
import math

import numpy as np

from .registry import COMMUTATIVE, ELEMENTWISE, VIEW, apply, coerce, defop, elementwise_spec, kernel_dtype


def _binary(name):
    def fn(a, b):
        a, b = coerce(a, b)
        return apply(name, (a, b))
    fn.__name__ = name
    return fn


def _unary(name):
    def fn(x):
        (x,) = coerce(x)
        return apply(name, (x,))
    fn.__name__ = name
    return fn


def as_float(x):
    """``x`` cast to the float dtype numpy's exp gives it (bool and int8 -> float16, int64 -> float64), for
    ops numpy does not have: their kernels negate and compare, which wraps unsigned and refuses bool."""
    if x.dtype.kind in "fc":
        return x
    return cast(x, kernel_dtype(np.exp, (x.dtype,)))


def _float_unary(name):
    def fn(x):
        (x,) = coerce(x)
        return apply(name, (as_float(x),))
    fn.__name__ = name
    return fn


def _def(name, kernel, vjp, flags=0, doc=""):
    defop(name, kernel, elementwise_spec(kernel), vjp, flags | ELEMENTWISE, doc)


# ------------------------------------------------------------------ kernels numpy does not have
def sigmoid_kernel(x):
    # exp of -|x| never overflows, so both halves stay accurate far into the tails.
    e = np.exp(-np.abs(x))
    r = 1.0 / (1.0 + e)
    return np.where(x >= 0, r, e * r)


def relu_kernel(x, out=None):
    if x.dtype == np.float32 and x.ndim and 256 <= x.shape[-1] <= 8192 and x.flags.c_contiguous:
        # numpy's float32 maximum runs its vector loop only when both operands are walked contiguously:
        # against a row of zeros it is 2-3x faster than against the scalar 0, with the same bits.
        return np.maximum(x, _zero_row(x.shape[-1]), out=out)
    return np.maximum(x, 0, out=out)


@functools.lru_cache(maxsize=8)
def _zero_row(n):
    row = np.zeros(n, np.float32)
    row.flags.writeable = False
    return row


relu_kernel.accepts_out = True     # the executor may hand it a reusable buffer
relu_kernel.inplace_safe = True    # one pass: out may be its own input


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


where_kernel.accepts_out = True
where_kernel.inplace_safe = True   # each element is read before its own slot is written


def where_else_zero(cond, x, y, out):
    """where(cond, x, +0.0) into ``out``, for C-ordered float ``x`` and ``cond`` of out's shape and dtype
    (``y`` is not read). Plans call it directly where they know that much, sparing where_kernel's checks.

    x's bit pattern times 1 or 0, as integers: one branch-free pass instead of numpy.where's data-dependent
    one (ten times faster on a random mask), and the same bits."""
    ints = _SIGNED[x.dtype.itemsize]
    np.multiply(x.view(ints), cond, out=out.view(ints))
    return out


where_else_zero.accepts_out = True
where_else_zero.inplace_safe = True


def softplus_kernel(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def identity_kernel(x):
    return x


def cast_kernel(x, dtype):
    return x.astype(dtype)


# ------------------------------------------------------------------ arithmetic
_def("add", np.add, lambda g, out, x, y: (g, g), COMMUTATIVE)
_def("sub", np.subtract, lambda g, out, x, y: (g, neg(g)))
_def("mul", np.multiply, lambda g, out, x, y: (g * y, g * x), COMMUTATIVE)
_def("div", np.true_divide, lambda g, out, x, y: (g / y, neg(g / y * out)))
_def("neg", np.negative, lambda g, out, x: (neg(g),))


def _pow_vjp(g, out, x, y):
    gx = g * y * power(x, y - 1)
    if not (y.op == "constant" and np.all(y.value != 0)):
        # x**0 is constant, but y * x**(y-1) is 0 * inf = nan at x = 0: mask it, as torch does.
        gx = where(equal(y, 0), 0, gx)
    # x**y log x tends to 0 as x -> 0 (y > 0): taking log 1 there avoids 0 * -inf = nan, as torch does.
    safe_log = log(where(equal(x, 0), 1, x))
    return gx, g * out * safe_log


def power_kernel(x, y, out=None):
    # numpy's power takes shortcuts (sqrt for 0.5, x*x for 2, 1/x for -1) where its loop reads one exponent
    # for every element, as it does for a broadcast view (step 0) too. A broadcast here is a value of its
    # shape, read per element like the fresh array a pass may fold it from or into, so results follow
    # shapes, not memory layout (fuse.one_exponent says which loop runs).
    if type(y) is np.ndarray and y.size > 1 and 0 in y.strides:
        y = np.ascontiguousarray(y)
    return np.power(x, y, out=out)


power_kernel.accepts_out = power_kernel.inplace_safe = True
_def("pow", power_kernel, _pow_vjp)

add, sub, mul, div, pow = _binary("add"), _binary("sub"), _binary("mul"), _binary("div"), _binary("pow")
power = pow
neg = _unary("neg")

# ------------------------------------------------------------------ unary math
_def("exp", np.exp, lambda g, out, x: (g * out,))
_def("log", np.log, lambda g, out, x: (g / x,))
_def("log1p", np.log1p, lambda g, out, x: (g / (x + 1),))
_def("expm1", np.expm1, lambda g, out, x: (g * (out + 1),))
_def("sqrt", np.sqrt, lambda g, out, x: (g / (out * 2),))
_def("sin", np.sin, lambda g, out, x: (g * cos(x),))
_def("cos", np.cos, lambda g, out, x: (neg(g * sin(x)),))
_def("tanh", np.tanh, lambda g, out, x: (g * (1 - square(out)),))
_def("sigmoid", sigmoid_kernel, lambda g, out, x: (g * (out * (1 - out)),))
_def("relu", relu_kernel, lambda g, out, x: (where(out > 0, g, 0),))
_def("abs", np.abs, lambda g, out, x: (g * sign(x),))
_def("square", np.square, lambda g, out, x: (g * (x * 2),))
_def("softplus", softplus_kernel, lambda g, out, x: (g * sigmoid(x),))
_def("sign", np.sign, None)
_def("stop_gradient", identity_kernel, None, VIEW, doc="identity whose gradient is zero")

exp, log, log1p, expm1, sqrt = _unary("exp"), _unary("log"), _unary("log1p"), _unary("expm1"), _unary("sqrt")
sin, cos, tanh, sigmoid, relu = _unary("sin"), _unary("cos"), _unary("tanh"), _float_unary("sigmoid"), _unary("relu")
abs, square, softplus, sign = _unary("abs"), _unary("square"), _float_unary("softplus"), _unary("sign")
stop_gradient = _unary("stop_gradient")


def _cast_spec(inputs, dtype):
    return inputs[0].shape, np.dtype(dtype)


def _cast_vjp(g, out, x, dtype):
    # Rounding to integers (or bools) is piecewise constant: no gradient flows back through it.
    if x.dtype.kind not in "fc" or np.dtype(dtype).kind not in "fc":
        return (None,)
    return (cast(g, x.dtype),)


defop("cast", cast_kernel, _cast_spec, _cast_vjp, ELEMENTWISE)


def cast(x, dtype):
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
_def("maximum", np.maximum, _maximum_vjp)
_def("minimum", np.minimum, _minimum_vjp)
maximum, minimum = _binary("maximum"), _binary("minimum")


def _where_spec(inputs):
    from .registry import broadcast_shapes
    cond, x, y = inputs
    return broadcast_shapes(cond.shape, x.shape, y.shape), np.result_type(x.dtype, y.dtype)


def _where_vjp(g, out, cond, x, y):
    return None, where(cond, g, 0), where(cond, 0, g)


defop("where", where_kernel, _where_spec, _where_vjp, ELEMENTWISE)


def where(cond, x, y):
    """``x`` where ``cond`` holds, else ``y`` (numpy.where with three arguments)."""
    x, y = coerce(x, y)
    (cond,) = coerce(cond)
    if cond.dtype != np.bool_:
        cond = cast(cond, bool)
    return apply("where", (cond, x, y))


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
    from .registry import broadcast_shapes
    x, lo, hi = inputs
    return broadcast_shapes(x.shape, lo.shape, hi.shape), kernel_dtype(_clip_kernel, (x.dtype, lo.dtype, hi.dtype))


defop("clip", _clip_kernel, _clip_spec, _clip_vjp, ELEMENTWISE)


def _unbounded(dtype, side):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if side < 0 else info.max
    return side * np.inf


def clip(x, a_min, a_max):
    """Limit ``x`` to [a_min, a_max] (either may be None, as in numpy); the gradient passes where
    a_min <= x <= a_max."""
    (x,) = coerce(x)
    if a_min is None:
        a_min = _unbounded(x.dtype, -1)
    if a_max is None:
        a_max = _unbounded(x.dtype, 1)
    x, a_min, a_max = coerce(x, a_min, a_max)
    return apply("clip", (x, a_min, a_max))


# ------------------------------------------------------------------ comparisons (not differentiable)
for _name, _kernel in [("less", np.less), ("less_equal", np.less_equal), ("greater", np.greater),
                       ("greater_equal", np.greater_equal), ("equal", np.equal),
                       ("not_equal", np.not_equal), ("logical_and", np.logical_and),
                       ("logical_or", np.logical_or)]:
    _def(_name, _kernel, None)
less, less_equal, greater, greater_equal = (_binary("less"), _binary("less_equal"), _binary("greater"),
                                            _binary("greater_equal"))
equal, not_equal, logical_and, logical_or = (_binary("equal"), _binary("not_equal"), _binary("logical_and"),
                                             _binary("logical_or"))
