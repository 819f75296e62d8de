"""Convolutions with torch's semantics: conv2d, conv_transpose2d (exactly conv2d's gradient with respect
to its input), conv1d (conv2d over an added axis), and conv2d_weight, conv2d's gradient with respect to its
weight (internal). The three ops are linear in each input and their VJPs are written with each other, so
gradients of any order are graph.

What each op is given is checked in conv_rules (the stored form of the attributes, the shape rules); its
numpy kernel is in im2col, its scalar rule in conv_scalar. Where a gradient is built before sizes are known
(a None dim), the op reads the size it must give from an extra input at run time: conv_transpose2d(g, w,
like) gives like's height and width (its ``output_padding`` is then None), conv2d_weight(x, g, like) a
kernel of like's size (``kernel`` None).
"""
from __future__ import annotations

from ..tensor import ShapeError, Tensor, TensorLike, format_shape
from . import conv_scalar as scalar
from .broadcast import expand_dims, squeeze
from .conv_rules import (
    at_line,
    conv2d_spec,
    conv_attrs,
    conv_shape,
    ints,
    no_tensor,
    rank,
    transpose_attrs,
    transpose_spec,
    weight_spec,
)
from .im2col import (
    conv2d_kernel,
    conv2d_weight_kernel,
    conv_transpose2d_kernel,
    scratch_sizes,
    transpose_sizes,
    transposed_length,
    weight_sizes,
)
from .registry import C_ORDER, OUT, apply, coerce, defop
from .shape import reshape


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
def _twice(work):
    """FLOPs: a multiply and an add per product, products with the padding included (as
    torch.utils.flop_counter counts a convolution)."""
    return lambda node, shapes: 2 * work(node, shapes)


def torch_conv2d(T, stride, padding, dilation, groups):
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


def conv_scratch(node, shapes):
    """The buffers a plan hands conv2d's kernel: the unfolded input (im2col), and in the row layout the
    product before its crop."""
    x, w = (shapes[i] for i in node.inputs[:2])
    a = node.attrs
    return [((size,), node.dtype) for size in scratch_sizes(x, w, a["stride"], a["padding"], a["dilation"],
                                                             a["groups"])]


def transpose_scratch(node, shapes):
    """The buffers a plan hands conv_transpose2d's kernel: its input widened, the product, the padded sums."""
    x, w = (shapes[i] for i in node.inputs[:2])
    like = shapes[node.inputs[2]] if len(node.inputs) > 2 else None
    a = node.attrs
    sizes = transpose_sizes(x, w, like, a["stride"], a["padding"], a["dilation"], a["groups"], a["output_padding"])
    return [((size,), node.dtype) for size in sizes]


def weight_scratch(node, shapes):
    """The buffers a plan hands conv2d_weight's kernel: the patches, g widened."""
    x, g = (shapes[i] for i in node.inputs[:2])
    a = node.attrs
    kernel = a["kernel"] or shapes[node.inputs[2]][2:]
    sizes = weight_sizes(x, g, kernel, a["stride"], a["padding"], a["dilation"], a["groups"])
    return [((size,), node.dtype) for size in sizes]


_CONV2D = defop("conv2d", conv2d_kernel, conv2d_spec, _conv2d_vjp, OUT | C_ORDER, torch=torch_conv2d,
                scratch=conv_scratch,
                flops=_twice(scalar.conv2d_work), scalar_rule=scalar.conv2d_scalar, scalar_work=scalar.conv2d_work,
                doc="conv2d(x, w): torch.nn.functional.conv2d over NCHW x, w (out, in/groups, kh, kw)")
_TRANSPOSE = defop("conv_transpose2d", conv_transpose2d_kernel, transpose_spec, _transpose_vjp, OUT | C_ORDER,
                   torch=_torch_transpose, scratch=transpose_scratch, flops=_twice(scalar.transpose_work),
                   scalar_rule=scalar.transpose_scalar, scalar_work=scalar.transpose_work,
                   doc="conv_transpose2d(x, w): torch.nn.functional.conv_transpose2d, w (in, out/groups, kh, kw)")
_WEIGHT = defop("conv2d_weight", conv2d_weight_kernel, weight_spec, _weight_vjp, OUT | C_ORDER, torch=_torch_weight,
                scratch=weight_scratch,
                flops=_twice(scalar.weight_work), scalar_rule=scalar.weight_scalar, scalar_work=scalar.weight_work,
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
    no_tensor("conv2d", stride)
    x, w = coerce(x, w)
    at_line("conv2d", rank, w.shape, "the weight", ("out", "in/groups", "kh", "kw"))
    attrs = at_line("conv2d", conv_attrs, w.shape[2:], stride, padding, dilation, groups)
    return at_line("conv2d", _biased, apply("conv2d", (x, w), attrs), bias, 2)


@_TRANSPOSE.publish
def conv_transpose2d(x: TensorLike, w: TensorLike, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     bias=None) -> Tensor:
    """torch.nn.functional.conv_transpose2d: x (N, C_in, H, W), w (C_in, out/groups, kh, kw); the gradient of
    conv2d with respect to its input. ``output_padding`` (< stride or dilation) adds rows and columns at the
    bottom and right. ``bias`` (out,), keyword only, is added after the op."""
    no_tensor("conv_transpose2d", stride)
    x, w = coerce(x, w)
    attrs = at_line("conv_transpose2d", transpose_attrs, stride, padding, output_padding, groups, dilation)
    return at_line("conv_transpose2d", _biased, apply("conv_transpose2d", (x, w), attrs), bias, 2)


@_WEIGHT.publish
def conv2d_weight(x: TensorLike, g: TensorLike, kernel, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """The gradient of conv2d(x, w, stride, padding, dilation, groups) with respect to its weight w, for the
    gradient ``g`` of its output: (out, C/groups) + kernel. ``kernel`` is (kh, kw), or a tensor of w's shape
    (its size is then read at run time: what a gradient built before sizes are known uses)."""
    x, g = coerce(x, g)
    if isinstance(kernel, Tensor) or hasattr(kernel, "_eager"):
        size, inputs, stored = kernel.shape[2:], (x, g, kernel), None
    else:
        size = stored = at_line("conv2d_weight", ints, kernel, 2, "kernel", 1)
        inputs = (x, g)
    attrs = at_line("conv2d_weight", conv_attrs, size, stride, padding, dilation, groups)
    return apply("conv2d_weight", inputs, dict(attrs, kernel=stored))


def conv1d(x: TensorLike, w: TensorLike, stride=1, padding=0, dilation=1, groups=1, *, bias=None) -> Tensor:
    """torch.nn.functional.conv1d: x (N, C, L), w (out, C/groups, k); padding an int, "valid" or "same".
    Built as conv2d over an added axis of length 1."""
    no_tensor("conv1d", stride)
    x, w = coerce(x, w)
    at_line("conv1d", rank, w.shape, "the weight", ("out", "in/groups", "kl"))
    attrs = at_line("conv1d", conv_attrs, w.shape[2:], stride, padding, dilation, groups)
    at_line("conv1d", conv_shape, x.shape, w.shape, attrs["stride"], attrs["padding"], attrs["dilation"],
            attrs["groups"], ("L",))
    attrs2d = {"stride": (1,) + attrs["stride"], "padding": (0, 0) + attrs["padding"],
               "dilation": (1,) + attrs["dilation"], "groups": attrs["groups"]}
    y = squeeze(apply("conv2d", (expand_dims(x, 2), expand_dims(w, 2)), attrs2d), 2)
    return at_line("conv1d", _biased, y, bias, 1)
