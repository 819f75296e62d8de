"""Reductions (sum, mean, max, min, logsumexp) and the broadcasts their gradients need."""
from __future__ import annotations

import numpy as np

from ..tensor import ShapeError, format_shape, user_frame
from .elementwise import as_float, cast, equal, exp
from .registry import NONDIFF, SHAPE_REF, VIEW, apply, coerce, defop, kernel_dtype
from .shape import op_axes


def reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_spec(kernel):
    def infer(inputs, axis, keepdims):
        (x,) = inputs
        return reduced_shape(x.shape, axis, keepdims), kernel_dtype(kernel, (x.dtype,))
    return infer


def expand_reduced(g, axes, keepdims):
    """Give a reduction's gradient back the reduced axes (as size 1) so it broadcasts against the input."""
    if keepdims or not axes:
        return g
    return expand_dims(g, axes)


def broadcast_back(g, x):
    """``g`` broadcast to ``x``'s shape; the runtime shape of ``x`` is used when its static shape has None."""
    if None not in x.shape:
        if tuple(g.shape) == tuple(x.shape):
            return g
        return apply("broadcast_to", (g,), {"shape": x.shape})
    return apply("broadcast_like", (g, x))


def count(x, axes, dtype=None):
    """How many elements of ``x`` one reduction over ``axes`` sees, as a scalar of ``dtype`` (x's float
    dtype by default)."""
    dims = [x.shape[a] for a in axes]
    if dtype is None:
        dtype = x.dtype if x.dtype.kind in "fc" else np.dtype(np.float64)
    if None not in dims:
        from ..tensor import constant
        return constant(float(np.prod(dims, dtype=np.float64)), dtype=dtype)
    return apply("size", (x,), {"axis": axes, "dtype": dtype})


def _sum_vjp(g, out, x, axis, keepdims):
    return (broadcast_back(expand_reduced(g, axis, keepdims), x),)


def _mean_vjp(g, out, x, axis, keepdims):
    spread = broadcast_back(expand_reduced(g, axis, keepdims), x)
    if x.dtype == np.float16:
        # A count past 65504 is inf in float16 (the gradient would be 0): divide in float32, as numpy's
        # mean of float16 adds in float32.
        return (cast(cast(spread, np.float32) / count(x, axis, np.dtype(np.float32)), np.float16),)
    return (spread / count(x, axis),)


def _extremum_vjp(g, out, x, axis, keepdims):
    # Ties share the gradient evenly (like torch.amax), so the result is a true subgradient average.
    out_b = expand_reduced(out, axis, keepdims)
    mask = cast(equal(x, out_b), x.dtype)
    share = mask / sum(mask, axis=axis, keepdims=True)
    return (share * expand_reduced(g, axis, keepdims),)


def _mean_kernel(x, axis, keepdims):
    return np.mean(x, axis=axis, keepdims=keepdims)


def _logsumexp_kernel(x, axis, keepdims):
    m = np.maximum.reduce(x, axis=axis, keepdims=True, initial=-np.inf)    # over nothing: log(0) = -inf
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _logsumexp_vjp(g, out, x, axis, keepdims):
    return (expand_reduced(g, axis, keepdims) * exp(x - expand_reduced(out, axis, keepdims)),)


# The ufuncs' own reduce: what np.sum/np.max/np.min call, without their Python wrappers (3 µs a call).
defop("sum", np.add.reduce, _reduce_spec(np.sum), _sum_vjp)
defop("mean", _mean_kernel, _reduce_spec(np.mean), _mean_vjp)
defop("max", np.maximum.reduce, _reduce_spec(np.max), _extremum_vjp)
defop("min", np.minimum.reduce, _reduce_spec(np.min), _extremum_vjp)
defop("logsumexp", _logsumexp_kernel, _reduce_spec(np.exp), _logsumexp_vjp)


def _reduction(name):
    def fn(x, axis=None, keepdims=False):
        (x,) = coerce(x)
        axes = op_axes(name, axis, x.ndim)
        if name in ("max", "min") and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"{name}: zero-size axis of {format_shape(x.shape)} has no {name} "
                             f"(at {user_frame()})")
        if name == "logsumexp":
            x = as_float(x)
        return apply(name, (x,), {"axis": axes, "keepdims": bool(keepdims)})
    fn.__name__ = name
    fn.__doc__ = f"numpy.{name} over ``axis`` (None: all axes)."
    return fn


sum, mean, max, min, logsumexp = (_reduction("sum"), _reduction("mean"), _reduction("max"), _reduction("min"),
                                  _reduction("logsumexp"))


# ------------------------------------------------------------------ shape-driven helpers for gradients
def _size_kernel(x, axis, dtype):
    n = 1
    for a in axis:
        n *= x.shape[a]
    return np.asarray(n, dtype=dtype)


defop("size", _size_kernel, lambda inputs, axis, dtype: ((), np.dtype(dtype)), None, NONDIFF,
      doc="number of elements of x over axis (runtime shape)")


