"""The op registry: one :class:`OpDef` per op holds its numpy kernel, shape/dtype rule and VJP rule.

``apply`` is the single door through which every op result is made, symbolic or eager.
"""
from __future__ import annotations

import functools
import numbers
import operator
import warnings

import numpy as np

from ..tensor import ShapeError, Tensor, constant, format_shape, user_frame

ELEMENTWISE = 1      # output[i] depends only on inputs[i] (after broadcasting)
COMMUTATIVE = 2      # f(a, b) == f(b, a)
VIEW = 4             # the kernel may return a view of its first input (never write into it)
NONDIFF = 8          # no gradient flows through (comparisons, labels, shapes)
SHAPE_REF = 16       # inputs after the first are read only for their runtime shape

REGISTRY: dict[str, "OpDef"] = {}

# Kernels computing two ops on the same inputs in one pass, (op_a, op_b) -> kernel returning (a, b); the
# code generator calls one where a plan has both (a training step needs a loss and its gradient).
PAIRED: dict[tuple[str, str], object] = {}

# Set by staticgrad.eager: called as hook(opdef, inputs, attrs) when any input is an eager tensor
# (one whose class says ``_eager = True``).
EAGER_HOOK = None


class OpDef:
    """Everything about one op. ``vjp(g, out, *inputs, **attrs)`` returns one gradient (or None) per input,
    written with staticgrad ops so that the backward graph is an ordinary graph."""

    __slots__ = ("name", "kernel", "infer", "vjp", "flags", "doc")

    def __init__(self, name, kernel, infer, vjp, flags=0, doc=""):
        self.name, self.kernel, self.infer, self.vjp, self.flags, self.doc = name, kernel, infer, vjp, flags, doc

    def has(self, flag) -> bool:
        return bool(self.flags & flag)

    def __repr__(self):
        return f"<op {self.name}>"


def defop(name, kernel, infer, vjp=None, flags=0, doc=""):
    if name in REGISTRY:
        raise ValueError(f"op {name!r} is defined twice")
    if vjp is None:
        flags |= NONDIFF
    REGISTRY[name] = OpDef(name, kernel, infer, vjp, flags, doc)
    return REGISTRY[name]


def defpair(first, second, kernel):
    PAIRED[(first, second)] = kernel


def apply(name, inputs, attrs=None, source=None) -> Tensor:
    """Make the tensor ``name(*inputs, **attrs)``, checking shapes now so errors point at the user's line."""
    opdef = REGISTRY[name]
    attrs = attrs or {}
    if EAGER_HOOK is not None and any(getattr(x, "_eager", False) for x in inputs):
        return EAGER_HOOK(opdef, inputs, attrs)
    source = source or user_frame()
    try:
        shape, dtype = opdef.infer(inputs, **attrs)
    except (ShapeError, TypeError) as err:
        # numpy's own dtype refusals (a text placeholder in arithmetic) too: name the op and the line.
        kind = ShapeError if isinstance(err, ShapeError) else TypeError
        raise kind(f"{name}: {err} (at {source})") from None
    return Tensor(name, inputs, attrs, shape, dtype, source=source)


# ------------------------------------------------------------------ turning Python values into tensors
def _is_scalar(value) -> bool:
    return isinstance(value, (bool, numbers.Number)) and not isinstance(value, np.generic)


def as_tensor(value, like=None) -> Tensor:
    """A tensor for ``value``. Python scalars adopt ``like``'s dtype when that loses nothing (principle 6)."""
    if isinstance(value, Tensor):
        return value
    if EAGER_HOOK is not None and hasattr(value, "_eager"):
        return value
    if _is_scalar(value) and like is not None:
        kind = np.dtype(like).kind
        if kind in "fc" or (kind in "iu" and isinstance(value, numbers.Integral)):
            return constant(value, dtype=like)
        if isinstance(value, bool) and kind == "b":
            return constant(value, dtype=bool)
    if isinstance(value, float):
        return constant(value, dtype=np.float64)
    return constant(value)


def coerce(*values):
    """Tensors for ``values``; Python scalars adopt the dtype of the first tensor argument."""
    like = next((v.dtype for v in values if isinstance(v, Tensor) or hasattr(v, "_eager")), None)
    return tuple(as_tensor(v, like) for v in values)


# ------------------------------------------------------------------ shape and dtype rules
def broadcast_shapes(*shapes):
    """numpy broadcasting over static shapes; ``None`` is a size known only at run time."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        dims = [s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            raise ShapeError("cannot broadcast shapes " + " and ".join(format_shape(s) for s in shapes))
        if known:
            out.append(known.pop())
        elif any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


@functools.lru_cache(maxsize=None)
def kernel_dtype(kernel, dtypes, attrs_key=()):
    """The dtype numpy gives for ``kernel`` on these input dtypes (exact numpy promotion, cached)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(kernel(*(np.ones((), d) for d in dtypes), **dict(attrs_key))).dtype


def elementwise_spec(kernel):
    """Broadcast the inputs' shapes; take the dtype numpy's kernel gives."""
    def infer(inputs, **attrs):
        shape = broadcast_shapes(*(x.shape for x in inputs))
        return shape, kernel_dtype(kernel, tuple(x.dtype for x in inputs), tuple(sorted(attrs.items())))
    return infer


def same_spec(inputs, **attrs):
    return inputs[0].shape, inputs[0].dtype


def integers(values, what):
    """``values`` as a tuple of ints. Like numpy, floats, strings and bools are not sizes or axes."""
    try:
        if any(isinstance(v, (bool, np.bool_)) for v in values):
            raise TypeError
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(f"{what} must be integers, got {values!r}") from None


def normalize_axis(axis, ndim, op="reduce"):
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    axes = integers(tuple(axis) if isinstance(axis, (tuple, list)) else (axis,), "axis")
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of range for a tensor of rank {ndim}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}")
    return tuple(sorted(out))
