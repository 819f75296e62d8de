"""Specs of the fold pass's shared patches: "conv2d_patches" (x's patches along the padded rows, channel
first) and the ops that read them, "conv2d_from_patches" (with "+add" and "+add+relu") and
"conv2d_weight_from_patches". No gradients: the pass makes them after sg.grad. Each reader is built on
conv2d_patches of x, and held to the references of conv2d and conv2d_weight of x."""
from __future__ import annotations

import numpy as np

import staticgrad as sg
from tests.op_specs import inputs, normal, spec
from tests.specs.conv import ref_conv2d, ref_weight


def ref_patches(x, kernel, padding, dilation):
    """Per kernel offset, the flattened padded image from that offset on, OH padded rows of it."""
    (top, bottom, left, right), (kh, kw), (dh, dw) = padding, kernel, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, hp, wp = xp.shape
    oh = hp - dh * (kh - 1)
    flat = np.concatenate([xp.reshape(n, c, hp * wp), np.zeros((n, c, dw * (kw - 1)), x.dtype)], axis=2)
    out = np.zeros((c, kh, kw, n, oh, wp), x.dtype)
    for i in range(kh):
        for j in range(kw):
            start = i * dh * wp + j * dw
            out[:, i, j] = flat[:, :, start:start + oh * wp].reshape(n, c, oh, wp).transpose(1, 0, 2, 3)
    return out


# (tag, x shape, w shape, padding, dilation, groups)
CASES = [("3x3-pad1", (2, 3, 4, 4), (2, 3, 3, 3), (1, 1, 1, 1), (1, 1), 1),
         ("uneven-dilated", (1, 2, 5, 6), (2, 2, 2, 3), (0, 1, 1, 2), (2, 1), 1),
         ("groups", (2, 4, 3, 4), (4, 2, 3, 3), (1, 1, 1, 1), (1, 1), 2)]


def _output_width(x_shape, w_shape, padding, dilation):
    return x_shape[3] + padding[2] + padding[3] - dilation[1] * (w_shape[3] - 1)


for _tag, _xs, _ws, _pad, _dil, _groups in CASES:
    _kernel = _ws[2:]
    _at = {"kernel": _kernel, "padding": _pad, "dilation": _dil}
    _conv = {"padding": _pad, "dilation": _dil, "groups": _groups}
    _width = _output_width(_xs, _ws, _pad, _dil)
    _gs = (_xs[0], _ws[0], _xs[2] + _pad[0] + _pad[1] - _dil[0] * (_kernel[0] - 1), _width)
    spec("conv2d_patches", lambda x, at=_at: sg.ops.conv2d_patches(x, **at), inputs(normal(*_xs)),
         lambda x, at=_at: ref_patches(x, **at), tag=_tag, grad=False)
    spec("conv2d_weight_from_patches",
         lambda x, g, at=_at, k=_groups: sg.ops.conv2d_weight_from_patches(sg.ops.conv2d_patches(x, **at), g,
                                                                            groups=k),
         inputs(normal(*_xs), normal(*_gs)), lambda x, g, c=_conv, k=_kernel: ref_weight(x, g, k, **c),
         tag=_tag, grad=False)
    for _op in ("conv2d_from_patches", "conv2d_from_patches+add", "conv2d_from_patches+add+relu"):
        def _build(x, w, *b, op=_op, at=_at, k=_groups, width=_width):
            return getattr(sg.ops, op)(sg.ops.conv2d_patches(x, **at), w, *b, groups=k, width=width)

        def _ref(x, w, *b, op=_op, c=_conv):
            y = ref_conv2d(x, w, **c) + (b[0] if b else 0)
            return np.maximum(y, 0) if op.endswith("relu") else y

        _samples = [normal(*_xs), normal(*_ws)] + ([normal(_ws[0], 1, 1)] if "+add" in _op else [])
        spec(_op, _build, inputs(*_samples), _ref, tag=_tag, grad=False, dynamic="+add" not in _op)
