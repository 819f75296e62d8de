"""Ops that move data without arithmetic: reshape, transpose, concatenate, stack (indexing: index.py)."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..tensor import ShapeError, Tensor, TensorLike, format_shape, user_frame
from .index import getitem
from .registry import (
    LAYOUT,
    NONDIFF,
    REARRANGES,
    SHAPE_OF_REF,
    SHAPE_ONLY,
    SHAPE_REF,
    VIEW,
    apply,
    coerce,
    defop,
    integers,
    normalize_axis,
    stored_axis,
    stored_dtype,
    stored_sizes,
)

# Why an op that a plan rewrites at its concrete sizes needs no lowering of its own.
SPECIALIZED = "rewritten into other ops once a plan knows every size"


def identity_of(node):
    """``node`` as the identity of its first input: what a plan makes of a shape op that changes nothing
    at its concrete sizes (readers then read the input itself)."""
    return node.copy(op="stop_gradient", inputs=node.inputs[:1], attrs={})


def op_axes(op, axis, ndim):
    """normalize_axis, failing with the op's name and the user's line like every build-time error."""
    return at_user_line(op, normalize_axis, axis, ndim)


def at_user_line(op, check, *args):
    """``check(*args)``; a ShapeError or TypeError it raises names the op and the user's line."""
    try:
        return check(*args)
    except (ShapeError, TypeError) as err:
        raise type(err)(f"{op}: {err} (at {user_frame()})") from None


# ------------------------------------------------------------------ reshape
def _reshape_spec(inputs, shape):
    (x,) = inputs
    stored_sizes(shape, "sizes", free=isinstance(shape, tuple) and shape.count(-1) == 1)
    if shape.count(-1) > 1:
        raise ShapeError(f"can only infer one dimension, got {shape}")
    known_out = [d for d in shape if d != -1]
    if any(d < 0 for d in known_out):
        raise ShapeError(f"negative size in {shape}")
    if None in x.shape:
        if -1 not in shape:
            return tuple(shape), x.dtype
        return tuple(None if d == -1 else d for d in shape), x.dtype
    total = int(np.prod(x.shape, dtype=np.int64))
    prod = int(np.prod(known_out, dtype=np.int64))
    if -1 in shape:
        if prod == 0 or total % prod:
            raise ShapeError(f"cannot reshape {format_shape(x.shape)} into {format_shape(shape)}")
        return tuple(total // prod if d == -1 else d for d in shape), x.dtype
    if prod != total:
        raise ShapeError(f"cannot reshape {format_shape(x.shape)} ({total} elements) into {format_shape(shape)}")
    return tuple(shape), x.dtype


def _reshape_kernel(x, shape):
    return np.reshape(x, shape)


def _reshape_vjp(g, out, x, shape):
    return (reshape_back(g, x),)


def reshape_back(g, x):
    """``g`` reshaped to ``x``'s shape, from the static shape when it allows, else from x at run time (a
    -1 for the one unknown size cannot be inferred when another size is 0: (None, 0) may be (3, 0))."""
    if x.shape.count(None) == 0 or (x.shape.count(None) == 1 and 0 not in x.shape):
        return reshape(g, tuple(-1 if d is None else d for d in x.shape))
    return apply("reshape_like", (g, x))


def _reshape_like_kernel(x, ref):
    return np.reshape(x, ref.shape)


def _reshape_like_specialize(node, shapes, nodes):
    return node.copy(op="reshape", inputs=node.inputs[:1], attrs={"shape": tuple(shapes[node.id])})


def _reshape_batch(attrs, shapes, stacked):
    # (the number of steps may be known only at run time: -1 stands for it, unless the shape has one)
    return (None if -1 in attrs["shape"] else ({"shape": (-1,) + tuple(attrs["shape"])}, [0]))


_RESHAPE = defop("reshape", _reshape_kernel, _reshape_spec, _reshape_vjp, VIEW | LAYOUT | REARRANGES,
                 torch=lambda T, shape: lambda x: x.reshape(shape), batch=_reshape_batch)
def _reshape_like_spec(inputs):
    x, ref = inputs
    if None not in x.shape + ref.shape and math.prod(x.shape) != math.prod(ref.shape):
        raise ShapeError(f"cannot reshape {format_shape(x.shape)} into {format_shape(ref.shape)}")
    return ref.shape, x.dtype


_RESHAPE_LIKE = defop("reshape_like", _reshape_like_kernel, _reshape_like_spec,
                      lambda g, out, x, ref: (reshape_back(g, x), None), VIEW | SHAPE_REF | SHAPE_OF_REF,
                      specialize=_reshape_like_specialize, unsupported={"scalar": SPECIALIZED},
                      torch=lambda T: lambda x, ref: x.reshape(ref.shape))


@_RESHAPE_LIKE.publish
def reshape_like(x: TensorLike, like: TensorLike) -> Tensor:
    """``x`` reshaped to ``like``'s shape, read at run time."""
    x, like = coerce(x, like)
    return apply("reshape_like", (x, like))


@_RESHAPE.publish
def reshape(x: TensorLike, *shape: int | Sequence[int]) -> Tensor:
    """numpy.reshape; one entry may be -1. ``x.reshape(2, 3)`` and ``reshape(x, (2, 3))`` both work."""
    (x,) = coerce(x)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, np.ndarray)):
        shape = shape[0]
    return apply("reshape", (x,), {"shape": at_user_line("reshape", integers, tuple(shape), "sizes")})


