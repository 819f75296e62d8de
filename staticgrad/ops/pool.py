"""2-D pooling with torch.nn.functional's rules (max_pool2d, avg_pool2d) and the ops their gradients are.

Inputs are (N, C, H, W) or (C, H, W). The kernels loop over the kh*kw offsets of a window, each a strided
view of the (padded) input covering every window at once: no loop over pixels, channels or batch entries.

Max pool's gradient goes to one element per window, the one torch's CPU kernel picks: the first maximum
in window order (row by row), except that a NaN wins, the last NaN if several; a window of -inf picks its
first element inside the input. ``max_pool2d_grad(x, g)`` sends each g there (adding where windows
overlap) and ``max_pool2d_gather(x, h)`` reads h there: each is the other's VJP, and x gets no gradient
through them (which element is picked is piecewise constant in x).
"""
from __future__ import annotations

import math

import numpy as np

from ..tensor import ShapeError, Tensor, TensorLike, format_shape, user_frame
from .elementwise import as_float
from .reduce import mean
from .registry import C_ORDER, OUT, SHAPE_REF, apply, check_arity, coerce, defop, integers, stored_flag
from .shape import at_user_line

MAX_ATTRS = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
AVG_ATTRS = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")


# ------------------------------------------------------------------ attributes and shapes
def _pair(value, what):
    """An int or a sequence of one or two ints as a pair of ints (torch's forms)."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if len(items) not in (1, 2):
        raise TypeError(f"{what} must be an int or a pair of ints, got {value!r}")
    items = integers(items, what)
    return items * 2 if len(items) == 1 else items


def pool_attrs(kernel_size, stride, padding, dilation=1, ceil_mode=False, averaging=None):
    """What the user wrote, in the one form the shape rules accept (their checks of values follow);
    ``averaging``: avg_pool2d's (count_include_pad, divisor_override), in place of a dilation."""
    attrs = {"kernel_size": _pair(kernel_size, "kernel_size"),
             "stride": _pair(kernel_size if stride is None else stride, "stride"),
             "padding": _pair(padding, "padding"), "dilation": _pair(dilation, "dilation"),
             "ceil_mode": bool(ceil_mode)}
    if averaging is not None:
        del attrs["dilation"]
        attrs["count_include_pad"] = bool(averaging[0])
        divisor = averaging[1]
        attrs["divisor_override"] = None if divisor is None else integers((divisor,), "divisor_override")[0]
    return attrs


def _stored_pair(value, what, low):
    if not (isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value)):
        raise TypeError(f"{what} must be a pair of ints, got {value!r:.80}")
    if min(value) < low:
        raise ShapeError(f"{what} must be at least {low}, got {value}")
    return value


def _check_attrs(kernel_size, stride, padding, ceil_mode, dilation=(1, 1), count_include_pad=True,
                 divisor_override=None):
    """The attributes' stored form and torch's checks of their values."""
    kernel = _stored_pair(kernel_size, "kernel_size", 1)
    _stored_pair(stride, "stride", 1)
    _stored_pair(dilation, "dilation", 1)
    pad = _stored_pair(padding, "padding", 0)
    if pad[0] > kernel[0] // 2 or pad[1] > kernel[1] // 2:
        raise ShapeError(f"padding {pad} must be at most half the kernel size {kernel}")
    stored_flag(ceil_mode, "ceil_mode")
    stored_flag(count_include_pad, "count_include_pad")
    if divisor_override is not None and (type(divisor_override) is not int or divisor_override == 0):
        raise ShapeError(f"divisor_override must be a nonzero int or None, got {divisor_override!r:.80}")


def _out_size(n, k, s, p, d, ceil_mode):
    """torch's pooled size along one axis: in ceil mode the last window must start inside the input or its
    left padding. None for an unknown size; below 1 the input is too small."""
    if n is None:
        return None
    span = n + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pooled(shape, kernel_size, stride, padding, ceil_mode, dilation=(1, 1), **_):
    """The pooled output size of (H, W) ``shape``."""
    return tuple(_out_size(shape[a], kernel_size[a], stride[a], padding[a], dilation[a], ceil_mode) for a in (0, 1))


