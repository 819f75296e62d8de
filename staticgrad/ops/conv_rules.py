"""What the convolutions are given, checked: the user's arguments turned into the one stored form of the
attributes, that form demanded of every node (one read from a file too), and the shape rules.

The stored form: ``stride`` and ``dilation`` pairs of ints >= 1, ``padding`` (top, bottom, left, right) of
ints >= 0, ``groups`` an int >= 1; conv_transpose2d adds ``output_padding`` (a pair, or None when a third
input gives the size), conv2d_weight ``kernel`` (a pair, or None when a third input gives it).
"""
from __future__ import annotations

import numpy as np

from ..tensor import ShapeError, Tensor, format_shape, user_frame
from .im2col import out_length, transposed_length
from .registry import integers


# ------------------------------------------------------------------ what users write -> the stored form
def ints(value, n, what, low):
    """``value`` (an int, or a sequence of ``n`` ints) as a tuple of ``n`` ints >= ``low``."""
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    if len(values) != n:
        raise TypeError(f"{what} must be an int or {n} ints, got {value!r}")
    values = integers(values, what)
    if min(values) < low:
        raise ValueError(f"{what} must be >= {low}, got {value!r}")
    return values


def _padding(padding, kernel, stride, dilation):
    """(before, after) per spatial axis, flat, for an int, ints per axis, "valid" or "same"."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0) * len(kernel)
        if padding != "same":
            raise ValueError(f"padding must be an int, ints per axis, 'valid' or 'same', got {padding!r}")
        if any(s != 1 for s in stride):
            raise ValueError(f"padding='same' is not supported for strided convolutions (stride {stride})")
        if None in kernel:
            raise ValueError("padding='same' needs the kernel size when the expression is built")
        out = ()
        for k, d in zip(kernel, dilation):
            total = d * (k - 1)     # torch puts the odd one at the end (bottom, right)
            out += (total // 2, total - total // 2)
        return out
    return tuple(p for p in ints(padding, len(kernel), "padding", 0) for _ in range(2))


def _groups(groups):
    (groups,) = integers((groups,), "groups")
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    return groups


def at_line(op, make, *args):
    """``make(*args)``; its ShapeError, TypeError or ValueError names the op and the user's line."""
    try:
        return make(*args)
    except (ShapeError, TypeError, ValueError) as err:
        raise type(err)(f"{op}: {err} (at {user_frame()})") from None


def no_tensor(op, stride):
    if isinstance(stride, (Tensor, np.ndarray)) or hasattr(stride, "_eager"):
        raise TypeError(f"{op}: the third argument is the stride, got a tensor; a bias is passed as bias=... "
                        f"(at {user_frame()})")


def conv_attrs(kernel, stride, padding, dilation, groups):
    n = len(kernel)
    stride, dilation = ints(stride, n, "stride", 1), ints(dilation, n, "dilation", 1)
    return {"stride": stride, "padding": _padding(padding, kernel, stride, dilation),
            "dilation": dilation, "groups": _groups(groups)}


def transpose_attrs(stride, padding, output_padding, groups, dilation):
    if isinstance(padding, str):
        raise TypeError(f"padding must be an int or a pair, got {padding!r}")
    attrs = conv_attrs((None, None), stride, padding, dilation, groups)
    return dict(attrs, output_padding=ints(output_padding, 2, "output_padding", 0))


# ------------------------------------------------------------------ the stored form, checked
def _stored_ints(value, n, what, low):
    if not isinstance(value, tuple) or len(value) != n or any(type(v) is not int for v in value):
        raise TypeError(f"{what} must be a tuple of {n} ints, got {value!r}")
    if min(value) < low:
        raise ShapeError(f"{what} must be >= {low}, got {value}")
    return value


def _stored(stride, padding, dilation, groups):
    _stored_ints(stride, 2, "stride", 1)
    _stored_ints(dilation, 2, "dilation", 1)
    _stored_ints(padding, 4, "padding (top, bottom, left, right)", 0)
    if type(groups) is not int or groups < 1:
        raise TypeError(f"groups must be an int >= 1, got {groups!r}")


def _float_dtype(*tensors):
    """numpy's promotion of real floating-point inputs (float32 with float64 gives float64); anything else
    refused, as torch's convolutions refuse it."""
    if any(t.dtype.kind != "f" for t in tensors):
        raise TypeError("takes real floating-point tensors, got " + " and ".join(str(t.dtype) for t in tensors))
    return np.result_type(*[t.dtype for t in tensors])


def rank(shape, what, names):
    if len(shape) != len(names):
        raise ShapeError(f"{what} must be ({', '.join(names)}), got shape {format_shape(shape)}")


def _divides(groups, size, what):
    if size is not None and size % groups:
        raise ShapeError(f"groups={groups} does not divide the {size} {what}")


