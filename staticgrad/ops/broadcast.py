"""Broadcasts and the axes they add: broadcast_to, broadcast_like (to a shape read at run time),
expand_dims, squeeze, and sum_like, which sums a broadcast gradient back (broadcast_like's VJP)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..tensor import ShapeError, Tensor, TensorLike, format_shape
from .registry import (
    BROADCAST,
    LAYOUT,
    REARRANGES,
    SHAPE_OF_REF,
    SHAPE_REF,
    VIEW,
    apply,
    broadcast_shapes,
    coerce,
    defop,
    shifted_axes,
    stored_axes,
    stored_sizes,
)
from .shape import SPECIALIZED, identity_of, op_axes


def _broadcast_to_spec(inputs, shape):
    (x,) = inputs
    stored_sizes(shape)
    if broadcast_shapes(x.shape, shape) != tuple(shape):
        raise ShapeError(f"cannot broadcast {format_shape(x.shape)} to {format_shape(shape)}")
    return tuple(shape), x.dtype


def _broadcast_like_spec(inputs):
    x, ref = inputs
    both = broadcast_shapes(x.shape, ref.shape)
    # The result always has ref's shape: where ref's size is static, so is the result's.
    return tuple(b if r is None else r for r, b in zip(ref.shape, both[len(both) - len(ref.shape):])), x.dtype


def _broadcast_like_kernel(x, ref):
    return np.broadcast_to(x, ref.shape)


def _broadcast_like_specialize(node, shapes, nodes):
    if tuple(shapes[node.inputs[0]]) == tuple(shapes[node.id]):      # nothing to stretch at these sizes
        return identity_of(node)
    return node.copy(op="broadcast_to", inputs=node.inputs[:1], attrs={"shape": tuple(shapes[node.id])})


# The gradient of a broadcast is the incoming gradient: autodiff's sum_to_shape reduces it back. x
# broadcasts against ref (core_axes=0) so that it does so from the run-time shapes where both have a
# None: x (None, 3) fed (1, 3) is stretched by a ref fed (4, 3).
_BROADCAST_TO = defop("broadcast_to", np.broadcast_to, _broadcast_to_spec, lambda g, out, x, shape: (g,),
                      VIEW | BROADCAST | REARRANGES, torch=lambda T, shape: lambda x: x.expand(shape))
_BROADCAST_LIKE = defop("broadcast_like", _broadcast_like_kernel, _broadcast_like_spec,
                        lambda g, out, x, ref: (g, None), VIEW | SHAPE_REF | BROADCAST | SHAPE_OF_REF,
                        specialize=_broadcast_like_specialize, unsupported={"scalar": SPECIALIZED}, core_axes=0,
                        torch=lambda T: lambda x, ref: x.expand(ref.shape))


@_BROADCAST_LIKE.publish
def broadcast_like(x: TensorLike, like: TensorLike) -> Tensor:
    """``x`` broadcast to ``like``'s shape, read at run time (numpy's rules; the result is a view)."""
    x, like = coerce(x, like)
    return apply("broadcast_like", (x, like))


@_BROADCAST_TO.publish
def broadcast_to(x: TensorLike, shape: Sequence[int]) -> Tensor:
    """numpy.broadcast_to (a view)."""
    (x,) = coerce(x)
    return apply("broadcast_to", (x,), {"shape": tuple(int(d) for d in shape)})


def _expand_dims_spec(inputs, axis):
    (x,) = inputs
    stored_axes(axis, x.ndim + len(axis) if isinstance(axis, tuple) else 0)
    shape = list(x.shape)
    for a in axis:
        shape.insert(a, 1)
    return tuple(shape), x.dtype


def _squeeze_spec(inputs, axis):
    (x,) = inputs
    for a in stored_axes(axis, x.ndim):
        if x.shape[a] not in (1, None):
            raise ShapeError(f"cannot squeeze axis {a} of size {x.shape[a]} in {format_shape(x.shape)}")
    return tuple(d for i, d in enumerate(x.shape) if i not in axis), x.dtype


def _squeeze_kernel(x, axis):
    return np.squeeze(x, axis=axis)


def _torch_unsqueeze(T, axis):
    def run(x):
        for a in axis:
            x = x.unsqueeze(a)
        return x
    return run


def _torch_squeeze(T, axis):
    def run(x):
        for a in sorted(axis, reverse=True):
            x = x.squeeze(a)
        return x
    return run


_EXPAND_DIMS = defop("expand_dims", np.expand_dims, _expand_dims_spec, lambda g, out, x, axis: (squeeze(g, axis),),
                     VIEW | LAYOUT | REARRANGES, torch=_torch_unsqueeze, batch=shifted_axes("axis"))
_SQUEEZE = defop("squeeze", _squeeze_kernel, _squeeze_spec, lambda g, out, x, axis: (expand_dims(g, axis),),
                 VIEW | LAYOUT | REARRANGES, torch=_torch_squeeze, batch=shifted_axes("axis"))


@_EXPAND_DIMS.publish
def expand_dims(x: TensorLike, axis: int | Sequence[int]) -> Tensor:
    """Insert size-1 axes at ``axis`` (positions in the result, like numpy.expand_dims)."""
    (x,) = coerce(x)
    axes = op_axes("expand_dims", axis, x.ndim + (len(axis) if isinstance(axis, (tuple, list)) else 1))
    return apply("expand_dims", (x,), {"axis": axes})


@_SQUEEZE.publish
def squeeze(x: TensorLike, axis: int | Sequence[int]) -> Tensor:
    """numpy.squeeze of the size-1 axes ``axis``."""
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


def _sum_like_specialize(node, shapes, nodes):
    lead, kept = unstretched_axes(shapes[node.inputs[0]], shapes[node.inputs[1]])
    if not lead and not kept:        # nothing was stretched at these sizes: the gradient passes as is
        return identity_of(node)
    if not (lead and kept) and node.dtype.kind in "fc":
        # the one np.sum the kernel would make, with the axes known now: the reference is not read
        # (integers are left alone: np.sum widens them, sum_like keeps g's dtype)
        return node.copy(op="sum", inputs=node.inputs[:1], attrs={"axis": lead or kept, "keepdims": not lead})
    return node


def _sum_like_spec(inputs):
    x, like = inputs
    # refused only if no run-time sizes could make it work: a None may be 1 or any size
    fits = like.ndim <= x.ndim and all(d is None or e is None or d in (1, e)
                                       for d, e in zip(like.shape[::-1], x.shape[::-1]))
    if not fits:
        raise ShapeError(f"{format_shape(like.shape)} does not broadcast to {format_shape(x.shape)}")
    return like.shape, x.dtype


_SUM_LIKE = defop("sum_like", _sum_like_kernel, _sum_like_spec,
                  lambda g, out, gin, ref: (apply("broadcast_like", (g, gin)), None), SHAPE_REF | SHAPE_OF_REF,
                  specialize=_sum_like_specialize, torch=lambda T: lambda g, ref: g.sum_to_size(ref.shape),
                  unsupported={"scalar": "a sum over both leading and stretched axes has no scalar form yet; "
                                         "plans turn the others into a sum or nothing"},
                  doc="sum g over the axes along which ref was broadcast, found from ref's run-time shape")


@_SUM_LIKE.publish
def sum_like(x: TensorLike, like: TensorLike) -> Tensor:
    """``x`` summed back to ``like``'s shape: over the axes that broadcasting ``like`` to x's shape adds or
    stretches, found from the run-time shapes (the gradient of broadcast_like)."""
    x, like = coerce(x, like)
    return apply("sum_like", (x, like))
