"""Specs of the convolutions: conv2d (and conv1d, built on it), conv_transpose2d and the internal
conv2d_weight, over strides, paddings (pairs, "same" with an even kernel), dilations, groups, depthwise,
1x1 and non-square kernels. Sizes are tiny (finite differences cost two evaluations per input element) and
most results have at most 48 elements, so the fuzzer can use them.

The references do not share the kernels' im2col: conv2d sums strided slices of np.pad's output, one per
kernel offset; conv_transpose2d and conv2d_weight are computed from that conv2d as the adjoint maps they
are (one conv2d per element of the input or weight, dotted with the given gradient).
"""
from __future__ import annotations

import warnings

import numpy as np

import staticgrad as sg
from staticgrad.ops.registry import REGISTRY, apply
from tests.op_specs import inputs, normal, spec


def ref_conv2d(x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    top, bottom, left, right = padding
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, h, wd = xp.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, groups, o // groups, oh, ow), np.result_type(x, w))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            out += np.einsum("ngchw,goc->ngohw", patch.reshape(n, groups, cg, oh, ow),
                             w[:, :, i, j].reshape(groups, o // groups, cg))
    return out.reshape(n, o, oh, ow)


def _adjoint(size_of, apply_to, against):
    """The array ``a`` of shape ``size_of`` with a[k] = <apply_to(e_k), against>, e_k the k-th unit array."""
    out = np.zeros(size_of)
    for k in np.ndindex(size_of):
        e = np.zeros(size_of)
        e[k] = 1.0
        out[k] = np.sum(apply_to(e) * against)
    return out


def ref_transpose(x, w, size, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """conv_transpose2d(x, w) to (height, width) ``size``: the adjoint of u -> conv2d(u, w) (of x's size: an
    output_padding of a stride or more adds rows that no window of a conv2d reads)."""
    shape = (x.shape[0], w.shape[1] * groups) + tuple(int(n) for n in size)
    h, wd = x.shape[2:]
    return _adjoint(shape, lambda u: ref_conv2d(u, w, stride, padding, dilation, groups)[:, :, :h, :wd], x)


def ref_weight(x, g, kernel, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """conv2d_weight(x, g): the adjoint of v -> conv2d(x, v)."""
    shape = (g.shape[1], x.shape[1] // groups) + tuple(kernel)
    return _adjoint(shape, lambda v: ref_conv2d(x, v, stride, padding, dilation, groups), g)


def _twin(op, attrs):
    """The op's own torch twin (OpDef.torch) as a spec's: torch's autograd then checks our derivatives."""
    return lambda T, *xs: REGISTRY[op].torch(T, **attrs)(*xs)


def _pads(padding):
    return tuple(p for p in padding for _ in range(2)) if len(padding) == 2 else padding


# ------------------------------------------------------------------ conv2d
# (tag, x shape, w shape, public keywords, stored attributes for the reference)
CONV2D = [
    ("3x3", (2, 2, 4, 4), (3, 2, 3, 3), {}, {}),
    ("stride2-pad1", (1, 2, 5, 5), (2, 2, 3, 3), {"stride": 2, "padding": 1},
     {"stride": (2, 2), "padding": (1, 1, 1, 1)}),
    ("stride2-rows-left-over", (1, 2, 6, 5), (2, 2, 3, 3), {"stride": 2}, {"stride": (2, 2)}),
    ("padding-pair-nonsquare", (1, 2, 4, 5), (2, 2, 2, 3), {"padding": (1, 0)}, {"padding": (1, 1, 0, 0)}),
    ("same-even-kernel", (1, 1, 4, 5), (2, 1, 2, 4), {"padding": "same"}, {"padding": (0, 1, 1, 2)}),
    ("same-dilation2", (1, 2, 4, 5), (2, 2, 3, 3), {"padding": "same", "dilation": 2},
     {"padding": (2, 2, 2, 2), "dilation": (2, 2)}),
    ("valid", (1, 2, 4, 4), (2, 2, 3, 2), {"padding": "valid"}, {}),
    ("dilation2", (1, 2, 6, 5), (2, 2, 2, 2), {"dilation": 2}, {"dilation": (2, 2)}),
    ("stride-dilation-pairs", (1, 1, 5, 6), (2, 1, 3, 2), {"stride": (2, 1), "dilation": (1, 2)},
     {"stride": (2, 1), "dilation": (1, 2)}),
    ("groups2", (1, 4, 4, 4), (4, 2, 3, 3), {"groups": 2}, {"groups": 2}),
    ("depthwise", (1, 3, 4, 4), (3, 1, 3, 3), {"groups": 3, "padding": 1},
     {"groups": 3, "padding": (1, 1, 1, 1)}),
    ("depthwise-multiplier2", (1, 3, 4, 4), (6, 1, 3, 3), {"groups": 3}, {"groups": 3}),
    ("1x1", (2, 3, 3, 3), (2, 3, 1, 1), {}, {}),
    ("1x1-stride2", (1, 3, 5, 4), (2, 3, 1, 1), {"stride": 2}, {"stride": (2, 2)}),
]


def _conv2d_ref(stored):
    return lambda x, w: ref_conv2d(x, w, **stored)


def _conv2d_build(kw):
    return lambda x, w: sg.conv2d(x, w, **kw)


def _conv2d_torch(kw):
    def run(T, x, w):
        with warnings.catch_warnings():     # (torch's note that an even "same" kernel copies the input)
            warnings.simplefilter("ignore", UserWarning)
            return T.nn.functional.conv2d(x, w, **kw)
    return run


# (padding="same" needs the kernel's size when it is built: not from a weight of unknown shape)
for _tag, _xs, _ws, _kw, _stored in CONV2D:
    spec("conv2d", _conv2d_build(_kw), inputs(normal(*_xs), normal(*_ws)), _conv2d_ref(_stored), tag=_tag,
         torch=_conv2d_torch(_kw), dynamic=_kw.get("padding") != "same")

spec("conv2d", lambda x, w, b: sg.conv2d(x, w, padding=1, bias=b), inputs(normal(1, 2, 3, 3), normal(3, 2, 2, 2),
                                                                       normal(3)),
     lambda x, w, b: ref_conv2d(x, w, padding=(1, 1, 1, 1)) + b[:, None, None], tag="bias",
     torch=lambda T, x, w, b: T.nn.functional.conv2d(x, w, b, padding=1))

# conv1d is conv2d over an added axis
CONV1D = [
    ("conv1d", (2, 2, 6), (3, 2, 3), {}, {}),
    ("conv1d-stride2-pad1-dilation2", (1, 2, 7), (2, 2, 2), {"stride": 2, "padding": 1, "dilation": 2},
     {"stride": (1, 2), "padding": (0, 0, 1, 1), "dilation": (1, 2)}),
    ("conv1d-same-even", (1, 2, 5), (2, 2, 4), {"padding": "same"}, {"padding": (0, 0, 1, 2)}),
    ("conv1d-groups2", (2, 4, 5), (2, 2, 3), {"groups": 2}, {"groups": 2}),
]


def _conv1d_ref(stored):
    return lambda x, w: ref_conv2d(x[:, :, None], w[:, :, None], **stored)[:, :, 0]


for _tag, _xs, _ws, _kw, _stored in CONV1D:
    spec("conv2d", (lambda kw: lambda x, w: sg.conv1d(x, w, **kw))(_kw), inputs(normal(*_xs), normal(*_ws)),
         _conv1d_ref(_stored), tag=_tag, torch=(lambda kw: lambda T, x, w: T.nn.functional.conv1d(x, w, **kw))(_kw),
         dynamic=_kw.get("padding") != "same")
spec("conv2d", lambda x, w, b: sg.conv1d(x, w, bias=b), inputs(normal(1, 2, 4), normal(3, 2, 2), normal(3)),
     lambda x, w, b: ref_conv2d(x[:, :, None], w[:, :, None])[:, :, 0] + b[:, None], tag="conv1d-bias",
     torch=lambda T, x, w, b: T.nn.functional.conv1d(x, w, b))


# ------------------------------------------------------------------ conv_transpose2d
# (tag, x shape, w shape, keywords as torch takes them)
TRANSPOSE = [
    ("2x2-to-4x4", (1, 2, 2, 2), (2, 2, 3, 3), {}),
    ("stride2-pad1-output-padding1", (1, 2, 2, 2), (2, 1, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    ("groups2", (1, 4, 2, 2), (4, 1, 2, 2), {"groups": 2}),
    ("output-padding-under-dilation", (1, 1, 2, 2), (1, 1, 2, 2), {"dilation": 2, "output_padding": 1}),
    ("pairs-nonsquare", (1, 2, 2, 3), (2, 2, 2, 3), {"stride": (2, 1), "padding": (0, 1)}),
    ("depthwise-stride2", (2, 2, 2, 2), (2, 1, 2, 2), {"stride": 2, "groups": 2}),
]


def _transpose_ref(kw):
    stride, padding = [np.broadcast_to(kw.get(k, 0 if k == "padding" else 1), 2) for k in ("stride", "padding")]
    dilation, extra = [np.broadcast_to(kw.get(k, 1 if k == "dilation" else 0), 2) for k in ("dilation",
                                                                                             "output_padding")]

    def ref(x, w):
        size = [(n - 1) * s - 2 * p + d * (k - 1) + 1 + e
                for n, k, s, p, d, e in zip(x.shape[2:], w.shape[2:], stride, padding, dilation, extra)]
        return ref_transpose(x, w, size, tuple(stride), _pads(tuple(int(p) for p in padding)), tuple(dilation),
                             kw.get("groups", 1))
    return ref


for _tag, _xs, _ws, _kw in TRANSPOSE:
    spec("conv_transpose2d", (lambda kw: lambda x, w: sg.conv_transpose2d(x, w, **kw))(_kw),
         inputs(normal(*_xs), normal(*_ws)), _transpose_ref(_kw), tag=_tag,
         torch=(lambda kw: lambda T, x, w: T.nn.functional.conv_transpose2d(x, w, **kw))(_kw))

spec("conv_transpose2d", lambda x, w, b: sg.conv_transpose2d(x, w, stride=2, bias=b),
     inputs(normal(1, 2, 2, 2), normal(2, 3, 2, 2), normal(3)),
     lambda x, w, b: ref_transpose(x, w, (4, 4), (2, 2)) + b[:, None, None], tag="bias",
     torch=lambda T, x, w, b: T.nn.functional.conv_transpose2d(x, w, b, stride=2))

# The forms only gradients make: padding uneven (a "same" conv2d's) and the size read from a third input.
_UNEVEN = {"stride": (1, 1), "padding": (0, 1, 1, 2), "dilation": (1, 1), "groups": 1}
spec("conv_transpose2d", lambda x, w: apply("conv_transpose2d", (x, w), dict(_UNEVEN, output_padding=(0, 0))),
     inputs(normal(1, 2, 4, 5), normal(2, 1, 2, 4)), lambda x, w: ref_transpose(x, w, (4, 5), **_UNEVEN),
     tag="uneven-padding", torch=_twin("conv_transpose2d", dict(_UNEVEN, output_padding=(0, 0))))
_STRIDED = {"stride": (2, 2), "padding": (1, 1, 0, 0), "dilation": (1, 1), "groups": 1}
spec("conv_transpose2d",
     lambda x, w, like: apply("conv_transpose2d", (x, w, like), dict(_STRIDED, output_padding=None)),
     inputs(normal(1, 2, 2, 2), normal(2, 1, 3, 2), normal(1, 1, 4, 5)),
     lambda x, w, like: ref_transpose(x, w, like.shape[2:], **_STRIDED), tag="size-of-third-input",
     torch=_twin("conv_transpose2d", dict(_STRIDED, output_padding=None)))


# ------------------------------------------------------------------ conv2d_weight (internal)
# (tag, x shape, g shape, stored attributes)
WEIGHT = [
    ("2x2", (1, 2, 4, 4), (1, 2, 3, 3), {"kernel": (2, 2)}),
    ("stride2-uneven-padding-dilation-groups2", (1, 4, 5, 5), (1, 2, 3, 2),
     {"kernel": (2, 2), "stride": (2, 2), "padding": (1, 0, 0, 1), "dilation": (1, 2), "groups": 2}),
    ("batch2-rows-left-over", (2, 1, 5, 4), (2, 2, 2, 2), {"kernel": (2, 2), "stride": (2, 2)}),
]
_DEFAULTS = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}


def _weight_build(attrs):
    return lambda x, g: apply("conv2d_weight", (x, g), dict(_DEFAULTS, **attrs))


def _weight_ref(attrs):
    return lambda x, g: ref_weight(x, g, **attrs)


for _tag, _xs, _gs, _attrs in WEIGHT:
    spec("conv2d_weight", _weight_build(_attrs), inputs(normal(*_xs), normal(*_gs)), _weight_ref(_attrs), tag=_tag,
         torch=_twin("conv2d_weight", dict(_DEFAULTS, **_attrs)))
spec("conv2d_weight", lambda x, g, like: apply("conv2d_weight", (x, g, like), dict(_DEFAULTS, kernel=None)),
     inputs(normal(1, 2, 4, 3), normal(1, 3, 3, 1), normal(3, 2, 2, 3)),
     lambda x, g, like: ref_weight(x, g, like.shape[2:]), tag="size-of-third-input",
     torch=_twin("conv2d_weight", dict(_DEFAULTS, kernel=None)))
