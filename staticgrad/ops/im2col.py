"""numpy kernels of the convolutions: patches gathered with strided views (im2col), one matrix product, and
the scatter-add back (col2im). conv.py registers the ops; these functions see arrays only.

Every kernel takes its attributes in the stored form conv_rules.py checks: ``stride`` and ``dilation`` pairs,
``padding`` as (top, bottom, left, right), ``groups`` an int. Arrays are NCHW; a conv2d weight is
(out, in/groups, kh, kw), a conv_transpose2d weight (in, out/groups, kh, kw).

Layout: in the exact layout the patches of x are copied once into a C-ordered buffer (N, C, kh, kw, OH, OW),
so that ``w (O, C*kh*kw) @ cols[n] (C*kh*kw, OH*OW)`` gives each sample's output already in NCHW order: the
product writes straight into the result (or the plan's ``out=`` buffer), with no transpose after it.
Where a copy follows the product anyway (the row layout's crop, conv_transpose2d's adds), the patches are
laid out channel first, (C, kh, kw, N, OH, R): one product per group then covers the whole batch (BLAS is
faster on one wide product than on N narrow ones, which also sum in another order: the last bits differ)
and the copy after it moves the channels back behind the batch. The weight gradient always wants that
order, so that one product with the gradient laid out (O, N*OH*R) sums over the batch and the pixels at once.

Rows: numpy copies (and adds) a strided view one innermost run at a time, and a patch's run is one output
row, OW elements: for small images the per-run cost dominates. With stride 1 a patch is instead taken along
the padded input's rows, as one run of OH*Wp elements of the flattened padded image, Wp the padded width:
each output row then carries Wp - OW extra columns, which the products compute and the result drops (or,
where the patches meet a gradient, the gradient's zero columns cancel). That pays where the patches are the
bigger array (C*kh*kw at least twice the output channels, per group) and always for conv_transpose2d, whose
scatter-adds are the slow part (measured on LeNet's layers: ``python -m benchmarks.conv_kernels``). Extra
columns meet zeros only in a product, and inf * 0 is nan: the row layout is used only where the operand it
reads past the edges is finite (one sum says so).
"""
from __future__ import annotations

import functools

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


def by_rows(stride, depth, channels):
    """Whether patches of ``depth`` = C*kh*kw rows (per group) against ``channels`` output channels (per
    group) are taken along the padded rows: stride 1, and patches at least twice the output's rows."""
    return stride == (1, 1) and ROWS and depth >= 2 * channels


ROWS = True       # (tests turn the row layout off to compare both)


def _finite(a) -> bool:
    # One sum stands in for all(isfinite): an inf or nan makes it so, and an overflow only costs the fast path.
    return bool(np.isfinite(np.add.reduce(a, axis=None)))


def _dense(w):
    # numpy multiplies an operand with a step of 0 (a broadcast weight) in its own loop, not BLAS's, which
    # adds in another order (see matmul_kernel): the weight, small, is copied instead.
    return np.ascontiguousarray(w) if 0 in w.strides and w.size > 1 else w


def _padded(x, padding, slack=None):
    """``x`` with zero borders; flattened per channel when ``slack`` (zeros after the last row) is given."""
    top, bottom, left, right = padding
    n, c, h, w = x.shape
    if not (top or bottom or left or right) and not slack:
        return x if slack is None else x.reshape(n, c, h * w)
    hp, wp = h + top + bottom, w + left + right
    flat = np.zeros((n, c, hp * wp + (slack or 0)), x.dtype)
    flat[:, :, :hp * wp].reshape(n, c, hp, wp)[:, :, top:top + h, left:left + w] = x
    return flat if slack is not None else flat.reshape(n, c, hp, wp)


