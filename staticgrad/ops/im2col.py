"""numpy kernels of the convolutions: patches gathered with strided views (im2col), one matrix product, and
the scatter-add back (col2im). conv.py registers the ops; these functions see arrays only.

Every kernel takes its attributes in the stored form conv.py checks: ``stride`` and ``dilation`` pairs,
``padding`` as (top, bottom, left, right), ``groups`` an int. Arrays are NCHW; a conv2d weight is
(out, in/groups, kh, kw), a conv_transpose2d weight (in, out/groups, kh, kw).

Layout: the patches of x are copied once into a C-ordered buffer (N, C, kh, kw, OH, OW), so that
``w (O, C*kh*kw) @ cols[n] (C*kh*kw, OH*OW)`` gives each sample's output already in NCHW order: the
product writes straight into the result (or the plan's ``out=`` buffer), with no transpose after it.
The weight gradient wants the other order, (C, kh, kw, N, OH, OW), so that one product with the
gradient laid out (O, N*OH*OW) sums over the batch and the pixels at once.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def out_length(size, k, stride, before, after, dilation):
    """The length of a convolution's output along one axis (torch's formula)."""
    return (size + before + after - dilation * (k - 1) - 1) // stride + 1


def transposed_length(size, k, stride, before, after, dilation, extra):
    """The length of a transposed convolution's output along one axis (``extra``: its output_padding)."""
    return (size - 1) * stride - before - after + dilation * (k - 1) + 1 + extra


def out_hw(x_shape, kernel, stride, padding, dilation):
    (h, w), (kh, kw) = x_shape[-2:], kernel
    top, bottom, left, right = padding
    return (out_length(h, kh, stride[0], top, bottom, dilation[0]),
            out_length(w, kw, stride[1], left, right, dilation[1]))


def _padded(x, padding):
    """``x`` with zero borders, or ``x`` itself when there are none."""
    top, bottom, left, right = padding
    if not (top or bottom or left or right):
        return x
    n, c, h, w = x.shape
    xp = np.zeros((n, c, h + top + bottom, w + left + right), x.dtype)
    xp[:, :, top:top + h, left:left + w] = x
    return xp


def patches(x, kernel, stride, padding, dilation, batch_first=True):
    """The patches of ``x`` as a fresh C-ordered array: (N, C, kh, kw, OH, OW), or (C, kh, kw, N, OH, OW)
    with ``batch_first=False``. One copy from a strided view of the padded input."""
    xp = _padded(x, padding)
    (kh, kw), (oh, ow) = kernel, out_hw(x.shape, kernel, stride, padding, dilation)
    n, c = x.shape[:2]
    sn, sc, sh, sw = xp.strides
    view = as_strided(xp, (n, c, kh, kw, oh, ow),
                      (sn, sc, dilation[0] * sh, dilation[1] * sw, stride[0] * sh, stride[1] * sw), writeable=False)
    if not batch_first:
        view = view.transpose(1, 2, 3, 0, 4, 5)
    cols = np.empty(view.shape, x.dtype)
    np.copyto(cols, view)
    return cols


def scatter(cols, size, stride, padding, dilation, out=None):
    """The adjoint of :func:`patches`: each patch element added back where it came from (a strided add per
    kernel offset), into an (N, C) + ``size`` result. ``cols`` is (N, C, kh, kw, OH, OW)."""
    n, c, kh, kw, oh, ow = cols.shape
    top, bottom, left, right = padding
    (sh, sw), (dh, dw) = stride, dilation
    h, w = size
    bare = not (top or bottom or left or right)
    if bare and out is not None:
        full = out          # (no border to crop: the adds go straight into the plan's buffer)
        full.fill(0)
    else:
        full = np.zeros((n, c, h + top + bottom, w + left + right), cols.dtype)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            full[:, :, rows, j * dw:j * dw + sw * (ow - 1) + 1:sw] += cols[:, :, i, j]
    if bare:
        return full
    inner = full[:, :, top:top + h, left:left + w]
    if out is None:
        return np.ascontiguousarray(inner)
    np.copyto(out, inner)
    return out


def conv2d_kernel(x, w, stride, padding, dilation, groups, out=None):
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    oh, ow = out_hw(x.shape, (kh, kw), stride, padding, dilation)
    cols = patches(x, (kh, kw), stride, padding, dilation).reshape(n, groups, cg * kh * kw, oh * ow)
    target = None if out is None else out.reshape(n, groups, o // groups, oh * ow)
    y = np.matmul(w.reshape(groups, o // groups, cg * kh * kw), cols, out=target)
    return y.reshape(n, o, oh, ow) if out is None else out


def conv_transpose2d_kernel(x, w, *like, stride, padding, dilation, groups, output_padding, out=None):
    n, ci, h, wd = x.shape
    _, cog, kh, kw = w.shape
    if like:
        size = like[0].shape[-2:]
        low = [transposed_length(s, k, st, p0, p1, d, 0) for s, k, st, p0, p1, d in
               zip((h, wd), (kh, kw), stride, padding[::2], padding[1::2], dilation)]
        if not all(b <= s < b + st for s, b, st in zip(size, low, stride)):
            raise ValueError(f"conv_transpose2d: no convolution of an input of size {tuple(size)} gives ({h}, {wd})")
    else:
        size = tuple(transposed_length(s, k, st, p0, p1, d, e) for s, k, st, p0, p1, d, e in
                     zip((h, wd), (kh, kw), stride, padding[::2], padding[1::2], dilation, output_padding))
    # Each input pixel times the weights of its group: (N, G, out/G*kh*kw, H*W), then added back.
    wg = w.reshape(groups, ci // groups, cog * kh * kw).transpose(0, 2, 1)
    cols = np.matmul(wg, x.reshape(n, groups, ci // groups, h * wd))
    return scatter(cols.reshape(n, groups * cog, kh, kw, h, wd), size, stride, padding, dilation, out)


def conv2d_weight_kernel(x, g, *like, stride, padding, dilation, groups, kernel, out=None):
    """The gradient of conv2d with respect to its weight, for input ``x`` and output gradient ``g`` (a third
    input, when ``kernel`` is None, has the weight's shape)."""
    n, c = x.shape[:2]
    o, (kh, kw) = g.shape[1], kernel or like[0].shape[2:]
    oh, ow = g.shape[2:]
    if out_hw(x.shape, (kh, kw), stride, padding, dilation) != (oh, ow):
        raise ValueError(f"conv2d_weight: an output gradient of shape {g.shape} does not fit the input {x.shape}")
    cols = patches(x, (kh, kw), stride, padding, dilation, batch_first=False)
    cols = cols.reshape(groups, c // groups * kh * kw, n * oh * ow)
    # g as (G, O/G, N*OH*OW): one product per group sums over the batch and the pixels.
    gt = np.ascontiguousarray(g.reshape(n, groups, o // groups, oh * ow).transpose(1, 2, 0, 3))
    target = None if out is None else out.reshape(groups, o // groups, c // groups * kh * kw)
    dw = np.matmul(gt.reshape(groups, o // groups, n * oh * ow), cols.transpose(0, 2, 1), out=target)
    return dw.reshape(o, c // groups, kh, kw) if out is None else out
