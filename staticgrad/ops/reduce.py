"""Reductions (sum, mean, max, min, logsumexp, argmax, argmin), and size: how many elements they see."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..tensor import ShapeError, Tensor, TensorLike, constant, format_shape, user_frame
from .broadcast import expand_dims
from .elementary import exp
from .elementwise import as_float, cast, equal
from .registry import (
    OUT,
    SHAPE_ONLY,
    apply,
    coerce,
    defop,
    kernel_dtype,
    shifted_axes,
    stored_axes,
    stored_axis,
    stored_dtype,
    stored_flag,
)
from .shape import SPECIALIZED, op_axes


def reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_spec(kernel, extremum=None):
    """The shape rule of a reduction; an ``extremum`` ("max", "min") has none over an empty axis."""
    def infer(inputs, axis, keepdims):
        (x,) = inputs
        axis, keepdims = stored_axes(axis, x.ndim), stored_flag(keepdims, "keepdims")
        if extremum:
            _nonempty(extremum, x, axis)
        return reduced_shape(x.shape, axis, keepdims), kernel_dtype(kernel, (x.dtype,))
    return infer


def input_flops(node, shapes) -> int:
    """A reduction reads every element of its input once."""
    return math.prod(shapes[node.inputs[0]])


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
        return constant(float(np.prod(dims, dtype=np.float64)), dtype=dtype)
    return apply("size", (x,), {"axis": axes, "dtype": np.dtype(dtype)})


# ------------------------------------------------------------------ sum, mean, max, min
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


def _summing(mean):
    """The scalar path's sum (or mean): from 0.0, as numpy's reduction starts (so -0.0 terms sum to +0.0),
    in numpy's order of additions."""
    def rule(em, node, ins, shape):
        (x,), axes = ins, node.attrs["axis"]
        add = em.adder(x.shape, axes, of=node.inputs[0])
        moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
        kept = moved.shape[:x.ndim - len(axes)]
        n = math.prod(moved.shape[len(kept):])
        rows = moved.reshape(kept + (n,))
        out = np.empty(kept, dtype=object)
        for idx in np.ndindex(kept):
            total = f"0.0 + {add(list(rows[idx]))}" if n else "0.0"
            out[idx] = em.assign(f"({total}) / {float(n)!r}" if mean else total)
        return np.expand_dims(out, axes) if node.attrs["keepdims"] else out
    return rule


def _torch_reduction(name):
    def make(T, axis, keepdims):
        fn = getattr(T, name)
        return (lambda x: fn(x, dim=axis, keepdim=keepdims)) if axis else (lambda x: x)
    return make


_EXTREMUM_IN_SCALAR = "no scalar form yet: Python's max and min do not propagate NaN as numpy's do"
# The ufuncs' own reduce: what np.sum/np.max/np.min call, without their Python wrappers (3 µs a call).
_SUM = defop("sum", np.add.reduce, _reduce_spec(np.sum), _sum_vjp, OUT, flops=input_flops, batch=shifted_axes("axis"),
             scalar_rule=_summing(False), torch=_torch_reduction("sum"))
_MEAN = defop("mean", _mean_kernel, _reduce_spec(np.mean), _mean_vjp, flops=input_flops, batch=shifted_axes("axis"),
              scalar_rule=_summing(True), torch=_torch_reduction("mean"))
_MAX = defop("max", np.maximum.reduce, _reduce_spec(np.max, "max"), _extremum_vjp, OUT, flops=input_flops,
             batch=shifted_axes("axis"), unsupported={"scalar": _EXTREMUM_IN_SCALAR}, torch=_torch_reduction("amax"))
_MIN = defop("min", np.minimum.reduce, _reduce_spec(np.min, "min"), _extremum_vjp, OUT, flops=input_flops,
             batch=shifted_axes("axis"), unsupported={"scalar": _EXTREMUM_IN_SCALAR}, torch=_torch_reduction("amin"))


# ------------------------------------------------------------------ logsumexp and the row-wise normalizers
def _logsumexp_kernel(x, axis, keepdims):
    m = np.maximum.reduce(x, axis=axis, keepdims=True, initial=-np.inf)    # over nothing: log(0) = -inf
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _logsumexp_vjp(g, out, x, axis, keepdims):
    return (expand_reduced(g, axis, keepdims) * exp(x - expand_reduced(out, axis, keepdims)),)


