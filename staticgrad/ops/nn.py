"""Normalizing ops: softmax, log_softmax and the fused softmax cross-entropy loss."""
from __future__ import annotations

import cmath
import functools
from collections.abc import Sequence

import numpy as np

from ..tensor import ShapeError, Tensor, TensorLike, constant, format_shape
from .elementary import exp
from .elementwise import as_float
from .reduce import _logsumexp_kernel, rowwise_scalar, sum
from .registry import NONDIFF, SHAPE_REF, apply, check_arity, coerce, defop, kernel_dtype, stored_axes
from .shape import op_axes


def _softmax_kernel(x, axis):
    # initial=-inf: an empty axis has no max, and its softmax is empty (the same values otherwise)
    e = np.exp(x - np.maximum.reduce(x, axis=axis, keepdims=True, initial=-np.inf))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax_kernel(x, axis):
    return x - _logsumexp_kernel(x, axis, True)


def _float_spec(inputs, axis):
    (x,) = inputs
    stored_axes(axis, x.ndim)
    return x.shape, kernel_dtype(np.exp, (x.dtype,))


def _softmax_vjp(g, out, x, axis):
    return (out * (g - sum(g * out, axis=axis, keepdims=True)),)


def _log_softmax_vjp(g, out, x, axis):
    return (g - exp(out) * sum(g, axis=axis, keepdims=True),)


def _torch_along(name):
    def make(T, axis):
        if len(axis) != 1:
            raise NotImplementedError(f"{name} over several axes has no torch twin")
        fn, dim = getattr(T, name), axis[0]
        return lambda x: fn(x, dim=dim)
    return make


_SOFTMAX = defop("softmax", _softmax_kernel, _float_spec, _softmax_vjp, flops=8, scalar_rule=rowwise_scalar("softmax"),
                 torch=_torch_along("softmax"))
_LOG_SOFTMAX = defop("log_softmax", _log_softmax_kernel, _float_spec, _log_softmax_vjp, flops=8,
                     scalar_rule=rowwise_scalar("log_softmax"), torch=_torch_along("log_softmax"))