def conv_shape(x, w, stride, padding, dilation, groups, names=("H", "W")):
    """The result shape of a convolution of an x of shape (N, C, *spatial) by a w of shape (O, C/groups,
    *kernel), checked (any number of spatial axes: conv1d checks with its names before building conv2d)."""
    rank(x, "the input", ("N", "C") + names)
    rank(w, "the weight", ("out", "in/groups") + tuple("k" + n.lower() for n in names))
    (n, c), (o, cg) = x[:2], w[:2]
    _divides(groups, c, "input channels")
    _divides(groups, o, "output channels")
    if c is not None and cg is not None and c != cg * groups:
        raise ShapeError(f"the input has {c} channels but the weight {format_shape(w)} with groups={groups} "
                         f"takes {cg * groups}")
    sizes = ()
    for size, k, s, before, after, d in zip(x[2:], w[2:], stride, padding[::2], padding[1::2], dilation):
        if size is None or k is None:
            sizes += (None,)
            continue
        if size + before + after < d * (k - 1) + 1:
            raise ShapeError(f"the kernel {format_shape(w[2:])} (dilation {dilation}) is larger than the input "
                             f"{format_shape(x[2:])} padded by {padding}")
        sizes += (out_length(size, k, s, before, after, d),)
    return (n, o) + sizes


def conv2d_spec(inputs, stride, padding, dilation, groups):
    if len(inputs) != 2:
        raise TypeError(f"takes 2 inputs, got {len(inputs)}")
    _stored(stride, padding, dilation, groups)
    x, w = inputs
    return conv_shape(x.shape, w.shape, stride, padding, dilation, groups), _float_dtype(x, w)


def transpose_spec(inputs, stride, padding, dilation, groups, output_padding):
    _stored(stride, padding, dilation, groups)
    given = _given(inputs, output_padding, "output_padding", ("N", "C", "H", "W"), 0) or (None, None)
    x, w = inputs[:2]
    rank(x.shape, "the input", ("N", "C_in", "H", "W"))
    rank(w.shape, "the weight", ("in", "out/groups", "kh", "kw"))
    ci, cog = x.shape[1], w.shape[1]
    _divides(groups, ci if ci is not None else w.shape[0], "input channels")
    if ci is not None and w.shape[0] is not None and ci != w.shape[0]:
        raise ShapeError(f"the input has {ci} channels but the weight {format_shape(w.shape)} takes {w.shape[0]}")
    sizes = tuple(_transposed(size, k, axis, stride, padding, dilation, output_padding, like)
                  for axis, (size, k, like) in enumerate(zip(x.shape[2:], w.shape[2:], given)))
    return (x.shape[0], None if cog is None else cog * groups) + sizes, _float_dtype(x, w)


def _given(inputs, value, key, names, low):
    """The sizes a third input gives (its last two axes; attribute ``key`` must then be None), or None after
    checking ``value``, the attribute that gives them instead, as a pair of ints >= ``low``."""
    if len(inputs) not in (2, 3):
        raise TypeError(f"takes 2 inputs (or 3, the last giving the {key} size), got {len(inputs)}")
    if len(inputs) == 2:
        _stored_ints(value, 2, key, low)
        return None
    if value is not None:
        raise TypeError(f"{key} must be None when a third input gives the size, got {value!r}")
    rank(inputs[2].shape, "the size reference", names)
    return inputs[2].shape[2:]


def _transposed(size, k, axis, stride, padding, dilation, extra, like):
    """The output length along ``axis`` (``like``: the reference's, when it gives it), checked."""
    s, d = stride[axis], dilation[axis]
    if extra is not None and extra[axis] >= max(s, d):
        raise ShapeError(f"output_padding {extra} must be smaller than either the stride {stride} or the "
                         f"dilation {dilation}")
    if size is None or k is None:
        return like
    base = transposed_length(size, k, s, padding[2 * axis], padding[2 * axis + 1], d, 0)
    if base < 1:
        raise ShapeError(f"the padding {padding} leaves no output (length {base} along axis {axis + 2})")
    if extra is not None:
        return base + extra[axis]
    if like is not None and not base <= like < base + s:
        raise ShapeError(f"the size reference's length {like} along axis {axis + 2} is not one a convolution "
                         f"could have taken to length {size} (from {base} to {base + s - 1})")
    return like


def weight_spec(inputs, stride, padding, dilation, groups, kernel):
    _stored(stride, padding, dilation, groups)
    kernel = _given(inputs, kernel, "kernel", ("out", "in/groups", "kh", "kw"), 1) or kernel
    x, g = inputs[:2]
    rank(g.shape, "the output gradient", ("N", "out", "OH", "OW"))
    c, o = x.shape[1] if x.ndim == 4 else None, g.shape[1]
    w = (o, None if c is None or c % groups else c // groups) + tuple(kernel)
    n, _, *sizes = conv_shape(x.shape, w, stride, padding, dilation, groups)
    for want, got in zip([n] + sizes, (g.shape[0],) + g.shape[2:]):
        if want is not None and got is not None and want != got:
            raise ShapeError(f"the output gradient {format_shape(g.shape)} does not fit the input "
                             f"{format_shape(x.shape)} (the convolution gives {format_shape((n, o, *sizes))})")
    return w, _float_dtype(x, g)