def patches(x, kernel, stride, padding, dilation, batch_first=True, rows=False, into=None):
    """The patches of ``x`` as a C-ordered array, (N, C, kh, kw, OH, R) or with ``batch_first=False``
    (C, kh, kw, N, OH, R): R is OW, or with ``rows`` (stride 1) the padded width Wp. One copy from a strided
    view of the padded input, into ``into`` (a plan's buffer of that shape) when given."""
    (kh, kw), (dh, dw) = kernel, dilation
    (oh, ow), (n, c, _, w) = out_hw(x.shape, kernel, stride, padding, dilation), x.shape
    if rows:
        wp = w + padding[2] + padding[3]
        flat = _padded(x, padding, slack=(kw - 1) * dw)
        sn, sc, se = flat.strides
        view = as_strided(flat, (n, c, kh, kw, oh, wp), (sn, sc, dh * wp * se, dw * se, wp * se, se),
                          writeable=False)
    else:
        xp = _padded(x, padding)
        sn, sc, sh, sw = xp.strides
        view = as_strided(xp, (n, c, kh, kw, oh, ow), (sn, sc, dh * sh, dw * sw, stride[0] * sh, stride[1] * sw),
                          writeable=False)
    if not batch_first:
        view = view.transpose(1, 2, 3, 0, 4, 5)
    cols = _buffer((into,), 0, view.shape, x.dtype) if into is not None else np.empty(view.shape, x.dtype)
    np.copyto(cols, view)
    return cols


def _buffer(scratch, k, shape, dtype):
    """A C-ordered array of ``shape`` on the plan's ``scratch[k]`` where there is one big enough, else fresh."""
    size = int(np.prod(shape))
    if scratch and len(scratch) > k and scratch[k].size >= size and scratch[k].dtype == dtype:
        return scratch[k][:size].reshape(shape)
    return np.empty(shape, dtype)


def _widened(a, width, order=(0, 1, 2, 3), into=None):
    """``a`` (N, C, H, W) with axes in ``order``, C-ordered, its rows widened to ``width`` by zero columns;
    ``into``: the plan's buffers (see :func:`_buffer`)."""
    wide = _buffer(into, 0, tuple(a.shape[k] for k in order[:3]) + (width,), a.dtype)
    if width > a.shape[3]:
        wide.fill(0)        # (one pass over it all: zeroing two columns of every row is slower)
    np.copyto(wide[..., :a.shape[3]], a.transpose(order))
    return wide


def scatter(cols, size, stride, padding, dilation, out=None, into=None):
    """The adjoint of :func:`patches` with ``batch_first=False``: each patch element added back where it came
    from (an add per kernel offset), into an (N, C) + ``size`` result. ``cols`` is (C, kh, kw, N, OH, R): with
    R the padded width (stride 1), each offset's add is one run per channel and image over the flattened
    padded image. The adds go into a (C, N) buffer (``into``: the plan's), copied out in NCHW order."""
    c, kh, kw, n, oh, r = cols.shape
    top, bottom, left, right = padding
    (sh, sw), (dh, dw), (h, w) = stride, dilation, size
    hp, wp = h + top + bottom, w + left + right
    rows = r == wp and stride == (1, 1)
    full = _buffer(into, 0, (c, n, hp * wp + (kw - 1) * dw) if rows else (c, n, hp, wp), cols.dtype)
    full.fill(0)
    for i in range(kh):
        for j in range(kw):
            if rows:
                start = i * dh * wp + j * dw
                target = full[:, :, start:start + oh * wp]
                np.add(target, cols[:, i, j].reshape(c, n, oh * wp), out=target)
            else:
                at = (slice(i * dh, i * dh + sh * (oh - 1) + 1, sh), slice(j * dw, j * dw + sw * (r - 1) + 1, sw))
                full[:, :, at[0], at[1]] += cols[:, i, j]
    inner = (full[:, :, :hp * wp].reshape(c, n, hp, wp) if rows else full)[:, :, top:top + h, left:left + w]
    out = np.empty((n, c, h, w), cols.dtype) if out is None else out
    np.copyto(out, inner.transpose(1, 0, 2, 3))
    return out


def conv2d_kernel(x, w, stride, padding, dilation, groups, out=None, scratch=None, bias=None, relu=False):
    """conv2d; ``scratch``: a plan's buffers for the patches and, in the row layout, the wide product (see
    :func:`scratch_sizes`). ``bias`` (O, 1, 1) and ``relu`` are the fused ops' epilogue (ops/conv_fused.py)."""
    w = _dense(w)
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    oh, ow = out_hw(x.shape, (kh, kw), stride, padding, dilation)
    depth, og = cg * kh * kw, o // groups
    rows = by_rows(stride, depth, og)
    # The row layout needs a cropping copy anyway: its patches are laid out channel first, so that one
    # product per group covers the whole batch (BLAS is faster on one wide product than on N narrow ones)
    # and the crop also moves the channels back behind the batch.
    cols = patches(x, (kh, kw), stride, padding, dilation, batch_first=not rows, rows=rows,
                   into=scratch[0] if scratch else None)
    y = np.empty((n, o, oh, ow), np.result_type(x.dtype, w.dtype)) if out is None else out
    if rows:
        return rows_product(cols, w, groups, y, scratch and scratch[1:], bias, relu)
    np.matmul(w.reshape(groups, og, depth), cols.reshape(n, groups, depth, oh * ow),
              out=y.reshape(n, groups, og, oh * ow))
    return epilogue(y, bias, relu)


