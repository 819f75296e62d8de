"""Random draws: standard normal, uniform and Bernoulli values read from a key, the state of a random stream.

A key is a float64 tensor of shape (2,) holding two integers, [seed, position] (exact in float64 below
2**53). A draw's kernel is a pure function of the key's value and the draw's ``index``: it reads the
sub-stream at ``position + index`` of the seed's Philox stream (numpy's counter-based generator, its
counter started at that position; the 2**128 blocks before the next position are its own, so no two
draws overlap). Each of these ops says so in its OpDef (``draws``): compile numbers the draws of each
key in build order, and a key that is a parameter moves on by one position per draw when a call
succeeds (staticgrad.effects), as eager mode moves it on at each draw. ``sg.random`` builds on these
ops (``sg.ops.random_*``); it adds the default key, means, scales and dropout.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .. import effects
from ..tensor import CONTEXT, ShapeError, StaticgradError, Tensor, TensorLike, format_shape, user_frame
from .registry import NONDIFF, SHAPE_REF, apply, coerce, defop, integers, stored_dtype, stored_sizes

KEY_SHAPE = (2,)
MAX_KEY = 2 ** 53            # seeds and positions are integers below this: exact in float64
_ONE_DRAW = np.array([0.0, 1.0])
_ONE_DRAW.setflags(write=False)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))      # what numpy's Generator draws
_UNSUPPORTED = {"scalar": "a random draw: numpy's generator makes its values, not per-element Python code",
                "torch": "torch's generators make other streams than numpy's Philox: no twin gives the same "
                         "numbers"}


def next_key(key):
    """The key after one draw: its position moved on by one (a numpy value, or a tensor: more graph)."""
    return key + _ONE_DRAW


def key_numbers(key) -> tuple[int, int]:
    """(seed, position) of a key's value, or the ValueError a bad one (set by hand, fed) deserves."""
    key = np.asarray(key)
    with np.errstate(invalid="ignore"):
        good = key.shape == KEY_SHAPE and key.dtype.kind == "f" and bool(
            np.all((key >= 0) & (key < MAX_KEY) & (key == np.floor(key))))
    if not good:
        raise ValueError(f"a random key holds two integers [seed, position] in [0, 2**53), got {key!r}")
    return int(key[0]), int(key[1])


def _bits(key, index):
    """The bit generator of one draw: the seed's Philox stream from block ``(position + index) * 2**128``."""
    seed, position = key_numbers(key)
    return np.random.Philox(key=seed, counter=[0, 0, position + index, 0])


def _size(ref, shape):
    return ref[0].shape if ref else shape


def _normal_kernel(key, *ref, shape, dtype, index):
    return np.random.Generator(_bits(key, index)).standard_normal(_size(ref, shape), dtype=dtype)


def _uniform_kernel(key, *ref, shape, dtype, index):
    return np.random.Generator(_bits(key, index)).random(_size(ref, shape), dtype=dtype)