@_SOFTMAX.publish
def softmax(x: TensorLike, axis: int | Sequence[int] = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis``, computed without overflow."""
    (x,) = coerce(x)
    return apply("softmax", (as_float(x),), {"axis": op_axes("softmax", axis, x.ndim)})


@_LOG_SOFTMAX.publish
def log_softmax(x: TensorLike, axis: int | Sequence[int] = -1) -> Tensor:
    """x - logsumexp(x) along ``axis``."""
    (x,) = coerce(x)
    return apply("log_softmax", (as_float(x),), {"axis": op_axes("log_softmax", axis, x.ndim)})


# ------------------------------------------------------------------ one-hot and the fused loss
_UNSIGNED = {k: np.dtype(f"u{k}") for k in (1, 2, 4, 8)}


def _check_labels(labels, classes):
    # One reduction per training step: seen as unsigned, a negative label is larger than any class.
    if labels.size and np.maximum.reduce(labels.view(_UNSIGNED[labels.itemsize]), axis=None) >= classes:
        raise ValueError(f"labels must lie in [0, {classes}), got values in "
                         f"[{labels.min()}, {labels.max()}]")


def _one_hot_kernel(labels, ref):
    _check_labels(labels, ref.shape[-1])
    return (labels[..., None] == np.arange(ref.shape[-1])).astype(ref.dtype)


def _one_hot_scalar(em, node, ins, shape):
    labels, ref = ins
    depth = ref.shape[-1]
    out = np.empty(labels.shape + (depth,), dtype=object)
    for idx in np.ndindex(labels.shape):
        em.check_label(labels[idx], depth)
        for c in range(depth):
            out[idx + (c,)] = em.assign(f"(1.0 if {labels[idx]} == {c} else 0.0)")
    return out


def _one_hot_torch(T):
    return lambda labels, like: T.nn.functional.one_hot(labels, like.shape[-1]).to(like.dtype)


def _sce_grad_torch(T):
    def run(logits, labels):
        onehot = T.nn.functional.one_hot(labels, logits.shape[-1]).to(logits.dtype)
        return (T.softmax(logits, -1) - onehot) / max(labels.numel(), 1)
    return run


def _one_hot_spec(inputs):
    check_arity(inputs, 2)
    labels, like = inputs
    if labels.dtype.kind not in "iu" or like.ndim < 1:
        raise ShapeError(f"integer labels and a tensor with a class axis, got {labels.dtype} labels "
                         f"and a like of shape {format_shape(like.shape)}")
    return labels.shape + like.shape[-1:], like.dtype


_ONE_HOT = defop("one_hot", _one_hot_kernel, _one_hot_spec,
                 None, NONDIFF | SHAPE_REF, scalar_rule=_one_hot_scalar, scalar_kinds=(("iu", "f"), "f"),
                 torch=_one_hot_torch,
                 doc="one_hot(labels, like): rows of the identity, as many classes as like's last axis")


@_ONE_HOT.publish
def one_hot(labels: TensorLike, like: TensorLike) -> Tensor:
    """Rows of the identity for integer ``labels``, as many classes as ``like``'s last axis, in like's dtype."""
    (labels,) = coerce(labels)
    (like,) = coerce(like)
    return apply("one_hot", (labels, like))


def _rows(logits, labels):
    """Logits as (rows, classes), labels flat, and each row's max made finite (as logsumexp does)."""
    classes = logits.shape[-1]
    _check_labels(labels, classes)
    z = logits.reshape(-1, classes)
    if classes < 32 and len(z) > classes:
        # numpy reduces a short inner axis row by row (6 us for 128 rows of 10); across the rows of the
        # transposed copy it is one vector pass (under 2 us). A max is exact in any order.
        m = np.maximum.reduce(z.T.copy(), axis=0).reshape(-1, 1)
    else:
        m = np.maximum.reduce(z, axis=1, keepdims=True)
    # One sum stands in for an all(isfinite) over the rows; an overflowing sum of finite maxima only
    # sends it down the exact path, which then changes nothing.
    if not cmath.isfinite(np.add.reduce(m, axis=None)):     # (complex logits too)
        m = np.where(np.isfinite(m), m, 0)
    return z, labels.reshape(-1), m


def _sce_parts(logits, labels):
    """(z, m, e, s, at): rows, row maxima, e = exp(z - m), its row sums, and the flat index of each label."""
    z, t, m = _rows(logits, labels)
    # C order whatever the logits' layout: the gradient subtracts the one-hot through a flat view of e
    # (of a transposed e, reshape(-1) would be a copy, and the subtraction lost)
    e = np.subtract(z, m, order="C")
    np.exp(e, out=e)
    at = np.add(_row_starts(*z.shape), t, dtype=np.intp)
    return z, m, e, np.add.reduce(e, axis=1, keepdims=True), at


@functools.lru_cache(maxsize=16)
def _row_starts(rows, classes):
    # The flat index where each row starts; a training loop asks for the same few batch sizes.
    starts = np.arange(0, rows * classes, classes)
    starts.flags.writeable = False
    return starts


def _sce_loss(z, m, e, s, at):
    # the mean over rows of logsumexp(z) - z[label]
    if not len(at):
        return z.dtype.type(np.nan)          # the mean over an empty batch
    lse = np.log(s[:, 0])
    lse += m[:, 0]
    lse -= z.take(at)
    return np.add.reduce(lse) / len(at)


def _sce_grad_rows(z, m, e, s, at):
    # (softmax - onehot) / N, computed in e's memory
    e /= s
    e.reshape(-1)[at] -= 1
    e /= max(len(at), 1)
    return e


def _sce_kernel(logits, labels):
    return _sce_loss(*_sce_parts(logits, labels))


def _sce_pair_kernel(logits, labels):
    """The loss and its gradient from one pass over the logits (the generated code calls this when a
    plan has both, as a training step does)."""
    parts = _sce_parts(logits, labels)
    return _sce_loss(*parts), _sce_grad_rows(*parts).reshape(logits.shape)


def _sce_spec(inputs):
    logits, labels = inputs
    if logits.ndim < 1:
        raise ShapeError("logits must have a class axis")
    if labels.dtype.kind not in "iu":
        raise ShapeError(f"labels must be integer class indices, got dtype {labels.dtype}")
    expected = logits.shape[:-1]
    if labels.ndim != len(expected) or any(a is not None and b is not None and a != b
                                          for a, b in zip(labels.shape, expected)):
        raise ShapeError(f"labels of shape {format_shape(labels.shape)} do not match logits "
                         f"{format_shape(logits.shape)} (expected {format_shape(expected)})")
    return (), logits.dtype


def _sce_vjp(g, out, logits, labels):
    # The fused pair: (softmax(z) - onehot(t)) / N in one kernel, scaled by the incoming gradient.
    return apply("softmax_cross_entropy_grad", (logits, labels)) * g, None


def _sce_grad_kernel(logits, labels):
    return _sce_grad_rows(*_sce_parts(logits, labels)).reshape(logits.shape)


def _sce_grad_vjp(g, out, logits, labels):
    # d/dz of (softmax(z) - onehot) / N, applied to g: softmax's VJP, divided by N.
    if None in labels.shape:
        n = apply("size", (labels,), {"axis": tuple(range(labels.ndim)), "dtype": logits.dtype})
    else:
        n = constant(max(int(np.prod(labels.shape)), 1), dtype=logits.dtype)
    probs = softmax(logits, axis=-1)
    return probs * (g - sum(g * probs, axis=-1, keepdims=True)) / n, None


def _sce_scalar(em, node, ins, shape):
    """As the kernel: each row's exp(z - m) summed in numpy's order, then the rows' losses added with
    np.add.reduce's order, so the bits are the kernel's."""
    logits, labels = ins
    rows, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    add_row = em.adder(rows.shape, (1,), of=node.inputs[0])
    totals, maxima, picked = [], [], []
    for row, label in zip(rows, labels):
        em.check_label(label, len(row))
        m = em.assign(f"max({', '.join(row)})") if len(row) > 1 else row[0]
        m = em.assign(f"({m} if {m} - {m} == 0.0 else 0.0)")     # an infinite max must not make nan
        exps = em.numpy("exp", [f"{v} - {m}" for v in row])
        totals.append(em.assign(f"0.0 + {add_row(exps)}"))
        maxima.append(m)
        picked.append(em.assign(f"({', '.join(row)},)[{label}]"))
    logs = em.numpy("log", totals)
    terms = [em.assign(f"{log} + {m} - {p}") for log, m, p in zip(logs, maxima, picked)]
    add = em.adder((len(terms),), (0,))
    return np.array(em.assign(f"(0.0 + {add(terms)}) / {float(len(terms))!r}"), dtype=object)


def _sce_torch(T):
    return lambda logits, labels: T.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                                labels.reshape(-1))


