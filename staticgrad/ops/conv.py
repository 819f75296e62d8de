"""Convolutions with torch's semantics: conv2d, conv_transpose2d (exactly conv2d's gradient with respect
to its input), conv1d (conv2d over an added axis), and conv2d_weight, conv2d's gradient with respect to its
weight (internal). The three ops are linear in each input and their VJPs are written with each other, so
gradients of any order are graph.

Attributes are stored in one form, which the shape rules demand of every node (one read from a file too):
``stride`` and ``dilation`` pairs of ints >= 1, ``padding`` (top, bottom, left, right) ints >= 0, ``groups``
an int >= 1. Where a gradient is built before sizes are known (a None dim), the op reads the size it must
give from an extra input at run time: conv_transpose2d(g, w, like) gives like's height and width (its
``output_padding`` is then None), conv2d_weight(x, g, like) gives a kernel of like's size (``kernel`` None).
"""
from __future__ import annotations

import math

import numpy as np

from ..tensor import ShapeError, Tensor, TensorLike, format_shape, user_frame
from .broadcast import expand_dims, squeeze
from .im2col import conv2d_kernel, conv2d_weight_kernel, conv_transpose2d_kernel, out_length, transposed_length
from .registry import C_ORDER, OUT, apply, coerce, defop, integers
from .shape import reshape

SCALAR_WHY = ("a sum of C*kh*kw products per element, in the order of a BLAS product over im2col patches; "
              "plans with a convolution are not the tiny ones scalar code is for")


# ------------------------------------------------------------------ what users write -> the stored form
def _ints(value, n, what, low):
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
    return tuple(p for p in _ints(padding, len(kernel), "padding", 0) for _ in range(2))


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


def _no_tensor(op, stride):
    if isinstance(stride, (Tensor, np.ndarray)) or hasattr(stride, "_eager"):
        raise TypeError(f"{op}: the third argument is the stride, got a tensor; a bias is passed as bias=... "
                        f"(at {user_frame()})")


def _conv_attrs(kernel, stride, padding, dilation, groups):
    n = len(kernel)
    stride, dilation = _ints(stride, n, "stride", 1), _ints(dilation, n, "dilation", 1)
    return {"stride": stride, "padding": _padding(padding, kernel, stride, dilation),
            "dilation": dilation, "groups": _groups(groups)}


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
    dtype = np.result_type(*[t.dtype for t in tensors])
    if dtype.kind != "f":
        raise TypeError("takes real floating-point tensors, got " + " and ".join(str(t.dtype) for t in tensors))
    return dtype


def _rank(shape, what, names):
    if len(shape) != len(names):
        raise ShapeError(f"{what} must be ({', '.join(names)}), got shape {format_shape(shape)}")


def _divides(groups, size, what):
    if size is not None and size % groups:
        raise ShapeError(f"groups={groups} does not divide the {size} {what}")


def conv_shape(x, w, stride, padding, dilation, groups, names=("H", "W")):
    """The result shape of a convolution of an x of shape (N, C, *spatial) by a w of shape (O, C/groups,
    *kernel), checked (any number of spatial axes: conv1d checks with its names before building conv2d)."""
    _rank(x, "the input", ("N", "C") + names)
    _rank(w, "the weight", ("out", "in/groups") + tuple("k" + n.lower() for n in names))
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


def _conv2d_spec(inputs, stride, padding, dilation, groups):
    if len(inputs) != 2:
        raise TypeError(f"takes 2 inputs, got {len(inputs)}")
    _stored(stride, padding, dilation, groups)
    x, w = inputs
    return conv_shape(x.shape, w.shape, stride, padding, dilation, groups), _float_dtype(x, w)