def rowwise_scalar(kind):
    """The scalar path's softmax, log_softmax or logsumexp (``kind``) along one axis, step for step as
    their kernels: the row's max (made 0 where infinite, except in softmax, as the kernels do), numpy's
    exp of the differences, their sum in numpy's order, then the division or numpy's log."""
    def rule(em, node, ins, shape):
        (x,), axes = ins, node.attrs["axis"]
        if len(axes) != 1:
            em.refuse(f"{kind} over several axes")
        (axis,) = axes
        add = em.adder(x.shape, axes, of=node.inputs[0])
        moved = np.moveaxis(x, axis, -1)
        out = np.empty(moved.shape if kind != "logsumexp" else moved.shape[:-1], dtype=object)
        for idx in np.ndindex(moved.shape[:-1]):
            row = moved[idx]
            m = em.assign(f"max({', '.join(row)})") if len(row) > 1 else row[0]
            if kind != "softmax":
                m = em.assign(f"({m} if {m} - {m} == 0.0 else 0.0)")
            exps = em.numpy("exp", [f"{v} - {m}" for v in row])
            total = em.assign(f"0.0 + {add(exps)}")
            if kind == "softmax":
                out[idx] = [em.assign(f"{e} / {total}") for e in exps]
                continue
            lse = em.assign(f"{em.one('log', total)} + {m}")
            out[idx] = [em.assign(f"{v} - {lse}") for v in row] if kind == "log_softmax" else lse
        if kind == "logsumexp":
            return np.expand_dims(out, axis) if node.attrs["keepdims"] else out.reshape(shape)
        return np.moveaxis(out, -1, axis)
    return rule


_LOGSUMEXP = defop("logsumexp", _logsumexp_kernel, _reduce_spec(np.exp), _logsumexp_vjp, flops=8,
                   scalar_rule=rowwise_scalar("logsumexp"), torch=_torch_reduction("logsumexp"))


def _reduction(opdef):
    name = opdef.name

    def fn(x: TensorLike, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        (x,) = coerce(x)
        axes = op_axes(name, axis, x.ndim)
        if opdef is _LOGSUMEXP:
            x = as_float(x)
        return apply(name, (x,), {"axis": axes, "keepdims": bool(keepdims)})
    fn.__doc__ = f"numpy.{name} over ``axis`` (None: all axes)."
    return opdef.publish(fn)


def _nonempty(extremum, x, axes):
    # (apply puts the op's name and the user's line in front)
    if any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"zero-size axis of {format_shape(x.shape)} has no {extremum}")


sum, mean, max, min, logsumexp = (_reduction(_SUM), _reduction(_MEAN), _reduction(_MAX), _reduction(_MIN),
                                  _reduction(_LOGSUMEXP))


# ------------------------------------------------------------------ argmax, argmin
def _arg_spec(extremum):
    def infer(inputs, axis, keepdims):
        (x,) = inputs
        axes = tuple(range(x.ndim)) if axis is None else (stored_axis(axis, x.ndim),)
        keepdims = stored_flag(keepdims, "keepdims")
        _nonempty(extremum, x, axes)
        return reduced_shape(x.shape, axes, keepdims), np.dtype(np.intp)
    return infer


def _arg_op(name, kernel, torch_name):
    def run(x, axis, keepdims):
        return kernel(x, axis=axis, keepdims=keepdims)
    opdef = defop(name, run, _arg_spec(name[3:]), None, flops=input_flops,
                  unsupported={"scalar": "its result is an integer index; the scalar path computes floats"},
                  torch=lambda T, axis, keepdims: lambda x: getattr(T, torch_name)(x, dim=axis, keepdim=keepdims))

    def fn(x: TensorLike, axis: int | None = None, keepdims: bool = False) -> Tensor:
        (x,) = coerce(x)
        if axis is not None:
            if isinstance(axis, (tuple, list)):
                raise TypeError(f"{name}: axis must be one integer or None, as in numpy, got {axis!r} "
                                f"(at {user_frame()})")
            (axis,) = op_axes(name, axis, x.ndim)
        return apply(name, (x,), {"axis": axis, "keepdims": bool(keepdims)})
    fn.__doc__ = (f"numpy.{name}: the index of the {name[3:]} along ``axis`` (None: of the flattened tensor), "
                  f"as an integer tensor; not differentiable.")
    return opdef.publish(fn)


argmax = _arg_op("argmax", np.argmax, "argmax")
argmin = _arg_op("argmin", np.argmin, "argmin")


# ------------------------------------------------------------------ shape-driven helpers for gradients
def _size_kernel(x, axis, dtype):
    n = 1
    for a in axis:
        n *= x.shape[a]
    return np.asarray(n, dtype=dtype)


def _size_torch(T, axis, dtype):
    to = T.from_numpy(np.zeros((), dtype)).dtype
    return lambda x: T.tensor(math.prod(x.shape[a] for a in axis), dtype=to)


def _size_spec(inputs, axis, dtype):
    (x,) = inputs
    stored_axes(axis, x.ndim)
    return (), stored_dtype(dtype)


_SIZE = defop("size", _size_kernel, _size_spec, None, SHAPE_ONLY,
              unsupported={"scalar": SPECIALIZED}, torch=_size_torch,
              doc="number of elements of x over axis (runtime shape)")


@_SIZE.publish
def size(x: TensorLike, axis: int | Sequence[int] | None = None, dtype: npt.DTypeLike = np.int64) -> Tensor:
    """How many elements of ``x`` lie along ``axis`` (None: all of them), as a 0-d tensor of ``dtype``:
    numpy.size, read from the run-time shape where the static one has None."""
    (x,) = coerce(x)
    axes = op_axes("size", axis, x.ndim)
    if getattr(x, "_eager", False):          # eager in, eager out (count gives a graph constant)
        return apply("size", (x,), {"axis": axes, "dtype": np.dtype(dtype)})
    return count(x, axes, dtype)