def size(x, axis=None, dtype=np.int64):
    """How many elements of ``x`` lie along ``axis`` (None: all of them), as a 0-d tensor of ``dtype``:
    numpy.size, read from the run-time shape where the static one has None."""
    (x,) = coerce(x)
    axes = op_axes("size", axis, x.ndim)
    if getattr(x, "_eager", False):          # eager in, eager out (count gives a graph constant)
        return apply("size", (x,), {"axis": axes, "dtype": np.dtype(dtype)})
    return count(x, axes, dtype)


def _broadcast_to_spec(inputs, shape):
    from .registry import broadcast_shapes
    (x,) = inputs
    if broadcast_shapes(x.shape, shape) != tuple(shape):
        raise ShapeError(f"cannot broadcast {format_shape(x.shape)} to {format_shape(shape)}")
    return tuple(shape), x.dtype


def _broadcast_like_spec(inputs):
    from .registry import broadcast_shapes
    x, ref = inputs
    both = broadcast_shapes(x.shape, ref.shape)
    # The result always has ref's shape: where ref's size is static, so is the result's.
    return tuple(b if r is None else r for r, b in zip(ref.shape, both[len(both) - len(ref.shape):])), x.dtype


def _broadcast_like_kernel(x, ref):
    return np.broadcast_to(x, ref.shape)


# The gradient of a broadcast is the incoming gradient: autodiff's sum_to_shape reduces it back.
defop("broadcast_to", np.broadcast_to, _broadcast_to_spec, lambda g, out, x, shape: (g,), VIEW)
defop("broadcast_like", _broadcast_like_kernel, _broadcast_like_spec, lambda g, out, x, ref: (g, None),
      VIEW | SHAPE_REF)


def broadcast_like(x, like):
    """``x`` broadcast to ``like``'s shape, read at run time (numpy's rules; the result is a view)."""
    x, like = coerce(x, like)
    return apply("broadcast_like", (x, like))


def broadcast_to(x, shape):
    (x,) = coerce(x)
    return apply("broadcast_to", (x,), {"shape": tuple(int(d) for d in shape)})


def _expand_dims_spec(inputs, axis):
    (x,) = inputs
    shape = list(x.shape)
    for a in axis:
        shape.insert(a, 1)
    return tuple(shape), x.dtype


def _squeeze_spec(inputs, axis):
    (x,) = inputs
    for a in axis:
        if x.shape[a] not in (1, None):
            raise ShapeError(f"cannot squeeze axis {a} of size {x.shape[a]} in {format_shape(x.shape)}")
    return tuple(d for i, d in enumerate(x.shape) if i not in axis), x.dtype


def _squeeze_kernel(x, axis):
    return np.squeeze(x, axis=axis)


defop("expand_dims", np.expand_dims, _expand_dims_spec, lambda g, out, x, axis: (squeeze(g, axis),), VIEW)
defop("squeeze", _squeeze_kernel, _squeeze_spec, lambda g, out, x, axis: (expand_dims(g, axis),), VIEW)


def expand_dims(x, axis):
    """Insert size-1 axes at ``axis`` (positions in the result, like numpy.expand_dims)."""
    (x,) = coerce(x)
    axes = op_axes("expand_dims", axis, x.ndim + (len(axis) if isinstance(axis, (tuple, list)) else 1))
    return apply("expand_dims", (x,), {"axis": axes})


def squeeze(x, axis):
    (x,) = coerce(x)
    return apply("squeeze", (x,), {"axis": op_axes("squeeze", axis, x.ndim)})



# ------------------------------------------------------------------ reducing to a shape known at run time
def unstretched_axes(g_shape, x_shape):
    """Axes of ``g_shape`` to sum so that it becomes ``x_shape`` (leading extra axes, then size-1 axes)."""
    extra = len(g_shape) - len(x_shape)
    lead = tuple(range(extra))
    kept = tuple(extra + a for a, (d, dg) in enumerate(zip(x_shape, g_shape[extra:])) if d == 1 and dg != 1)
    return lead, kept


def _sum_like_kernel(g, ref):
    lead, kept = unstretched_axes(g.shape, ref.shape)
    if kept:
        g = np.sum(g, axis=kept, keepdims=True)
    if lead:
        g = np.sum(g, axis=lead)
    return g


def _sum_like_spec(inputs):
    g, ref = inputs
    return ref.shape, g.dtype


def _sum_like_vjp(g, out, gin, ref):
    return apply("broadcast_like", (g, gin)), None


defop("sum_like", _sum_like_kernel, _sum_like_spec, _sum_like_vjp, SHAPE_REF,
      doc="sum g over the axes along which ref was broadcast, found from ref's run-time shape")


def sum_like(x, like):
    """``x`` summed back to ``like``'s shape: over the axes that broadcasting ``like`` to x's shape adds or
    stretches, found from the run-time shapes (the gradient of broadcast_like)."""
    from .registry import broadcast_shapes
    x, like = coerce(x, like)
    if like.ndim > x.ndim or broadcast_shapes(like.shape, x.shape) != tuple(x.shape):
        raise ShapeError(f"sum_like: {format_shape(like.shape)} does not broadcast to {format_shape(x.shape)} "
                         f"(at {user_frame()})")
    return apply("sum_like", (x, like))
