"""sg.random: random numbers whose state lives in the graph, and dropout (sg.dropout).

A key is the state of one random stream: a parameter that is not trained (``requires_grad=False``),
float64 of shape (2,), holding [seed, position]. ``key(seed)`` makes one; ``default_key()`` is the one
draws use when given none, and ``seed(s)`` resets it to [s, 0] (as torch.manual_seed). A compiled
function that draws D times from a key reads positions p .. p+D-1 of its stream and, when the call
succeeds, leaves the key at p+D: every call draws new numbers, the same ones from the same seed, and
since a key is a parameter, ``sg.save``/``sg.save_parameters`` keep where the stream stands. Eagerly
(a draw whose ``like`` or key is an eager tensor) each draw reads one position at once and moves the
key on, so the same model code gives the same numbers in both modes. A draw of a symbolic key with no
eager ``like`` stays symbolic, even among eager tensors: give it ``like=`` or an eager key
(``eager.tensor(k.value)``). A placeholder key, fed each call, is only read: moving it on is the caller's.

Sizes known only at run time (a batch of None rows) come from ``like=``: a tensor whose run-time shape
the draw takes; ``shape`` then gives its static shape (None where unknown), checked against like's.
Means, scales, bounds and probabilities are numbers; for tensors write the arithmetic
(``mu + sigma * sg.random.normal(mu.shape, like=mu)``, differentiable in mu and sigma).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .eager import LEAF_OP, is_eager
from .ops import coerce
from .ops.random import MAX_KEY, random_bernoulli, random_normal, random_uniform
from .tensor import ShapeError, Tensor, TensorLike, format_shape, parameter, user_frame

__all__ = ["key", "default_key", "seed", "normal", "uniform", "bernoulli", "dropout"]

Shape = int | Sequence[int | None]


def _seed(s, who) -> float:
    if isinstance(s, bool) or not isinstance(s, numbers.Integral) or not 0 <= s < MAX_KEY:
        raise ValueError(f"{who}: a seed is an integer in [0, 2**53), got {s!r} (at {user_frame()})")
    return float(s)


def key(seed: int, name: str | None = None) -> Tensor:
    """A new random key at the start of ``seed``'s stream: a parameter [seed, 0] that is not trained."""
    return parameter([_seed(seed, "random.key"), 0.0], name=name or f"random.key{seed}", dtype=np.float64,
                     requires_grad=False)


_DEFAULT = key(0, name="random.default_key")
_DEFAULT.source = "staticgrad.random"        # (made at import: no user's line)


def default_key() -> Tensor:
    """The key draws use when given none (one per process, starting at seed 0; ``seed`` resets it)."""
    return _DEFAULT


def seed(s: int) -> None:
    """Reset the default key to the start of seed ``s``'s stream."""
    _DEFAULT.value = [_seed(s, "random.seed"), 0.0]


def _key(k, who):
    if k is None:
        return _DEFAULT
    if isinstance(k, Tensor) and (k.op in ("parameter", "placeholder") or (is_eager(k) and k.op == LEAF_OP)):
        return k
    raise TypeError(f"{who}: key must be a key (sg.random.key(seed)), an eager copy of one, or a placeholder fed "
                    f"one per call, got {k!r} (at {user_frame()})")


def _shape_and_like(shape, like, who):
    """(shape, like) for the op: a static shape without like, or like with ``shape`` checked against it."""
    if like is None:
        return shape, None
    (like,) = coerce(like)
    dims = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    if len(dims) != like.ndim or any(d is not None and n is not None and d != n for d, n in zip(dims, like.shape)):
        raise ShapeError(f"{who}: shape {format_shape(dims)} does not match like's shape "
                         f"{format_shape(like.shape)} (at {user_frame()})")
    return None, like


def _number(value, what, who) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{who}: {what} must be a number, got {value!r}; for a tensor, write the arithmetic "
                        f"on a standard draw (at {user_frame()})")
    if not math.isfinite(value):
        raise ValueError(f"{who}: {what} must be finite, got {value!r} (at {user_frame()})")
    return float(value)


def _probability(p, who) -> float:
    p = _number(p, "p", who)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{who}: p must be between 0 and 1, got {p} (at {user_frame()})")
    return p


def normal(shape: Shape, key: Tensor | None = None, mean: float = 0.0, std: float = 1.0,
           dtype: npt.DTypeLike = "float64", like: TensorLike | None = None) -> Tensor:
    """Normal values, ``mean + std * z`` for standard normal z (as numpy's Generator.normal), float32 or
    float64, of ``shape`` (or ``like``'s run-time shape), from ``key`` (None: the default key)."""
    mean, std = _number(mean, "mean", "normal"), _number(std, "std", "normal")
    if std < 0:
        raise ValueError(f"normal: std must be >= 0, got {std} (at {user_frame()})")
    z = random_normal(_key(key, "normal"), *_shape_and_like(shape, like, "normal"), dtype=dtype)
    z = z * std if std != 1.0 else z
    return z + mean if mean != 0.0 else z


def uniform(shape: Shape, key: Tensor | None = None, low: float = 0.0, high: float = 1.0,
            dtype: npt.DTypeLike = "float64", like: TensorLike | None = None) -> Tensor:
    """Uniform values in [low, high), ``low + (high - low) * u`` for u uniform in [0, 1) (as numpy's
    Generator.uniform), float32 or float64, of ``shape`` (or ``like``'s run-time shape), from ``key``."""
    low, high = _number(low, "low", "uniform"), _number(high, "high", "uniform")
    u = random_uniform(_key(key, "uniform"), *_shape_and_like(shape, like, "uniform"), dtype=dtype)
    u = u * (high - low) if high - low != 1.0 else u
    return u + low if low != 0.0 else u


def bernoulli(shape: Shape, key: Tensor | None = None, p: float = 0.5, dtype: npt.DTypeLike = "float64",
              like: TensorLike | None = None) -> Tensor:
    """1 with probability ``p`` (a number in [0, 1], resolved to 2**-32), else 0, as ``dtype`` (a float, or
    bool), of ``shape`` (or ``like``'s run-time shape), from ``key`` (None: the default key). The key comes
    second, as for normal and uniform: ``bernoulli(shape, key, p=0.25)``."""
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        raise TypeError(f"bernoulli: the second argument is the key; give the probability as p={key!r} "
                        f"(at {user_frame()})")
    p = _probability(p, "bernoulli")
    return random_bernoulli(_key(key, "bernoulli"), *_shape_and_like(shape, like, "bernoulli"), p=p, dtype=dtype)


def dropout(x: TensorLike, p: float, training: bool = True, key: Tensor | None = None) -> Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the others by 1 / (1 - p), as
    torch.nn.functional.dropout: the mean is kept. ``training=False`` or ``p == 0``: ``x`` itself;
    ``p == 1``: zeros (``x * 0``). The mask (bool, one byte an element) is drawn from ``key`` (None: the
    default key) at x's run-time shape and kept for the backward pass, whose gradient is
    ``g * mask / (1 - p)``."""
    p = _probability(p, "dropout")
    if not isinstance(training, (bool, np.bool_)):
        raise TypeError(f"dropout: training must be True or False, got {training!r} (at {user_frame()})")
    (x,) = coerce(x)
    if x.dtype.kind != "f":
        raise TypeError(f"dropout: x must be a floating tensor, got {x.dtype} (at {user_frame()})")
    if p == 0.0 or not training:
        return x
    if p == 1.0:
        return x * 0.0
    keep = random_bernoulli(_key(key, "dropout"), like=x, p=1.0 - p, dtype=np.bool_)
    return x * keep * (1.0 / (1.0 - p))