def _pooled_shape(x, attrs, keys):
    """The output shape for input ``x`` (a tensor), after every check of the input and of the attributes,
    which must be ``keys``."""
    if set(attrs) != set(keys):
        raise TypeError(f"takes the attributes {', '.join(keys)}, got {', '.join(map(str, attrs))}")
    _check_attrs(**attrs)
    if x.ndim not in (3, 4):
        raise ShapeError(f"expected a (N, C, H, W) or (C, H, W) input, got shape {format_shape(x.shape)}")
    if x.dtype.kind != "f":
        raise TypeError(f"expected a real float input, got dtype {x.dtype}")
    out = _pooled(x.shape[-2:], **attrs)
    if any(o is not None and o < 1 for o in out):
        window = tuple(attrs.get("dilation", (1, 1))[a] * (attrs["kernel_size"][a] - 1) + 1 for a in (0, 1))
        raise ShapeError(f"input of shape {format_shape(x.shape)} is too small for windows spanning {window} "
                         f"with padding {attrs['padding']}: the output would be {out[0]}x{out[1]}")
    return x.shape[:-2] + out


def _fits(shape, expected):
    return len(shape) == len(expected) and all(a is None or b is None or a == b for a, b in zip(shape, expected))


# ------------------------------------------------------------------ windows as strided views
def _layout(hw, attrs):
    """(pooled (oh, ow), padded (H', W'), the views of the padded input one per window offset in window
    order, the view of the input inside the padded one)."""
    out = _pooled(hw, **attrs)
    dilation = attrs.get("dilation", (1, 1))
    padded, axes, inner = [], [], []
    for a in (0, 1):
        k, s, p, d, n, o = (attrs["kernel_size"][a], attrs["stride"][a], attrs["padding"][a], dilation[a], hw[a],
                            out[a])
        # windows past the right padding (ceil mode) read padding values there too
        padded.append(p + max(n + p, (o - 1) * s + (k - 1) * d + 1 - p))
        axes.append([slice(i * d, i * d + (o - 1) * s + 1, s) for i in range(k)])
        inner.append(slice(p, p + n))
    views = [(Ellipsis, r, c) for r in axes[0] for c in axes[1]]
    return out, tuple(padded), views, (Ellipsis, inner[0], inner[1])


def _padded(x, fill, padded, inner):
    """``x`` inside a border of ``fill`` of the padded size (``x`` itself when there is no border)."""
    if x.shape[-2:] == padded:
        return x
    out = np.full(x.shape[:-2] + padded, fill, dtype=x.dtype)
    out[inner] = x
    return out


def _cropped(full, inner):
    return full if full[inner].shape == full.shape else np.ascontiguousarray(full[inner])