def _bernoulli_kernel(key, *ref, shape, p, dtype, index):
    # One 32-bit word per value (half a Philox output): P(word < floor(p * 2**32)) is p to within 2**-32.
    # Half the bits of comparing a float64 uniform with p, at half the cost (dropout's masks are big).
    size = _size(ref, shape)
    n = math.prod(size)
    threshold = math.floor(p * 2 ** 32)
    if threshold >= 2 ** 32:
        hits = np.ones(size, bool)
    else:
        words = _bits(key, index).random_raw((n + 1) // 2).view(np.uint32)[:n]
        hits = (words < np.uint32(threshold)).reshape(size)
    return hits if dtype == np.bool_ else hits.astype(dtype)


# ------------------------------------------------------------------ shape rules
def _draw_shape(inputs, shape, index):
    """The shape of a draw (its reference's, or ``shape``), its key and index checked."""
    if len(inputs) not in (1, 2):
        raise TypeError(f"takes a key and at most one shape reference, got {len(inputs)} inputs")
    key = inputs[0]
    if key.dtype != np.float64 or key.shape not in (KEY_SHAPE, (None,)):
        raise TypeError(f"a key is a float64 tensor of shape (2,) (see sg.random.key), got {key.dtype} of "
                        f"shape {format_shape(key.shape)}")
    (index,) = integers((index,), "index")
    if index < 0:
        raise ShapeError(f"index must be >= 0, got {index}")
    if len(inputs) == 2:
        if shape is not None:
            raise ShapeError("a draw with a shape reference has the reference's shape: shape must be None")
        return inputs[1].shape
    if shape is None:
        raise ShapeError("a draw needs a shape or a shape reference")
    return stored_sizes(shape)


def _float_spec(inputs, shape, dtype, index):
    if stored_dtype(dtype) not in _FLOATS:
        raise TypeError(f"dtype must be float32 or float64 (what numpy's generator draws), got {dtype}")
    return _draw_shape(inputs, shape, index), dtype


def _bernoulli_spec(inputs, shape, p, dtype, index):
    if stored_dtype(dtype).kind not in "bf":
        raise TypeError(f"dtype must be bool or a float dtype, got {dtype}")
    if type(p) is not float or not 0.0 <= p <= 1.0:
        raise ShapeError(f"p must be a float between 0 and 1, got {p!r}")
    return _draw_shape(inputs, shape, index), dtype


def _specialize(node, shapes, nodes):
    # At the sizes of a call the reference is a shape: drawing at that shape leaves the reference free
    # to die earlier (dropout's x is otherwise held until its mask is drawn).
    if len(node.inputs) == 1:
        return node
    return node.copy(inputs=node.inputs[:1], attrs=dict(node.attrs, shape=tuple(shapes[node.inputs[1]])))


_FACTS = dict(draws=next_key, specialize=_specialize, public=False, unsupported=_UNSUPPORTED)
_NORMAL = defop("random_normal", _normal_kernel, _float_spec, None, NONDIFF | SHAPE_REF, **_FACTS,
                doc="standard normal values from a key (see sg.random.normal)")
_UNIFORM = defop("random_uniform", _uniform_kernel, _float_spec, None, NONDIFF | SHAPE_REF, **_FACTS,
                 doc="uniform values in [0, 1) from a key (see sg.random.uniform)")
_BERNOULLI = defop("random_bernoulli", _bernoulli_kernel, _bernoulli_spec, None, NONDIFF | SHAPE_REF, **_FACTS,
                   doc="1 with probability p, else 0, from a key (see sg.random.bernoulli)")


# ------------------------------------------------------------------ building a draw
def sizes(shape, who) -> tuple:
    """A user's shape (an int or a sequence of ints) as a tuple of sizes."""
    items = (shape,) if isinstance(shape, numbers.Integral) else shape
    if not isinstance(items, Sequence) or any(d is None for d in items):
        raise ShapeError(f"{who}: shape {shape!r} is not a tuple of sizes; a draw of a size known only at "
                         f"run time takes like=, a tensor of that shape (at {user_frame()})")
    try:
        out = integers(tuple(items), "shape")
    except TypeError as err:
        raise TypeError(f"{who}: {err} (at {user_frame()})") from None
    if any(d < 0 for d in out):
        raise ShapeError(f"{who}: negative size in shape {format_shape(out)} (at {user_frame()})")
    return out


def draw(op, key, shape, like, attrs) -> Tensor:
    """``op`` from ``key``, of ``shape`` or of ``like``'s run-time shape; a parameter key moves on by one
    position per call (an effect compile adds), an eager leaf or a parameter used eagerly at once."""
    (key,) = coerce(key)
    if CONTEXT.tracing:
        raise StaticgradError(f"{op} inside a scan, cond or while_loop body is not supported: every step would "
                              f"draw the same numbers, and a key moves on once per call; draw them outside the "
                              f"loop, one draw with a leading axis of steps (at {user_frame()})")
    if (like is None) == (shape is None):
        raise TypeError(f"{op}: give a shape or like=, a tensor whose run-time shape the draw takes, not "
                        f"{'both' if like is not None else 'neither'} (at {user_frame()})")
    inputs = (key,) if like is None else (key, coerce(like)[0])
    out = apply(op, inputs, dict(attrs, shape=None if like is not None else sizes(shape, op), index=0))
    out._requires_grad = False              # no gradient flows into a draw
    if key.op == "parameter" and not getattr(out, "_eager", False):
        effects.add_update(out, key, next_key, f"a random draw ({op})")
    return out


@_NORMAL.publish
def random_normal(key: TensorLike, shape: int | Sequence[int] | None = None, like: TensorLike | None = None,
                  dtype: npt.DTypeLike = "float64") -> Tensor:
    """Standard normal values (numpy's ``standard_normal``) from ``key``, of ``shape`` or of ``like``'s
    run-time shape. A parameter key moves on by one draw per call; sg.random.normal is the usual door."""
    return draw("random_normal", key, shape, like, {"dtype": np.dtype(dtype)})


@_UNIFORM.publish
def random_uniform(key: TensorLike, shape: int | Sequence[int] | None = None, like: TensorLike | None = None,
                   dtype: npt.DTypeLike = "float64") -> Tensor:
    """Uniform values in [0, 1) (numpy's ``random``) from ``key``, of ``shape`` or of ``like``'s run-time
    shape. A parameter key moves on by one draw per call; sg.random.uniform is the usual door."""
    return draw("random_uniform", key, shape, like, {"dtype": np.dtype(dtype)})


@_BERNOULLI.publish
def random_bernoulli(key: TensorLike, shape: int | Sequence[int] | None = None, like: TensorLike | None = None,
                     p: float = 0.5, dtype: npt.DTypeLike = "float64") -> Tensor:
    """1 with probability ``p`` (to within 2**-32), else 0, from ``key``, of ``shape`` or of ``like``'s
    run-time shape, as ``dtype`` (bool or a float). sg.random.bernoulli is the usual door."""
    return draw("random_bernoulli", key, shape, like, {"p": float(p), "dtype": np.dtype(dtype)})
