"""A convolution's patches as a value of their own, for its forward product and its weight gradient both.

conv2d and conv2d_weight of the same input each copy the input's patches (im2col) before their product.
With stride 1 and patches at least twice the output channels (im2col.py's row layout) both copy the same
array, (C, kh, kw, N, OH, Wp), channel first along the padded rows. The fold pass (passes/fold.py) then
computes it once, as "conv2d_patches", and reads it in "conv2d_from_patches" (with "+add" and "+add+relu",
the fused conv2d's epilogues) and "conv2d_weight_from_patches": the same products on the same arrays, so
the same bits, one copy of the patches fewer, and the patches kept from the forward pass to the backward.
No VJPs: the pass runs on graphs that already hold their backward part.
"""
from __future__ import annotations

import numpy as np

from ..tensor import ShapeError, format_shape
from .conv_fused import bias_fits
from .conv_rules import _stored, _stored_ints
from .im2col import _finite, out_length, patches, rows_product, weight_product
from .registry import C_ORDER, OUT, apply, coerce, defop

_FOLD_ONLY = {"scalar": "made by the fold pass from ops the scalar path runs one by one"}


def _float_pair(a, b, what):
    if a.dtype != b.dtype or a.dtype.kind != "f":
        raise TypeError(f"{what}: expected two inputs of one float dtype, got {a.dtype} and {b.dtype}")


def _known(a, b):
    return a is None or b is None or a == b


# ------------------------------------------------------------------ the patches
def _patches_kernel(x, kernel, padding, dilation, out=None):
    if out is None:
        return patches(x, kernel, (1, 1), padding, dilation, batch_first=False, rows=True)
    return patches(x, kernel, (1, 1), padding, dilation, batch_first=False, rows=True, into=out.reshape(-1))


def _patches_spec(inputs, kernel, padding, dilation):
    """(N, C, H, W) x -> (C, kh, kw, N, OH, Wp): OH the stride-1 output height, Wp the padded width."""
    if len(inputs) != 1:
        raise TypeError(f"takes 1 input (x), got {len(inputs)}")
    (x,) = inputs
    _stored((1, 1), padding, dilation, 1)
    _stored_ints(kernel, 2, "kernel", 1)
    if x.ndim != 4 or x.dtype.kind != "f":
        raise ShapeError(f"expected a float (N, C, H, W) input, got {format_shape(x.shape)} {x.dtype}")
    n, c, h, w = x.shape
    (kh, kw), (top, bottom, left, right), (dh, dw) = kernel, padding, dilation
    oh = None if h is None else out_length(h, kh, 1, top, bottom, dh)
    ow = None if w is None else out_length(w, kw, 1, left, right, dw)
    if (oh is not None and oh < 1) or (ow is not None and ow < 1):
        raise ShapeError(f"input of shape {format_shape(x.shape)} is too small for a {kh}x{kw} kernel")
    return (c, kh, kw, n, oh, None if w is None else w + left + right), x.dtype


def _torch_patches(T, kernel, padding, dilation):
    def run(x):
        (top, bottom, left, right), (kh, kw), (dh, dw) = padding, kernel, dilation
        xp = T.nn.functional.pad(x, (left, right, top, bottom))
        n, c, hp, wp = xp.shape
        oh = hp - dh * (kh - 1)
        flat = T.nn.functional.pad(xp.reshape(n, c, hp * wp), (0, dw * (kw - 1)))
        parts = [flat[:, :, i * dh * wp + j * dw:i * dh * wp + j * dw + oh * wp] for i in range(kh) for j in range(kw)]
        return T.stack(parts, 0).reshape(kh, kw, n, c, oh, wp).permute(3, 0, 1, 2, 4, 5)
    return run


# ------------------------------------------------------------------ the forward product
def _from_spec(inputs, groups, width):
    """(patches, w[, bias]) -> (N, O, OH, width)."""
    if len(inputs) not in (2, 3):
        raise TypeError(f"takes 2 or 3 inputs (patches, w, bias), got {len(inputs)}")
    cols, w = inputs[:2]
    _float_pair(cols, w, "conv2d_from_patches")
    _stored((1, 1), (0, 0, 0, 0), (1, 1), groups)
    _stored_ints((width,), 1, "width", 1)
    if cols.ndim != 6 or w.ndim != 4:
        raise ShapeError(f"expected (C, kh, kw, N, OH, R) patches and an (O, C/groups, kh, kw) weight, got "
                         f"{format_shape(cols.shape)} and {format_shape(w.shape)}")
    c, kh, kw, n, oh, r = cols.shape
    o = w.shape[0]
    fits = (_known(c, None if w.shape[1] is None else w.shape[1] * groups) and _known(kh, w.shape[2])
            and _known(kw, w.shape[3]) and (o is None or o % groups == 0) and (r is None or width <= r))
    if not fits:
        raise ShapeError(f"a weight of shape {format_shape(w.shape)} (groups {groups}, width {width}) does not "
                         f"fit patches of shape {format_shape(cols.shape)}")
    shape = (n, o, oh, width)
    if len(inputs) == 3 and (not bias_fits(inputs[2].shape, shape) or inputs[2].dtype != w.dtype):
        raise ShapeError(f"the bias must be ({o}, 1, 1) or (1, {o}, 1, 1) of dtype {w.dtype}, got "
                         f"{format_shape(inputs[2].shape)} {inputs[2].dtype}")
    return shape, w.dtype


def _from_kernel(relu):
    def kernel(cols, w, *bias, groups, width, out=None, scratch=None):
        c, kh, kw, n, oh, r = cols.shape
        y = np.empty((n, w.shape[0], oh, width), w.dtype) if out is None else out
        return rows_product(cols, np.ascontiguousarray(w), groups, y, scratch, bias[0] if bias else None, relu)
    return kernel


