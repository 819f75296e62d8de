"""batch_norm and layer_norm with torch.nn.functional's semantics, written with staticgrad's ops.

Being compositions (means, squares, a square root), they differentiate to any order through the ops' own
VJPs, and run the same on placeholders (a graph) and on eager tensors (values). A batch norm in training
also moves its running statistics: in a graph, ``effects.add_update`` has ``sg.compile`` add the update
whenever the output is computed; on an eager input they change at once, as torch's do.
"""
from __future__ import annotations

import numpy as np

from .. import effects, ops
from ..ops.registry import as_tensor
from ..tensor import ShapeError, Tensor, format_shape, user_frame


def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    """Normalize ``x`` (N, C, ...) per channel (axis 1), then scale by ``weight`` and shift by ``bias`` (C,).

    ``training``: by the batch's mean and biased variance, and, given running statistics, move them by
    ``momentum`` towards the batch's mean and unbiased variance (parameters made with
    ``requires_grad=False`` in a graph, which ``sg.compile`` updates; eager tensors or numpy arrays with an
    eager ``x``, changed at once). Otherwise by ``running_mean`` and ``running_var``.
    """
    x = as_tensor(x)
    _check_channels(x, running_mean, running_var, weight, bias)
    axes = (0,) + tuple(range(2, x.ndim))
    across = (-1,) + (1,) * (x.ndim - 2)        # a (C,) vector against (N, C, ...)
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError(f"batch_norm: running_mean and running_var must be given in evaluation mode "
                             f"(training=False) (at {user_frame()})")
        scale = _scale(running_var, weight, eps)
        return _shift(x * ops.reshape(scale, across), bias, scale * running_mean, across)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"batch_norm: give both running_mean and running_var, or neither (at {user_frame()})")
    _check_batch(x, axes)
    mean = ops.mean(x, axis=axes)
    centered = x - ops.reshape(mean, across)
    var = ops.mean(ops.square(centered), axis=axes)
    y = centered * ops.reshape(_scale(var, weight, eps), across)
    if bias is not None:
        y = y + ops.reshape(bias, across)
    if running_mean is not None:
        unbiased = var * _bessel(x, axes)
        _track(y, x, [(running_mean, mean, "running mean"), (running_var, unbiased, "running variance")],
               float(momentum))
    return y


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize ``x`` over its last axes, ``normalized_shape`` (an int or a tuple of the trailing sizes), by
    their mean and biased variance, then scale by ``weight`` and shift by ``bias`` (of that shape)."""
    x = as_tensor(x)
    shape = (int(normalized_shape),) if np.ndim(normalized_shape) == 0 else tuple(int(n) for n in normalized_shape)
    tail = x.shape[x.ndim - len(shape):] if len(shape) <= x.ndim else None
    if not shape or tail is None or any(d is not None and d != n for d, n in zip(tail, shape)):
        raise ShapeError(f"layer_norm: normalized_shape={shape} must be the last sizes of the input, got an "
                         f"input of shape {format_shape(x.shape)} (at {user_frame()})")
    for what, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(np.shape(p)) != shape:
            raise ShapeError(f"layer_norm: {what} of shape {format_shape(np.shape(p))}, expected "
                             f"{format_shape(shape)} (normalized_shape) (at {user_frame()})")
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    centered = x - ops.mean(x, axis=axes, keepdims=True)
    var = ops.mean(ops.square(centered), axis=axes, keepdims=True)
    y = centered * ops.reciprocal(ops.sqrt(var + eps))
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _check_channels(x, *params):
    """x's axis 1 against every (C,) parameter given."""
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: expected an input of shape (N, C, ...), got {format_shape(x.shape)} "
                         f"(at {user_frame()})")
    channels = x.shape[1]
    names = ("running_mean", "running_var", "weight", "bias")
    for what, p in zip(names, params):
        if p is None:
            continue
        shape = tuple(p.shape) if isinstance(p, Tensor) else np.shape(p)
        if len(shape) != 1 or (channels is not None and shape[0] not in (None, channels)):
            raise ShapeError(f"batch_norm: {what} of shape {format_shape(shape)} does not fit an input of shape "
                             f"{format_shape(x.shape)}: expected ({channels},), one number per channel "
                             f"(axis 1) (at {user_frame()})")


def _check_batch(x, axes):
    # torch refuses a batch with one value per channel: its variance is 0 / 0 unbiased and says nothing
    sizes = [x.shape[a] for a in axes]
    if None not in sizes and int(np.prod(sizes)) == 1:
        raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got an input of "
                         f"shape {format_shape(x.shape)} (at {user_frame()})")


def _scale(var, weight, eps):
    """weight / sqrt(var + eps), on (C,) vectors: one multiplication of the whole input follows."""
    inverse = ops.reciprocal(ops.sqrt(var + eps))
    return inverse if weight is None else inverse * weight


def _shift(scaled, bias, offset, across):
    """scaled - offset + bias, with the (C,) vectors added up before they meet the whole input."""
    shift = -offset if bias is None else bias - offset
    return scaled + ops.reshape(shift, across)


def _bessel(x, axes):
    """n / (n - 1) for the n values per channel (read at run time where a size is unknown)."""
    n = ops.size(x, axes, dtype=x.dtype)
    return n / (n - 1)


def _track(anchor, x, pairs, momentum):
    """Move each running statistic towards its batch value by ``momentum``: at once for an eager ``x``,
    else as an update ``sg.compile`` adds whenever ``anchor`` is computed."""
    if getattr(x, "_eager", False):
        for state, batch, what in pairs:
            _set_now(state, momentum * batch.value, 1 - momentum, what)
        return
    for state, batch, what in pairs:
        effects.add_update(anchor, state, lambda value, batch=batch: value * (1 - momentum) + batch * momentum,
                      f"batch_norm's {what}")


def _set_now(state, step, keep, what):
    """state <- keep * state + step, in place: an eager leaf's value, or a numpy array's contents."""
    if isinstance(state, np.ndarray) and state.flags.writeable:
        np.copyto(state, keep * state + step, casting="same_kind")
    elif isinstance(state, Tensor) and not state.inputs and state._value is not None and state.op != "constant":
        # (a module's own buffer, a parameter, is state of eager mode too: one model object runs both ways)
        state.value = (keep * state.value + step).astype(state.dtype)
    else:
        raise TypeError(f"batch_norm: on an eager input its {what} must be a parameter, an eager tensor or a "
                        f"writable numpy array, which it changes at once; got a {type(state).__name__} "
                        f"(at {user_frame()})")