def rows_product(cols, w, groups, y, scratch=None, bias=None, relu=False):
    """conv2d's result ``y`` (N, O, OH, OW) from patches ``cols`` in the row layout, channel first
    (C, kh, kw, N, OH, R): one product per group into a wide buffer (``scratch[0]`` where the plan gives
    one), cropped to OW columns while the channels move back behind the batch; then ``epilogue``."""
    n, o, oh, ow = y.shape
    r, og = cols.shape[-1], o // groups
    wide = _buffer(scratch, 0, (groups, og, n * oh * r), y.dtype)
    np.matmul(w.reshape(groups, og, -1), cols.reshape(groups, -1, n * oh * r), out=wide)
    np.copyto(y, wide.reshape(o, n, oh, r)[..., :ow].transpose(1, 0, 2, 3))
    return epilogue(y, bias, relu)


def epilogue(y, bias, relu):
    """The fused ops' bias add and ReLU, in place on conv2d's result ``y``."""
    if bias is not None:
        # (against an (O, 1) bias numpy's inner loop runs over a whole channel image, not one row)
        n, o = y.shape[:2]
        flat = y.reshape(n, o, -1)
        np.add(flat, bias.reshape(o, 1), out=flat)
    if relu:
        clamp_below(y)
    return y


def clamp_below(a):
    """max(a, 0) in place, with numpy's bits. numpy's float32 maximum runs its vector loop only when both
    operands are walked contiguously: a C-ordered array is clamped as rows against a row of zeros, 2-3x
    faster than against the scalar 0."""
    length = _row_length(a.size) if a.dtype == np.float32 and a.flags.c_contiguous else None
    if length is None:
        return np.maximum(a, 0, out=a)
    flat = a.reshape(-1, length)
    np.maximum(flat, zero_row(length), out=flat)
    return a


@functools.lru_cache(maxsize=64)
def _row_length(size):
    """The longest length in 256..8192 that divides ``size`` (None if there is none)."""
    return next((n for n in range(min(size, 8192), 255, -1) if size % n == 0), None)


@functools.lru_cache(maxsize=16)
def zero_row(n):
    row = np.zeros(n, np.float32)
    row.flags.writeable = False
    return row


