"""numpy.pad for the modes that map each padded position to an input position or a constant.

Each mode is, per axis, an index map (numpy.pad of arange(n) with that mode is it) or, for "constant", a
fill: so pad is linear in x plus a constant. Its adjoint ``pad_grad`` folds a padded gradient back onto the
input, each axis in turn (a slice for "constant", adding each border position onto the position it
copied otherwise); its own adjoint is pad with zeros, which closes gradients of every order.
"""
from __future__ import annotations

import math

import numpy as np

from ..tensor import ShapeError, Tensor, TensorLike, format_shape, user_frame
from .registry import VIEW, apply, check_arity, coerce, defop

MODES = ("constant", "edge", "reflect", "symmetric", "wrap")
_TORCH_MODES = {"constant": "constant", "edge": "replicate", "reflect": "reflect", "wrap": "circular"}


# ------------------------------------------------------------------ what the user wrote -> one stored form
def _as_pairs(value, ndim, what):
    """numpy.pad's forms of a per-axis (before, after) argument as a tuple of ``ndim`` pairs: one number for
    every side, one pair for every axis, one pair per axis."""
    array = np.asarray(value)
    if array.dtype.kind not in "iuf" or array.ndim > 2:
        raise TypeError(f"{what} must be a number, a pair or a pair per axis, got {value!r:.80}")
    if array.size == 1:
        return ((array.item(),) * 2,) * ndim
    if array.size == 2 and array.shape != (2, 1):
        return (tuple(array.ravel().tolist()),) * ndim
    try:
        return tuple(tuple(pair) for pair in np.broadcast_to(array, (ndim, 2)).tolist())
    except ValueError:
        raise ShapeError(f"{what} of shape {array.shape} does not give a pair for each of {ndim} axes") from None


def pad_attrs(ndim, pad_width, mode, constant_values):
    """The attributes of pad: widths and constants as a pair per axis (constants only in mode "constant")."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(map(repr, MODES))}")
    widths = _as_pairs(pad_width, ndim, "pad_width")
    if not all(isinstance(w, int) for pair in widths for w in pair):
        raise TypeError(f"pad_width must be integers, got {pad_width!r:.80}")
    if mode != "constant":
        if np.any(np.asarray(constant_values) != 0):
            raise ValueError(f"constant_values are for mode 'constant', not {mode!r}")
        return {"pad_width": widths, "mode": mode, "constant_values": None}
    return {"pad_width": widths, "mode": mode, "constant_values": _as_pairs(constant_values, ndim, "constant_values")}


def _pairs(value, ndim, kinds):
    return isinstance(value, tuple) and len(value) == ndim and all(
        isinstance(p, tuple) and len(p) == 2 and all(type(v) in kinds for v in p) for p in value)


def _check_widths(ndim, pad_width, mode):
    """The stored form of pad_width and mode, refusing any other."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ShapeError(f"mode {mode!r:.40} is not one of {', '.join(MODES)}")
    if not _pairs(pad_width, ndim, (int,)):
        raise TypeError(f"pad_width must be a pair of ints per axis of a rank-{ndim} tensor, got {pad_width!r:.80}")
    if any(w < 0 for pair in pad_width for w in pair):
        raise ShapeError(f"negative pad_width {pad_width}")


def _check_constants(ndim, mode, constant_values):
    if (mode == "constant") != (constant_values is not None) or (
            constant_values is not None and not _pairs(constant_values, ndim, (int, float))):
        raise TypeError(f"constant_values must be a pair of numbers per axis in mode 'constant' and None in the "
                        f"other modes, got {constant_values!r:.80} in mode {mode!r}")


def _check_extends(shape, pad_width, mode):
    """numpy refuses to extend an empty axis other than with a constant."""
    for n, (before, after) in zip(shape, pad_width):
        if mode != "constant" and n == 0 and before + after:
            raise ShapeError(f"cannot extend an empty axis of {format_shape(shape)} in mode {mode!r}")