def _from_scratch(node, shapes):
    """The wide product before its crop."""
    c, kh, kw, n, oh, r = shapes[node.inputs[0]]
    return [((shapes[node.inputs[1]][0] * n * oh * r,), node.dtype)]


def _torch_from(relu, bias):
    def make(T, groups, width):
        def run(cols, w, *b):
            c, kh, kw, n, oh, r = cols.shape
            o = w.shape[0]
            wide = T.matmul(w.reshape(groups, o // groups, -1), cols.reshape(groups, -1, n * oh * r))
            y = wide.reshape(o, n, oh, r)[..., :width].permute(1, 0, 2, 3)
            y = y + b[0] if bias else y
            return T.relu(y) if relu else y
        return run
    return make


# ------------------------------------------------------------------ the weight gradient
def _weight_spec(inputs, groups):
    """(patches, g) -> (O, C/groups, kh, kw), g the (N, O, OH, OW) output gradient."""
    if len(inputs) != 2:
        raise TypeError(f"takes 2 inputs (patches, g), got {len(inputs)}")
    cols, g = inputs
    _float_pair(cols, g, "conv2d_weight_from_patches")
    _stored((1, 1), (0, 0, 0, 0), (1, 1), groups)
    if cols.ndim != 6 or g.ndim != 4:
        raise ShapeError(f"expected (C, kh, kw, N, OH, R) patches and an (N, O, OH, OW) gradient, got "
                         f"{format_shape(cols.shape)} and {format_shape(g.shape)}")
    c, kh, kw, n, oh, r = cols.shape
    o = g.shape[1]
    fits = (_known(n, g.shape[0]) and _known(oh, g.shape[2]) and (r is None or g.shape[3] is None or g.shape[3] <= r)
            and (c is None or c % groups == 0) and (o is None or o % groups == 0))
    if not fits:
        raise ShapeError(f"a gradient of shape {format_shape(g.shape)} does not fit patches of shape "
                         f"{format_shape(cols.shape)} (groups {groups})")
    return (o, None if c is None else c // groups, kh, kw), g.dtype


def _weight_kernel(cols, g, groups, out=None, scratch=None):
    # g's zero columns meet the patches' extra ones, and inf * 0 is nan: with an inf or nan in the input
    # the extra columns are cropped first. The first and the last kernel offsets' patches cover the whole
    # padded input between them (stride 1, and the fold pass shares patches only where their runs meet:
    # passes/fold._corners_cover), so their sums say whether it is finite.
    if not (_finite(cols[:, 0, 0]) and _finite(cols[:, -1, -1])):
        cols = np.ascontiguousarray(cols[..., :g.shape[3]])
    return weight_product(cols, g, groups, out, scratch)


def _weight_scratch(node, shapes):
    """g widened, channel first."""
    c, kh, kw, n, oh, r = shapes[node.inputs[0]]
    return [((shapes[node.inputs[1]][1] * n * oh * r,), node.dtype)]


def _torch_weight(T, groups):
    def run(cols, g):
        c, kh, kw, n, oh, r = cols.shape
        o, ow = g.shape[1], g.shape[3]
        gt = g.permute(1, 0, 2, 3).reshape(groups, o // groups, n * oh, ow)
        ct = cols[..., :ow].reshape(groups, -1, n * oh * ow)
        return T.matmul(gt.reshape(groups, o // groups, -1), ct.transpose(1, 2)).reshape(o, c // groups, kh, kw)
    return run


# ------------------------------------------------------------------ registrations
def _from_flops(node, shapes):
    out, (_, cg, kh, kw) = int(np.prod(shapes[node.id])), shapes[node.inputs[1]]
    return 2 * out * cg * kh * kw + out * (len(node.inputs) - 2 + node.op.endswith("relu"))


def _weight_flops(node, shapes):
    n, o, oh, ow = shapes[node.inputs[1]]
    return 2 * int(np.prod(shapes[node.id])) * n * oh * ow


def _builder(name, keys):
    def build(*inputs, **attrs):
        """The op over stored attributes (what the fold pass copies)."""
        return apply(name, coerce(*inputs), {k: attrs[k] for k in keys})
    return build


defop("conv2d_patches", _patches_kernel, _patches_spec, None, OUT | C_ORDER, public=False, unsupported=_FOLD_ONLY,
      flops=0, torch=_torch_patches,
      doc="x's patches (C, kh, kw, N, OH, Wp), stride 1, along the padded rows: the fold pass's shared im2col"
      ).publish(_builder("conv2d_patches", ("kernel", "padding", "dilation")))
for _bias, _relu in ((False, False), (True, False), (True, True)):
    _name = "conv2d_from_patches" + ("+add" if _bias else "") + ("+relu" if _relu else "")
    defop(_name, _from_kernel(_relu), _from_spec, None, OUT | C_ORDER, scratch=_from_scratch, public=False,
          unsupported=_FOLD_ONLY, torch=_torch_from(_relu, _bias), flops=_from_flops,
          doc="conv2d from conv2d_patches' result" + (" + bias" if _bias else "") + (", then relu" if _relu else "")
          ).publish(_builder(_name, ("groups", "width")))
defop("conv2d_weight_from_patches", _weight_kernel, _weight_spec, None, OUT | C_ORDER, scratch=_weight_scratch,
      public=False, unsupported=_FOLD_ONLY, torch=_torch_weight, flops=_weight_flops,
      doc="conv2d_weight(x, g) from conv2d_patches(x)'s result"
      ).publish(_builder("conv2d_weight_from_patches", ("groups",)))

__all__: list[str] = []
