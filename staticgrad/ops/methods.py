"""Operator overloading and methods, attached to Tensor here so tensor.py needs no op imports."""
from __future__ import annotations

from ..tensor import Tensor
from . import elementwise as ew
from . import linalg, reduce, shape


def _swap(fn):
    return lambda self, other: fn(other, self)


METHODS = {
    "__add__": ew.add, "__radd__": _swap(ew.add),
    "__sub__": ew.sub, "__rsub__": _swap(ew.sub),
    "__mul__": ew.mul, "__rmul__": _swap(ew.mul),
    "__truediv__": ew.div, "__rtruediv__": _swap(ew.div),
    "__pow__": ew.pow, "__rpow__": _swap(ew.pow),
    "__matmul__": linalg.matmul, "__rmatmul__": _swap(linalg.matmul),
    "__neg__": ew.neg, "__pos__": lambda self: self, "__abs__": ew.abs,
    "__lt__": ew.less, "__le__": ew.less_equal, "__gt__": ew.greater, "__ge__": ew.greater_equal,
    "__eq__": lambda self, other: _compare(ew.equal, self, other),
    "__ne__": lambda self, other: _compare(ew.not_equal, self, other),
    "__getitem__": shape.getitem,
    "sum": reduce.sum, "mean": reduce.mean, "max": reduce.max, "min": reduce.min,
    "reshape": shape.reshape, "astype": ew.cast,
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