# ------------------------------------------------------------------ kernels
def _pad_kernel(x, pad_width, mode, constant_values):
    if not pad_width:
        return np.array(x)          # (a 0-d x: numpy reads an empty tuple of widths as floats)
    if mode == "constant":
        return np.pad(x, pad_width, mode="constant", constant_values=constant_values)
    return np.pad(x, pad_width, mode=mode)


def _fold(g, axis, before, after, mode):
    """The adjoint of one axis's index map: the inner part of ``g``, plus each border position added where it
    was copied from (np.add.at, for widths past the axis's size copy one position several times)."""
    n = g.shape[axis] - before - after
    lead = (slice(None),) * axis
    out = g[lead + (slice(before, before + n),)].copy()
    border = np.r_[0:before, before + n:before + n + after]
    source = np.pad(np.arange(n), (before, after), mode=mode)[border]
    np.add.at(out, lead + (source,), g[lead + (border,)])
    return out


def _pad_grad_kernel(g, pad_width, mode):
    if mode == "constant":
        return g[tuple(slice(b, n - a) for n, (b, a) in zip(g.shape, pad_width))]
    for axis, (before, after) in enumerate(pad_width):
        if before or after:
            g = _fold(g, axis, before, after, mode)
    return g


# ------------------------------------------------------------------ shape rules and gradients
def _pad_spec(inputs, pad_width, mode, constant_values):
    check_arity(inputs, 1)
    (x,) = inputs
    _check_widths(x.ndim, pad_width, mode)
    _check_constants(x.ndim, mode, constant_values)
    _check_extends(x.shape, pad_width, mode)
    return tuple(None if n is None else n + b + a for n, (b, a) in zip(x.shape, pad_width)), x.dtype


def _pad_grad_spec(inputs, pad_width, mode):
    check_arity(inputs, 1)
    (g,) = inputs
    _check_widths(g.ndim, pad_width, mode)
    shape = tuple(None if n is None else n - b - a for n, (b, a) in zip(g.shape, pad_width))
    if any(n is not None and n < 0 for n in shape):
        raise ShapeError(f"a gradient of shape {format_shape(g.shape)} is narrower than pad_width {pad_width}")
    _check_extends(shape, pad_width, mode)
    return shape, g.dtype


def _pad_vjp(g, out, x, pad_width, mode, constant_values):
    return (apply("pad_grad", (g,), {"pad_width": pad_width, "mode": mode}),)


def _pad_grad_vjp(h, out, g, pad_width, mode):
    zeros = None if mode != "constant" else ((0, 0),) * len(pad_width)
    return (apply("pad", (h,), {"pad_width": pad_width, "mode": mode, "constant_values": zeros}),)


def _literal(value):
    """A number as scalar code writes it (the helpers name inf and nan)."""
    text = repr(float(value))
    return f"({text})" if text.startswith("-") else text


def _pad_scalar(em, node, ins, shape):
    """Padding only moves elements and writes constants: the kernel on the elements' names."""
    (x,) = ins
    values = node.attrs["constant_values"]
    if not x.ndim:
        return x
    if values is None:
        return np.pad(x, node.attrs["pad_width"], mode=node.attrs["mode"])
    out = np.pad(x, node.attrs["pad_width"], mode="constant", constant_values="0.0")
    marks = np.pad(np.zeros(x.shape, np.intp), node.attrs["pad_width"], mode="constant",
                   constant_values=_sides(values))
    for mark, value in enumerate((v for pair in values for v in pair), start=1):
        out[marks == mark] = _literal(value)
    return out


def _sides(values):
    """Per axis the numbers 1, 2, ... naming its sides, where numpy's constant pad puts each side's value."""
    return tuple((2 * k + 1, 2 * k + 2) for k in range(len(values)))


def _torch_widths(pad_width, shape, mode):
    """F.pad's widths (the last axis's first) where torch pads this case in a mode other than "constant": the
    last 1 to 3 axes after 1 or 2 unpadded ones, reflect narrower than the axis, wrap no wider; else None."""
    padded = [k for k, pair in enumerate(pad_width) if pair != (0, 0)]
    if not padded:
        return []
    leading = min(padded[0], 2)
    if leading < 1 or len(pad_width) - leading > 3:
        return None
    limit = {"reflect": 1, "wrap": 0}.get(mode, -math.inf)
    if any(w > n - limit for n, pair in zip(shape[leading:], pad_width[leading:]) for w in pair):
        return None
    return [w for pair in reversed(pad_width[leading:]) for w in pair]