def scratch_sizes(x_shape, w_shape, stride, padding, dilation, groups) -> list[int]:
    """How many elements conv2d_kernel's temporaries hold for an ``x_shape`` input: the patches, and in the
    row layout the product before its crop."""
    n, c = x_shape[:2]
    o, cg, kh, kw = w_shape
    oh, ow = out_hw(x_shape, (kh, kw), stride, padding, dilation)
    if not by_rows(stride, cg * kh * kw, o // groups):
        return [n * c * kh * kw * oh * ow]
    r = x_shape[3] + padding[2] + padding[3]
    return [n * c * kh * kw * oh * r, n * o * oh * r]


def _transposed_size(x_shape, w_shape, like, stride, padding, dilation, output_padding):
    """conv_transpose2d's output height and width (from ``like``'s shape, checked, where it is given)."""
    (h, wd), (kh, kw) = x_shape[2:], w_shape[2:]
    if like is not None:
        size = tuple(like[-2:])
        low = [transposed_length(s, k, st, p0, p1, d, 0) for s, k, st, p0, p1, d in
               zip((h, wd), (kh, kw), stride, padding[::2], padding[1::2], dilation)]
        if not all(b <= s < b + st for s, b, st in zip(size, low, stride)):
            raise ValueError(f"conv_transpose2d: no convolution of an input of size {size} gives ({h}, {wd})")
        return size
    return tuple(transposed_length(s, k, st, p0, p1, d, e) for s, k, st, p0, p1, d, e in
                 zip((h, wd), (kh, kw), stride, padding[::2], padding[1::2], dilation, output_padding))


def conv_transpose2d_kernel(x, w, *like, stride, padding, dilation, groups, output_padding, out=None, scratch=None):
    """conv_transpose2d; ``scratch``: the plan's buffers (see :func:`transpose_sizes`)."""
    w = _dense(w)
    n, ci, h, wd = x.shape
    _, cog, kh, kw = w.shape
    size = _transposed_size(x.shape, w.shape, like[0].shape if like else None, stride, padding, dilation,
                            output_padding)
    # Each input pixel times the weights of its group, channel first: one product per group over the whole
    # batch, (G, out/G*kh*kw, N*H*R), then added back. Along the rows (stride 1), x's rows are widened to
    # the padded width by zero columns.
    r = size[1] + padding[2] + padding[3] if stride == (1, 1) and ROWS and _finite(w) else wd
    wg = w.reshape(groups, ci // groups, cog * kh * kw).transpose(0, 2, 1)
    xt = _widened(x, r, (1, 0, 2, 3), into=scratch).reshape(groups, ci // groups, n * h * r)
    cols = _buffer(scratch and scratch[1:], 0, (groups, cog * kh * kw, n * h * r), np.result_type(x.dtype, w.dtype))
    np.matmul(wg, xt, out=cols)
    return scatter(cols.reshape(groups * cog, kh, kw, n, h, r), size, stride, padding, dilation, out,
                   into=scratch and scratch[2:])


def transpose_sizes(x_shape, w_shape, like_shape, stride, padding, dilation, groups, output_padding) -> list[int]:
    """How many elements conv_transpose2d_kernel's temporaries hold at most: x widened, the product, the
    padded sums."""
    (n, ci, h, wd), (_, cog, kh, kw) = x_shape, w_shape
    size = _transposed_size(x_shape, w_shape, like_shape, stride, padding, dilation, output_padding)
    hp, wp = size[0] + padding[0] + padding[1], size[1] + padding[2] + padding[3]
    r = max(wp, wd)
    return [ci * n * h * r, groups * cog * kh * kw * n * h * r, groups * cog * n * (hp * wp + (kw - 1) * dilation[1])]


def conv2d_weight_kernel(x, g, *like, stride, padding, dilation, groups, kernel, out=None, scratch=None):
    """The gradient of conv2d with respect to its weight, for input ``x`` and output gradient ``g`` (a third
    input, when ``kernel`` is None, has the weight's shape); ``scratch``: see :func:`weight_sizes`."""
    n, c = x.shape[:2]
    o, (kh, kw) = g.shape[1], kernel or like[0].shape[2:]
    oh, ow = g.shape[2:]
    if out_hw(x.shape, (kh, kw), stride, padding, dilation) != (oh, ow):
        raise ValueError(f"conv2d_weight: an output gradient of shape {g.shape} does not fit the input {x.shape}")
    cg, og = c // groups, o // groups
    rows = by_rows(stride, cg * kh * kw, og) and _finite(x)
    cols = patches(x, (kh, kw), stride, padding, dilation, batch_first=False, rows=rows,
                   into=scratch[0] if scratch else None)
    return weight_product(cols, g, groups, out, scratch and scratch[1:])


def weight_product(cols, g, groups, out=None, scratch=None):
    """conv2d's weight gradient from the patches ``cols`` (C, kh, kw, N, OH, R) channel first and the output
    gradient ``g`` (N, O, OH, OW); ``scratch[0]``: the plan's buffer for g widened."""
    c, kh, kw, n, oh, r = cols.shape
    o = g.shape[1]
    cg, og = c // groups, o // groups
    # g as (G, O/G, N*OH*R): one product per group sums over the batch and the pixels (R > OW: g's zero
    # columns meet the patches' extra ones).
    gt = _widened(g, r, (1, 0, 2, 3), into=scratch).reshape(groups, og, n * oh * r)
    target = None if out is None else out.reshape(groups, og, cg * kh * kw)
    dw = np.matmul(gt, cols.reshape(groups, cg * kh * kw, n * oh * r).transpose(0, 2, 1), out=target)
    return dw.reshape(o, cg, kh, kw) if out is None else out


def weight_sizes(x_shape, g_shape, kernel, stride, padding, dilation, groups) -> list[int]:
    """How many elements conv2d_weight_kernel's temporaries hold at most: the patches, g widened."""
    (n, c, _, w), (_, o, oh, ow) = x_shape, g_shape
    r = max(ow, w + padding[2] + padding[3] if by_rows(stride, c // groups * kernel[0] * kernel[1], o // groups)
            else ow)
    return [c * kernel[0] * kernel[1] * n * oh * r, o * n * oh * r]