# ------------------------------------------------------------------ transpose
def _transpose_spec(inputs, axes):
    (x,) = inputs
    if not isinstance(axes, tuple) or sorted(integers(axes, "axes")) != list(range(x.ndim)):
        raise ShapeError(f"axes {axes!r} are not a permutation of the {x.ndim} axes of {format_shape(x.shape)}")
    return tuple(x.shape[a] for a in axes), x.dtype


def _transpose_vjp(g, out, x, axes):
    return (transpose(g, tuple(int(i) for i in np.argsort(axes))),)


def _transpose_kernel(x, axes):
    # The method directly: numpy.transpose's Python dispatch costs more than the view it makes.
    return x.transpose(axes) if type(x) is np.ndarray else np.transpose(x, axes)


def _transposes(attrs) -> bool:
    return list(attrs["axes"]) != sorted(attrs["axes"])


_TRANSPOSE = defop("transpose", _transpose_kernel, _transpose_spec, _transpose_vjp, VIEW | LAYOUT | REARRANGES,
                   permutes=_transposes, torch=lambda T, axes: lambda x: x.permute(axes),
                   batch=lambda attrs, shapes, stacked: ({"axes": (0,) + tuple(a + 1 for a in attrs["axes"])}, [0]))


@_TRANSPOSE.publish
def transpose(x: TensorLike, axes: Sequence[int] | None = None) -> Tensor:
    """numpy.transpose: reverse the axes, or permute them as ``axes`` says."""
    (x,) = coerce(x)
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    given = at_user_line("transpose", integers, tuple(axes), "axes")
    axes = tuple(a % max(x.ndim, 1) for a in given)
    if sorted(axes) != list(range(x.ndim)) or any(not -x.ndim <= a < x.ndim for a in given):
        raise ShapeError(f"transpose: axes {given} are not a permutation of the {x.ndim} axes of "
                         f"{format_shape(x.shape)} (at {user_frame()})")
    return apply("transpose", (x,), {"axes": axes})


def swap_last(x):
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, tuple(axes))


# ------------------------------------------------------------------ concatenate, stack and their VJPs
def _concat_spec(inputs, axis):
    first = inputs[0]
    stored_axis(axis, first.ndim)
    for x in inputs[1:]:
        if x.ndim != first.ndim:
            raise ShapeError("all inputs must have the same rank, got "
                             + ", ".join(format_shape(t.shape) for t in inputs))
    shape = []
    for a in range(first.ndim):
        dims = [x.shape[a] for x in inputs]
        if a == axis:
            shape.append(None if None in dims else int(np.sum(dims)))
            continue
        known = {d for d in dims if d is not None}
        if len(known) > 1:
            raise ShapeError(f"sizes differ along axis {a}: " + ", ".join(format_shape(t.shape) for t in inputs))
        shape.append(known.pop() if known else None)
    return tuple(shape), np.result_type(*(x.dtype for x in inputs))


def _concat_kernel(*xs, axis):
    return np.concatenate(xs, axis=axis)


def _concat_vjp(g, out, *xs, axis):
    sizes = [x.shape[axis] for x in xs]
    if None not in sizes:
        grads, start = [], 0
        for n in sizes:
            index = (slice(None),) * axis + (slice(start, start + n),)
            grads.append(getitem(g, index))
            start += n
        return tuple(grads)
    return tuple(apply("split", (g,) + xs, {"axis": axis, "part": i}) for i in range(len(xs)))


def _split_kernel(g, *refs, axis, part):
    start = int(np.sum([r.shape[axis] for r in refs[:part]], dtype=np.int64))
    index = (slice(None),) * axis + (slice(start, start + refs[part].shape[axis]),)
    return g[index]


def _split_spec(inputs, axis, part):
    g, refs = inputs[0], inputs[1:]
    (part,) = integers((part,), "part")
    if not 0 <= part < len(refs):
        raise ShapeError(f"part {part} of {len(refs)} pieces")
    joined = _concat_spec(refs, stored_axis(axis, g.ndim))[0]
    if len(joined) != g.ndim or any(a is not None and b is not None and a != b for a, b in zip(g.shape, joined)):
        raise ShapeError(f"cannot cut {format_shape(g.shape)} as pieces joined into {format_shape(joined)}")
    shape = list(g.shape)
    shape[axis] = refs[part].shape[axis]
    return tuple(shape), g.dtype


def _split_vjp(g, out, gin, *refs, axis, part):
    pieces = [g if i == part else zeros_like(r, g.dtype) for i, r in enumerate(refs)]
    return (concatenate(pieces, axis=axis),) + (None,) * len(refs)


def _split_specialize(node, shapes, nodes):
    axis, part = node.attrs["axis"], node.attrs["part"]
    refs = node.inputs[1:]
    start = sum(shapes[r][axis] for r in refs[:part])
    index = (slice(None),) * axis + (slice(start, start + shapes[refs[part]][axis]),)
    return node.copy(op="getitem", inputs=node.inputs[:1], attrs={"index": index})