def _torch_pad(T, pad_width, mode, constant_values):
    """torch.nn.functional.pad where torch has the case; numpy's index map of each axis by index_select
    otherwise (symmetric mode; widths or ranks torch's pad refuses)."""
    def run(x):
        if mode == "constant":
            # one axis at a time, as numpy does: each axis's constants also fill the corners it spans
            for axis, ((before, after), values) in enumerate(zip(pad_width, constant_values)):
                later = [0, 0] * (x.ndim - 1 - axis)
                x = T.nn.functional.pad(x, later + [before, 0], value=values[0])
                x = T.nn.functional.pad(x, later + [0, after], value=values[1])
            return x
        widths = _torch_widths(pad_width, x.shape, mode) if mode in _TORCH_MODES else None
        if widths is not None:
            return T.nn.functional.pad(x, widths, mode=_TORCH_MODES[mode]) if widths else x
        for axis, pair in enumerate(pad_width):
            x = x.index_select(axis, T.from_numpy(np.pad(np.arange(x.shape[axis]), pair, mode=mode)))
        return x
    return run


def _torch_pad_grad(T, pad_width, mode):
    """torch's VJP of its own pad, taken at zeros of the input's shape."""
    zeros = ((0, 0),) * len(pad_width) if mode == "constant" else None
    forward = _torch_pad(T, pad_width, mode, zeros)

    def run(g):
        z = T.zeros([n - b - a for n, (b, a) in zip(g.shape, pad_width)], dtype=g.dtype, requires_grad=True)
        with T.enable_grad():
            return T.autograd.grad(forward(z), z, g, create_graph=g.requires_grad)[0]
    return run


def _pad_grad_flops(node, shapes):
    """One addition per border element folded back (none for a constant's slice)."""
    if node.attrs["mode"] == "constant":
        return 0
    return math.prod(shapes[node.inputs[0]]) - math.prod(shapes[node.id])


_PAD = defop("pad", _pad_kernel, _pad_spec, _pad_vjp, flops=0, scalar_rule=_pad_scalar, torch=_torch_pad)
_PAD_GRAD = defop("pad_grad", _pad_grad_kernel, _pad_grad_spec, _pad_grad_vjp, VIEW, flops=_pad_grad_flops,
                  torch=_torch_pad_grad, public=False,
                  unsupported={"scalar": "no scalar form yet: its border sums add in np.add.at's order"},
                  doc="g folded back onto the unpadded shape (border positions added where pad copied them): "
                      "the VJP of pad")


def _attrs_at_line(op, ndim, pad_width, mode, constant_values):
    """pad_attrs; its errors (numpy's are ValueErrors and TypeErrors) name the op and the user's line."""
    try:
        return pad_attrs(ndim, pad_width, mode, constant_values)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{op}: {err} (at {user_frame()})") from None


@_PAD.publish
def pad(x: TensorLike, pad_width, mode: str = "constant", constant_values=0) -> Tensor:
    """numpy.pad of ``x`` in mode "constant" (``constant_values``: a number, a (before, after) pair, or a pair
    per axis), "edge", "reflect", "symmetric" or "wrap". ``pad_width``: an int, a (before, after) pair for
    every axis, or a pair per axis."""
    (x,) = coerce(x)
    return apply("pad", (x,), _attrs_at_line("pad", x.ndim, pad_width, mode, constant_values))


@_PAD_GRAD.publish
def pad_grad(g: TensorLike, pad_width, mode: str = "constant") -> Tensor:
    """The gradient of pad(x, pad_width, mode) for the gradient ``g`` of its result."""
    (g,) = coerce(g)
    attrs = _attrs_at_line("pad_grad", g.ndim, pad_width, mode, 0)
    del attrs["constant_values"]
    return apply("pad_grad", (g,), attrs)