def _transpose_spec(inputs, stride, padding, dilation, groups, output_padding):
    if len(inputs) not in (2, 3):
        raise TypeError(f"takes 2 inputs (or 3, the last giving the size), got {len(inputs)}")
    _stored(stride, padding, dilation, groups)
    x, w = inputs[:2]
    _rank(x.shape, "the input", ("N", "C_in", "H", "W"))
    _rank(w.shape, "the weight", ("in", "out/groups", "kh", "kw"))
    ci, cog = x.shape[1], w.shape[1]
    _divides(groups, ci if ci is not None else w.shape[0], "input channels")
    if ci is not None and w.shape[0] is not None and ci != w.shape[0]:
        raise ShapeError(f"the input has {ci} channels but the weight {format_shape(w.shape)} takes {w.shape[0]}")
    if len(inputs) == 3:
        if output_padding is not None:
            raise TypeError(f"output_padding must be None when a third input gives the size, got {output_padding!r}")
        _rank(inputs[2].shape, "the size reference", ("N", "C", "H", "W"))
        given = inputs[2].shape[2:]
    else:
        _stored_ints(output_padding, 2, "output_padding", 0)
        given = (None, None)
    sizes = tuple(_transposed(size, k, axis, stride, padding, dilation, output_padding, like)
                  for axis, (size, k, like) in enumerate(zip(x.shape[2:], w.shape[2:], given)))
    return (x.shape[0], None if cog is None else cog * groups) + sizes, _float_dtype(x, w)


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