def _first_inside(attrs, out):
    """Per window, the offset of its first element inside the input (None when every window starts inside)."""
    if attrs["padding"] == (0, 0):
        return None
    first = []
    for a in (0, 1):
        k, s, p, d = attrs["kernel_size"][a], attrs["stride"][a], attrs["padding"][a], attrs["dilation"][a]
        start = np.arange(out[a]) * s - p
        first.append(np.minimum(np.maximum(0, -(start // d)), k - 1))
    return first[0][:, None] * attrs["kernel_size"][1] + first[1][None, :]


def _picks_in_order(xp, views, first, shape):
    """Per window the offset torch's loop picks, by that loop over the offsets: a later element replaces
    the best so far when greater or NaN. Masked numpy calls on strided views are slow: only for the windows
    the equality test cannot settle (a NaN in them, or all -inf with padding)."""
    kind = np.min_scalar_type(len(views))
    if first is None:
        best, pick, start = np.array(xp[views[0]]), np.zeros(shape, kind), 1
    else:
        best, start = np.full(shape, -np.inf, xp.dtype), 0
        pick = np.array(np.broadcast_to(first.astype(kind), shape))
    for k in range(start, len(views)):
        v = xp[views[k]]
        take = np.greater(v, best)
        take |= np.isnan(v)
        np.copyto(best, v, where=take)
        np.copyto(pick, k, where=take)
    return [pick == k for k in range(len(views))]


def _hits(x, attrs, best=None):
    """(per window offset, a mask of the windows that pick it: one offset per window; the layout).
    ``best``: each window's maximum, when the caller has it (max_pool2d's result)."""
    layout = _layout(x.shape[-2:], attrs)
    out, padded, views, inner = layout
    xp = _padded(x, -np.inf, padded, inner)
    if best is None:
        best = _window_max(xp, views)
    total = np.add.reduce(best, axis=None)       # (NaN if a window has a NaN, or holds inf and another -inf)
    if math.isnan(total) or (attrs["padding"] != (0, 0) and total == -np.inf):
        first = _first_inside(attrs, out)
        return _picks_in_order(xp, views, first, best.shape), layout
    # the first element equal to its window's maximum; with no NaN every window has one, so the last
    # offset takes the windows no earlier one took
    hits, taken = [], None
    for k, view in enumerate(views):
        if taken is None:
            hit = np.equal(xp[view], best)
            taken = hit.copy() if len(views) > 1 else hit
        elif k == len(views) - 1:
            hit = np.logical_not(taken, out=taken)
        else:
            hit = np.equal(xp[view], best)
            np.greater(hit, taken, out=hit)     # (hit and not taken, in one pass)
            taken |= hit
        hits.append(hit)
    return hits, layout


def _masked(values, finite, hit):
    """``values`` where ``hit``, else 0: a product where the values are ``finite`` (masked numpy calls are slow
    on strided views), else a selection (inf * 0 would be NaN)."""
    return values * hit if finite else np.where(hit, values, values.dtype.type(0))


# ------------------------------------------------------------------ kernels
def _window_max(xp, views, out=None):
    if len(views) == 1:
        if out is None:
            return np.array(xp[views[0]])
        np.copyto(out, xp[views[0]])
        return out
    result = np.maximum(xp[views[0]], xp[views[1]], out=out)
    for view in views[2:]:
        np.maximum(result, xp[view], out=result)     # (NaN propagates: torch's maximum is NaN too)
    return result


def _max_pool_kernel(x, out=None, **attrs):
    _, padded, views, inner = _layout(x.shape[-2:], attrs)
    return _window_max(_padded(x, -np.inf, padded, inner), views, out)


def _tiles(shape, attrs):
    """Whether the windows tile the input: side by side, no padding, every element in one window."""
    pooled = _pooled(shape[-2:], **attrs)
    return attrs["padding"] == (0, 0) and attrs["dilation"] == (1, 1) and attrs["kernel_size"] == attrs["stride"] \
        and all(o * s == n for o, s, n in zip(pooled, attrs["stride"], shape[-2:]))


def _max_pool_grad_kernel(x, g, *pooled, out=None, **attrs):
    """``pooled``: max_pool2d(x)'s result, if given (then the windows' maxima are not computed again)."""
    hits, (_, padded, views, inner) = _hits(x, attrs, pooled[0] if pooled else None)
    g = g.astype(np.result_type(x.dtype, g.dtype), copy=False)
    finite = math.isfinite(np.add.reduce(g, axis=None))
    if finite and _tiles(x.shape, attrs):
        # every element is written once, by the offset of its window it is at: no zeros first
        full = np.empty(x.shape, g.dtype) if out is None else out
        for view, hit in zip(views, hits):
            np.multiply(g, hit, out=full[view])
        return full
    full = np.zeros(x.shape[:-2] + padded, g.dtype)
    disjoint = all(s >= d * (k - 1) + 1 for k, s, d in zip(attrs["kernel_size"], attrs["stride"], attrs["dilation"]))
    for view, hit in zip(views, hits):
        target = full[view]
        if disjoint and finite:
            np.multiply(g, hit, out=target)     # (each element in one window at most: nothing to add to)
        else:
            target += _masked(g, finite, hit)
    if out is None:
        return _cropped(full, inner)
    np.copyto(out, full[inner])
    return out


def _max_pool_gather_kernel(x, h, **attrs):
    hits, (_, padded, views, inner) = _hits(x, attrs)
    hp = _padded(h, 0, padded, inner)
    finite = math.isfinite(np.add.reduce(h, axis=None))
    out = np.zeros(hits[0].shape, h.dtype)
    for view, hit in zip(views, hits):
        out += _masked(hp[view], finite, hit)
    return out


def _divisor(hw, attrs, out, dtype):
    """What each window's sum is divided by: torch's count of the window's elements inside the input and,
    with count_include_pad, inside its padding (not past it); or divisor_override. A scalar where uniform."""
    if attrs["divisor_override"] is not None:
        return dtype.type(attrs["divisor_override"])
    counts = []
    for a in (0, 1):
        k, s, p, n = attrs["kernel_size"][a], attrs["stride"][a], attrs["padding"][a], hw[a]
        start = np.arange(out[a]) * s - p
        end = np.minimum(start + k, n + p)
        counts.append(end - start if attrs["count_include_pad"] else np.minimum(end, n) - np.maximum(start, 0))
    divisor = (counts[0][:, None] * counts[1][None, :]).astype(dtype)
    return divisor.flat[0] if divisor.size and (divisor == divisor.flat[0]).all() else divisor


def _avg_pool_kernel(x, **attrs):
    out, padded, views, inner = _layout(x.shape[-2:], attrs)
    xp = _padded(x, 0, padded, inner)
    result = np.array(xp[views[0]])
    for view in views[1:]:
        result += xp[view]
    result /= _divisor(x.shape[-2:], attrs, out, result.dtype)
    return result


def _avg_pool_grad_kernel(g, x, **attrs):
    out, padded, views, inner = _layout(x.shape[-2:], attrs)
    share = g / _divisor(x.shape[-2:], attrs, out, g.dtype)
    full = np.zeros(x.shape[:-2] + padded, g.dtype)
    for view in views:
        full[view] += share
    return _cropped(full, inner)


# ------------------------------------------------------------------ shape rules and gradients
def _pool_spec(keys):
    def infer(inputs, **attrs):
        check_arity(inputs, 1)
        return _pooled_shape(inputs[0], attrs, keys), inputs[0].dtype
    return infer


def _scattered(x, g, attrs, keys):
    """The result's shape and dtype for a gradient ``g`` of the pooled shape: the input ``x``'s shape."""
    pooled = _pooled_shape(x, attrs, keys)
    if not _fits(g.shape, pooled):
        raise ShapeError(f"a gradient of shape {format_shape(g.shape)} for an input of shape "
                         f"{format_shape(x.shape)} pooled to {format_shape(pooled)}")
    return x.shape, np.result_type(x.dtype, g.dtype)


def _scatter_spec(inputs, **attrs):
    """max_pool2d_grad(x, g) or max_pool2d_grad(x, g, pooled), pooled max_pool2d(x)'s result."""
    if len(inputs) == 3:
        x, pooled = inputs[0], inputs[2]
        expected = _pooled_shape(x, attrs, MAX_ATTRS)
        if not _fits(pooled.shape, expected) or pooled.dtype != x.dtype:
            raise ShapeError(f"the pooled input must be max_pool2d(x): {format_shape(expected)} {x.dtype}, got "
                             f"{format_shape(pooled.shape)} {pooled.dtype}")
        inputs = inputs[:2]
    check_arity(inputs, 2)
    return _scattered(*inputs, attrs, MAX_ATTRS)


def _gather_spec(inputs, **attrs):
    """max_pool2d_gather(x, h): h of x's shape; the result pooled."""
    check_arity(inputs, 2)
    x, h = inputs
    pooled = _pooled_shape(x, attrs, MAX_ATTRS)
    if not _fits(h.shape, x.shape):
        raise ShapeError(f"h of shape {format_shape(h.shape)} must have x's shape {format_shape(x.shape)}")
    return pooled, h.dtype


def _avg_grad_spec(inputs, **attrs):
    """avg_pool2d_grad(g, x): x read for its shape only."""
    check_arity(inputs, 2)
    g, x = inputs
    _scattered(x, g, attrs, AVG_ATTRS)
    if g.dtype.kind != "f":
        raise TypeError(f"expected a real float gradient, got dtype {g.dtype}")
    return x.shape, g.dtype


def _max_pool_vjp(g, out, x, **attrs):
    # (the result handed on: the gradient's kernel then finds the windows' maxima without computing them)
    return (apply("max_pool2d_grad", (x, g, out), attrs),)


def _max_pool_grad_vjp(h, out, x, g, *pooled, **attrs):
    return (None, apply("max_pool2d_gather", (x, h), attrs)) + (None,) * len(pooled)


def _max_pool_gather_vjp(g, out, x, h, **attrs):
    return None, apply("max_pool2d_grad", (x, g), attrs)


def _avg_pool_vjp(g, out, x, **attrs):
    return (apply("avg_pool2d_grad", (g, x), attrs),)


def _avg_pool_grad_vjp(h, out, g, x, **attrs):
    return apply("avg_pool2d", (h,), attrs), None


def _window_flops(pooled_input):
    """One operation per window element of each pooled value (``pooled_input``: which input has the pooled
    shape, None: the result)."""
    def flops(node, shapes):
        shape = shapes[node.id] if pooled_input is None else shapes[node.inputs[pooled_input]]
        return math.prod(shape) * math.prod(node.attrs["kernel_size"])
    return flops


# ------------------------------------------------------------------ torch twins
def _torch_max_pool(T, **attrs):
    return lambda x: T.nn.functional.max_pool2d(x, *(attrs[k] for k in MAX_ATTRS))


def _torch_picks(T, x, attrs):
    """Per window the flat index into H*W of the element torch's max pool picks."""
    return T.nn.functional.max_pool2d(x.detach(), *(attrs[k] for k in MAX_ATTRS), return_indices=True)[1]


def _torch_max_pool_grad(T, **attrs):
    def run(x, g, *pooled):
        picks = _torch_picks(T, x, attrs).flatten(-2)
        g = g.to(T.promote_types(x.dtype, g.dtype))
        flat = T.zeros(x.shape[:-2] + (x.shape[-2] * x.shape[-1],), dtype=g.dtype)
        return flat.scatter_add(-1, picks, g.flatten(-2)).view(x.shape)
    return run


def _torch_max_pool_gather(T, **attrs):
    def run(x, h):
        picks = _torch_picks(T, x, attrs)
        return h.flatten(-2).gather(-1, picks.flatten(-2)).view(picks.shape)
    return run


def _torch_avg_pool(T, **attrs):
    return lambda x: T.nn.functional.avg_pool2d(x, *(attrs[k] for k in AVG_ATTRS))


def _torch_avg_pool_grad(T, **attrs):
    return lambda g, x: T.ops.aten.avg_pool2d_backward(g, x, *(attrs[k] for k in AVG_ATTRS))


_NO_SCALAR_MAX = "no scalar form yet: Python's max does not pick NaN as torch's kernel does"
_NO_SCALAR_AVG = "no scalar form yet: pooling is for images, far larger than the scalar path's plans"
_MAX_POOL = defop("max_pool2d", _max_pool_kernel, _pool_spec(MAX_ATTRS), _max_pool_vjp, OUT | C_ORDER,
                  flops=_window_flops(None), torch=_torch_max_pool, unsupported={"scalar": _NO_SCALAR_MAX})
_MAX_POOL_GRAD = defop("max_pool2d_grad", _max_pool_grad_kernel, _scatter_spec, _max_pool_grad_vjp, OUT | C_ORDER,
                       flops=_window_flops(1), torch=_torch_max_pool_grad, public=False,
                       unsupported={"scalar": _NO_SCALAR_MAX},
                       doc="zeros of x's shape with each g added at the element max_pool2d picks in its window")
_MAX_POOL_GATHER = defop("max_pool2d_gather", _max_pool_gather_kernel, _gather_spec, _max_pool_gather_vjp,
                         flops=_window_flops(None), torch=_torch_max_pool_gather, public=False,
                         unsupported={"scalar": _NO_SCALAR_MAX},
                         doc="per window, h at the element max_pool2d picks in x: the VJP of max_pool2d_grad")
_AVG_POOL = defop("avg_pool2d", _avg_pool_kernel, _pool_spec(AVG_ATTRS), _avg_pool_vjp, flops=_window_flops(None),
                  torch=_torch_avg_pool, unsupported={"scalar": _NO_SCALAR_AVG})
_AVG_POOL_GRAD = defop("avg_pool2d_grad", _avg_pool_grad_kernel, _avg_grad_spec, _avg_pool_grad_vjp, SHAPE_REF,
                       flops=_window_flops(0), torch=_torch_avg_pool_grad, public=False,
                       unsupported={"scalar": _NO_SCALAR_AVG},
                       doc="g divided among the elements of its window, in x's shape: the VJP of avg_pool2d")


# ------------------------------------------------------------------ the public functions
@_MAX_POOL.publish
def max_pool2d(x: TensorLike, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False) -> Tensor:
    """torch.nn.functional.max_pool2d of a (N, C, H, W) or (C, H, W) ``x``: the maximum of each window,
    windows ``stride`` apart (None: ``kernel_size``), over ``x`` padded with -inf (at most half the kernel);
    in ``ceil_mode`` a last window that starts inside the input or its left padding is kept."""
    (x,) = coerce(x)
    attrs = at_user_line("max_pool2d", pool_attrs, kernel_size, stride, padding, dilation, ceil_mode)
    return apply("max_pool2d", (as_float(x),), attrs)


@_AVG_POOL.publish
def avg_pool2d(x: TensorLike, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None) -> Tensor:
    """torch.nn.functional.avg_pool2d of a (N, C, H, W) or (C, H, W) ``x``: each window's sum divided by
    ``divisor_override``, else by its size counting zero padding (``count_include_pad``) or not."""
    (x,) = coerce(x)
    attrs = at_user_line("avg_pool2d", pool_attrs, kernel_size, stride, padding, 1, ceil_mode,
                         (count_include_pad, divisor_override))
    return apply("avg_pool2d", (as_float(x),), attrs)


def _max_pool_internal(opdef, doc):
    """The public function of max_pool2d_grad or max_pool2d_gather: x, then the gradient or the values to pick
    from, then max_pool2d's arguments; ``pooled`` (max_pool2d_grad only): max_pool2d(x, ...) if at hand."""
    def build(x: TensorLike, other: TensorLike, kernel_size, stride=None, padding=0, dilation=1,
              ceil_mode=False, *, pooled=None) -> Tensor:
        inputs = coerce(x, other) if pooled is None else coerce(x, other, pooled)
        if pooled is not None and opdef is not _MAX_POOL_GRAD:
            raise TypeError(f"{opdef.name} takes no pooled input")
        attrs = at_user_line(opdef.name, pool_attrs, kernel_size, stride, padding, dilation, ceil_mode)
        return apply(opdef.name, inputs, attrs)
    build.__doc__ = doc
    return opdef.publish(build)


max_pool2d_grad = _max_pool_internal(
    _MAX_POOL_GRAD, "max_pool2d_grad(x, g, kernel_size, ...): the gradient of max_pool2d(x, kernel_size, ...) "
                    "for the gradient g of its result.")
max_pool2d_gather = _max_pool_internal(
    _MAX_POOL_GATHER, "max_pool2d_gather(x, h, kernel_size, ...): per window of max_pool2d(x, kernel_size, ...), "
                      "h (of x's shape) at the element the max picks.")


@_AVG_POOL_GRAD.publish
def avg_pool2d_grad(g: TensorLike, x: TensorLike, kernel_size, stride=None, padding=0, ceil_mode=False,
                    count_include_pad=True, divisor_override=None) -> Tensor:
    """The gradient of avg_pool2d(x, ...) for the gradient ``g`` of its result (x is read for its shape)."""
    g, x = coerce(g, x)
    attrs = at_user_line("avg_pool2d_grad", pool_attrs, kernel_size, stride, padding, 1, ceil_mode,
                         (count_include_pad, divisor_override))
    return apply("avg_pool2d_grad", (g, x), attrs)


def global_avg_pool2d(x: TensorLike, keepdims: bool = False) -> Tensor:
    """The mean over H and W of a (N, C, H, W) or (C, H, W) ``x``: (N, C), or (N, C, 1, 1) with ``keepdims``
    (torch's adaptive_avg_pool2d(x, 1))."""
    (x,) = coerce(x)
    if x.ndim not in (3, 4):
        raise ShapeError(f"global_avg_pool2d: expected a (N, C, H, W) or (C, H, W) input, got shape "
                         f"{format_shape(x.shape)} (at {user_frame()})")
    return mean(x, axis=(-2, -1), keepdims=keepdims)


__all__ = ["avg_pool2d", "global_avg_pool2d", "max_pool2d"]