_CONCATENATE = defop("concatenate", _concat_kernel, _concat_spec, _concat_vjp, REARRANGES,
                     torch=lambda T, axis: lambda *xs: T.cat(xs, dim=axis))
# sg.ops.split only: sg.split would read as numpy.split, which cuts at given indices
def _split_torch(T, axis, part):
    def run(g, *refs):
        start = sum(r.shape[axis] for r in refs[:part])
        return g.narrow(axis, start, refs[part].shape[axis])
    return run


_SPLIT = defop("split", _split_kernel, _split_spec, _split_vjp, VIEW | SHAPE_REF, specialize=_split_specialize,
               torch=_split_torch,
               unsupported={"scalar": SPECIALIZED}, public=False,
               doc="the part-th piece of g cut as the refs were concatenated: the VJP of concatenate")


@_SPLIT.publish
def split(x: TensorLike, like: Sequence[TensorLike], axis: int = 0, part: int = 0) -> Tensor:
    """The ``part``-th piece of ``x`` cut along ``axis`` as the tensors ``like`` were concatenated there:
    the gradient of concatenate(like, axis) for its ``part``-th input. (Not numpy.split, hence not sg.split.)"""
    x, *like = coerce(x, *like)
    if not 0 <= part < len(like):
        raise ValueError(f"split: part {part} of {len(like)} pieces (at {user_frame()})")
    return apply("split", (x, *like), {"axis": op_axes("split", axis, x.ndim)[0], "part": int(part)})


def _zeros_like_kernel(ref, dtype):
    return np.zeros(ref.shape, dtype=dtype)


def _zeros_like_torch(T, dtype):
    to = T.from_numpy(np.zeros((), dtype)).dtype
    return lambda x: T.zeros(x.shape, dtype=to)


def _zeros_like_spec(inputs, dtype):
    (x,) = inputs
    return x.shape, stored_dtype(dtype)


_ZEROS_LIKE = defop("zeros_like", _zeros_like_kernel, _zeros_like_spec, None,
                    NONDIFF | SHAPE_ONLY | SHAPE_OF_REF, unsupported={"scalar": SPECIALIZED},
                    torch=_zeros_like_torch,
                    doc="zeros of x's shape (read at run time) and ``dtype``")


@_ZEROS_LIKE.publish
def zeros_like(x: TensorLike, dtype: npt.DTypeLike = None) -> Tensor:
    (x,) = coerce(x)
    dtype = np.dtype(dtype or x.dtype)
    if None not in x.shape:
        from ..tensor import constant
        return constant(np.zeros(x.shape, dtype))
    return apply("zeros_like", (x,), {"dtype": dtype})


@_CONCATENATE.publish
def concatenate(tensors: Sequence[TensorLike], axis: int | None = 0) -> Tensor:
    """numpy.concatenate along an existing axis (``axis=None``: of the flattened tensors, as numpy does)."""
    tensors = coerce(*tensors)
    if not tensors:
        raise ValueError(f"concatenate: need at least one tensor (at {user_frame()})")
    if axis is None:
        tensors = tuple(reshape(t, -1) for t in tensors)
        axis = 0
    axis = op_axes("concatenate", axis, tensors[0].ndim)[0]
    return apply("concatenate", tensors, {"axis": axis})


def _stack_spec(inputs, axis):
    stored_axis(axis, inputs[0].ndim + 1)
    try:
        shape, dtype = _concat_spec([_Unsqueezed(x, axis) for x in inputs], axis)
    except ShapeError:
        # Name the shapes the user passed, not the unsqueezed stand-ins.
        raise ShapeError("all inputs must have the same shape, got "
                         + ", ".join(format_shape(x.shape) for x in inputs)) from None
    shape = list(shape)
    shape[axis] = len(inputs)
    return tuple(shape), dtype


class _Unsqueezed:
    """A static stand-in for ``expand_dims(x, axis)`` so stack reuses concatenate's checks."""

    def __init__(self, x, axis):
        s = list(x.shape)
        s.insert(axis, 1)
        self.shape, self.ndim, self.dtype = tuple(s), len(s), x.dtype


def _stack_kernel(*xs, axis):
    return np.stack(xs, axis=axis)


def _stack_vjp(g, out, *xs, axis):
    return tuple(getitem(g, (slice(None),) * axis + (i,)) for i in range(len(xs)))


_STACK = defop("stack", _stack_kernel, _stack_spec, _stack_vjp, REARRANGES,
               torch=lambda T, axis: lambda *xs: T.stack(xs, dim=axis))


@_STACK.publish
def stack(tensors: Sequence[TensorLike], axis: int = 0) -> Tensor:
    """numpy.stack along a new axis."""
    tensors = coerce(*tensors)
    if not tensors:
        raise ValueError(f"stack: need at least one tensor (at {user_frame()})")
    axis = op_axes("stack", axis, tensors[0].ndim + 1)[0]
    return apply("stack", tensors, {"axis": axis})