_SCE = defop("softmax_cross_entropy", _sce_kernel, _sce_spec, _sce_vjp, flops=10, scalar_rule=_sce_scalar,
             scalar_kinds=(("f", "iu"), "f"), paired={"softmax_cross_entropy_grad": _sce_pair_kernel},
             torch=_sce_torch)
def _sce_grad_spec(inputs):
    _sce_spec(inputs)          # the loss's own checks of the labels
    return inputs[0].shape, inputs[0].dtype


_SCE_GRAD = defop("softmax_cross_entropy_grad", _sce_grad_kernel, _sce_grad_spec,
                  _sce_grad_vjp, unsupported={"scalar": "no scalar form yet (plans of a whole training step pair it "
                                                        "with the loss in one kernel)"}, torch=_sce_grad_torch,
                  doc="(softmax(logits) - onehot(labels)) / N: the gradient of the mean cross-entropy")


@_SCE_GRAD.publish
def softmax_cross_entropy_grad(logits: TensorLike, labels: TensorLike) -> Tensor:
    """(softmax(logits) - one_hot(labels)) / N, N the number of labels: the gradient of
    softmax_cross_entropy(logits, labels) with respect to the logits, in one pass."""
    (logits,) = coerce(logits)
    (labels,) = coerce(labels)
    return apply("softmax_cross_entropy_grad", (as_float(logits), labels))


@_SCE.publish
def softmax_cross_entropy(logits: TensorLike, labels: TensorLike) -> Tensor:
    """Mean over the batch of -log softmax(logits)[label]; ``labels`` are integer classes."""
    (logits,) = coerce(logits)
    (labels,) = coerce(labels)
    return apply("softmax_cross_entropy", (as_float(logits), labels))
