"""Operator overloading and methods, attached to Tensor here so tensor.py needs no op imports."""
from __future__ import annotations

from ..tensor import Tensor
from . import elementary, elementwise, index, linalg, powers, reduce, shape


def _swap(fn):
    return lambda self, other: fn(other, self)


METHODS = {
    "__add__": elementwise.add, "__radd__": _swap(elementwise.add),
    "__sub__": elementwise.sub, "__rsub__": _swap(elementwise.sub),
    "__mul__": elementwise.mul, "__rmul__": _swap(elementwise.mul),
    "__truediv__": elementwise.div, "__rtruediv__": _swap(elementwise.div),
    "__pow__": powers.pow, "__rpow__": _swap(powers.pow),
    "__matmul__": linalg.matmul, "__rmatmul__": _swap(linalg.matmul),
    "__neg__": elementwise.neg, "__pos__": lambda self: self, "__abs__": elementary.abs,
    "__lt__": elementwise.less, "__le__": elementwise.less_equal, "__gt__": elementwise.greater,
    "__ge__": elementwise.greater_equal,
    "__eq__": lambda self, other: _compare(elementwise.equal, self, other),
    "__ne__": lambda self, other: _compare(elementwise.not_equal, self, other),
    "__getitem__": index.getitem,
    "sum": reduce.sum, "mean": reduce.mean, "max": reduce.max, "min": reduce.min,
    "reshape": shape.reshape, "astype": elementwise.cast,
}


def _compare(fn, self, other):
    # Elementwise like numpy and PyTorch (a Python bool here made sg.where(x == 0, ...) silently wrong).
    # Tensors still hash by identity: use ``is``, not ``==``, to find one in a list. ``x == None`` stays
    # False (and so is ``x == "x"``, which a dict holding tensors and names may ask), so ``None in (a, b)``
    # works as before.
    if other is None or isinstance(other, (str, bytes)):
        return NotImplemented
    return fn(self, other)


def _transpose_method(self, *axes):
    if len(axes) == 1 and not isinstance(axes[0], int):
        axes = axes[0]
    return shape.transpose(self, axes or None)


def attach(cls=Tensor):
    for name, fn in METHODS.items():
        setattr(cls, name, fn)
    cls.transpose = _transpose_method
    cls.T = property(lambda self: shape.transpose(self))