def _weight_spec(inputs, stride, padding, dilation, groups, kernel):
    if len(inputs) not in (2, 3):
        raise TypeError(f"takes 2 inputs (or 3, the last giving the kernel size), got {len(inputs)}")
    _stored(stride, padding, dilation, groups)
    x, g = inputs[:2]
    if len(inputs) == 3:
        if kernel is not None:
            raise TypeError(f"kernel must be None when a third input gives the size, got {kernel!r}")
        _rank(inputs[2].shape, "the size reference", ("out", "in/groups", "kh", "kw"))
        kernel = inputs[2].shape[2:]
    else:
        _stored_ints(kernel, 2, "kernel", 1)
    _rank(g.shape, "the output gradient", ("N", "out", "OH", "OW"))
    c, o = x.shape[1] if x.ndim == 4 else None, g.shape[1]
    w = (o, None if c is None or c % groups else c // groups) + tuple(kernel)
    n, _, *sizes = conv_shape(x.shape, w, stride, padding, dilation, groups)
    for want, got in zip([n] + sizes, (g.shape[0],) + g.shape[2:]):
        if want is not None and got is not None and want != got:
            raise ShapeError(f"the output gradient {format_shape(g.shape)} does not fit the input "
                             f"{format_shape(x.shape)} (the convolution gives {format_shape((n, o, *sizes))})")
    return w, _float_dtype(x, g)


# ------------------------------------------------------------------ gradients: each op's VJPs are the others
def to_input(g, w, x, attrs):
    """conv_transpose2d(g, w) of x's height and width: the gradient of conv2d(x, w) with respect to x.
    Its output_padding is the rows and columns of x no window reached; unknown sizes: read from x."""
    sizes, kernel = x.shape[2:], w.shape[2:]
    if None in sizes or None in kernel:
        return apply("conv_transpose2d", (g, w, x), dict(attrs, output_padding=None))
    extra = tuple((size + before + after - d * (k - 1) - 1) % s for size, k, s, before, after, d in
                  zip(sizes, kernel, attrs["stride"], attrs["padding"][::2], attrs["padding"][1::2], attrs["dilation"]))
    return apply("conv_transpose2d", (g, w), dict(attrs, output_padding=extra))


def to_weight(x, g, w, attrs):
    """conv2d_weight(x, g) of w's kernel size: the gradient of conv2d(x, w) with respect to w."""
    if None in w.shape[2:]:
        return apply("conv2d_weight", (x, g, w), dict(attrs, kernel=None))
    return apply("conv2d_weight", (x, g), dict(attrs, kernel=tuple(w.shape[2:])))


def _conv2d_vjp(g, out, x, w, **attrs):
    return to_input(g, w, x, attrs), to_weight(x, g, w, attrs)


def _transpose_vjp(g, out, x, w, *like, output_padding, **attrs):
    # conv_transpose2d(x, w) is conv2d(., w)'s gradient: its own are conv2d of g (rows that no window
    # reached, past output_padding's first stride, cropped) and conv2d_weight with g as the input.
    cut = [s * (e // s) for e, s in zip(output_padding or (0, 0), attrs["stride"])]
    if any(cut):
        g = g[:, :, :-cut[0] or None, :-cut[1] or None]
    return (apply("conv2d", (g, w), attrs), to_weight(g, x, w, attrs)) + (None,) * len(like)


def _weight_vjp(v, out, x, g, *like, kernel, **attrs):
    # conv2d_weight(x, g) is bilinear: <v, conv2d_weight(x, g)> = <conv2d(x, v), g> = <x, conv_transpose2d(g, v)>
    return (to_input(g, v, x, attrs), apply("conv2d", (x, v), attrs)) + (None,) * len(like)


# ------------------------------------------------------------------ costs and torch twins
def _conv2d_flops(node, shapes):
    return 2 * math.prod(shapes[node.id]) * math.prod(shapes[node.inputs[1]][1:])


def _transpose_flops(node, shapes):
    return 2 * math.prod(shapes[node.inputs[0]]) * math.prod(shapes[node.inputs[1]][1:])


def _weight_flops(node, shapes):
    return 2 * math.prod(shapes[node.inputs[1]]) * math.prod(shapes[node.id][1:])


def _torch_conv2d(T, stride, padding, dilation, groups):
    F, (t, b, left, right) = T.nn.functional, padding

    def run(x, w):
        if (t, left) != (b, right):
            x, t_, l_ = F.pad(x, (left, right, t, b)), 0, 0
        else:
            t_, l_ = t, left
        return F.conv2d(x, w, stride=stride, padding=(t_, l_), dilation=dilation, groups=groups)
    return run


def _torch_transpose(T, stride, padding, dilation, groups, output_padding):
    F, (t, b, left, right) = T.nn.functional, padding

    def run(x, w, *like):
        if like or (t, left) != (b, right):
            # torch crops its padding evenly: compute it all, then cut (or extend by zeros) to the size.
            full = F.conv_transpose2d(x, w, stride=stride, groups=groups, dilation=dilation)
            sizes = like[0].shape[2:] if like else [
                transposed_length(n, k, s, p0, p1, d, e) for n, k, s, p0, p1, d, e in
                zip(x.shape[2:], w.shape[2:], stride, padding[::2], padding[1::2], dilation, output_padding)]
            full = F.pad(full, (0, max(0, left + sizes[1] - full.shape[3]), 0, max(0, t + sizes[0] - full.shape[2])))
            return full[:, :, t:t + sizes[0], left:left + sizes[1]]
        return F.conv_transpose2d(x, w, stride=stride, padding=(t, left), output_padding=output_padding,
                                  groups=groups, dilation=dilation)
    return run


def _torch_weight(T, stride, padding, dilation, groups, kernel):
    F, (t, b, left, right) = T.nn.functional, padding

    def run(x, g, *like):
        size = (g.shape[1], x.shape[1] // groups) + tuple(kernel or like[0].shape[2:])
        return T.nn.grad.conv2d_weight(F.pad(x, (left, right, t, b)), size, g, stride=stride, dilation=dilation,
                                       groups=groups)
    return run


_CONV2D = defop("conv2d", conv2d_kernel, _conv2d_spec, _conv2d_vjp, OUT | C_ORDER, flops=_conv2d_flops,
                torch=_torch_conv2d, unsupported={"scalar": SCALAR_WHY},
                doc="conv2d(x, w): torch.nn.functional.conv2d over NCHW x, w (out, in/groups, kh, kw)")
_TRANSPOSE = defop("conv_transpose2d", conv_transpose2d_kernel, _transpose_spec, _transpose_vjp, OUT | C_ORDER,
                   flops=_transpose_flops, torch=_torch_transpose,
                   unsupported={"scalar": SCALAR_WHY},
                   doc="conv_transpose2d(x, w): torch.nn.functional.conv_transpose2d, w (in, out/groups, kh, kw)")
_WEIGHT = defop("conv2d_weight", conv2d_weight_kernel, _weight_spec, _weight_vjp, OUT | C_ORDER,
                flops=_weight_flops, torch=_torch_weight, unsupported={"scalar": SCALAR_WHY},
                public=False, doc="conv2d_weight(x, g): the gradient of conv2d(x, w) with respect to w")


# ------------------------------------------------------------------ the public functions
def _biased(y, bias, rank):
    if bias is None:
        return y
    (bias,) = coerce(bias)
    if bias.ndim != 1 or None not in (bias.shape[0], y.shape[1]) and bias.shape[0] != y.shape[1]:
        raise ShapeError(f"the bias must be ({y.shape[1]},), one per output channel, got shape "
                         f"{format_shape(bias.shape)}")
    return y + reshape(bias, (-1,) + (1,) * rank)


@_CONV2D.publish
def conv2d(x: TensorLike, w: TensorLike, stride=1, padding=0, dilation=1, groups=1, *, bias=None) -> Tensor:
    """torch.nn.functional.conv2d: x (N, C, H, W), w (out, C/groups, kh, kw); ``stride`` and ``dilation`` an
    int or a pair, ``padding`` an int, a pair, "valid" or "same" (stride 1 only; an odd total padding puts
    the extra row and column at the bottom and right, as torch does). ``bias`` (out,), keyword only, is
    added after the op (a separate add, which later passes see)."""
    _no_tensor("conv2d", stride)
    x, w = coerce(x, w)
    at_line("conv2d", _rank, w.shape, "the weight", ("out", "in/groups", "kh", "kw"))
    attrs = at_line("conv2d", _conv_attrs, w.shape[2:], stride, padding, dilation, groups)
    return at_line("conv2d", _biased, apply("conv2d", (x, w), attrs), bias, 2)


@_TRANSPOSE.publish
def conv_transpose2d(x: TensorLike, w: TensorLike, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     bias=None) -> Tensor:
    """torch.nn.functional.conv_transpose2d: x (N, C_in, H, W), w (C_in, out/groups, kh, kw); the gradient of
    conv2d with respect to its input. ``output_padding`` (< stride or dilation) adds rows and columns at the
    bottom and right. ``bias`` (out,), keyword only, is added after the op."""
    _no_tensor("conv_transpose2d", stride)
    x, w = coerce(x, w)
    attrs = at_line("conv_transpose2d", _transpose_attrs, stride, padding, output_padding, groups, dilation)
    return at_line("conv_transpose2d", _biased, apply("conv_transpose2d", (x, w), attrs), bias, 2)


def _transpose_attrs(stride, padding, output_padding, groups, dilation):
    if isinstance(padding, str):
        raise TypeError(f"padding must be an int or a pair, got {padding!r}")
    attrs = _conv_attrs((None, None), stride, padding, dilation, groups)
    return dict(attrs, output_padding=_ints(output_padding, 2, "output_padding", 0))


def conv1d(x: TensorLike, w: TensorLike, stride=1, padding=0, dilation=1, groups=1, *, bias=None) -> Tensor:
    """torch.nn.functional.conv1d: x (N, C, L), w (out, C/groups, k); padding an int, "valid" or "same".
    Built as conv2d over an added axis of length 1."""
    _no_tensor("conv1d", stride)
    x, w = coerce(x, w)
    at_line("conv1d", _rank, w.shape, "the weight", ("out", "in/groups", "kl"))
    attrs = at_line("conv1d", _conv_attrs, w.shape[2:], stride, padding, dilation, groups)
    at_line("conv1d", conv_shape, x.shape, w.shape, attrs["stride"], attrs["padding"], attrs["dilation"],
            attrs["groups"], ("L",))
    attrs2d = {"stride": (1,) + attrs["stride"], "padding": (0, 0) + attrs["padding"],
               "dilation": (1,) + attrs["dilation"], "groups": attrs["groups"]}
    y = squeeze(apply("conv2d", (expand_dims(x, 2), expand_dims(w, 2)), attrs2d), 2)
    return at_line("conv1d", _biased, y, bias, 1)
