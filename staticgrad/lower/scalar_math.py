"""The vocabulary of per-element templates (``OpDef.scalar``): numpy's semantics for one number at a time.

A template is a Python expression over its operands' elements ``{0}``, ``{1}``, ``{2}``. It may call the
helpers below, numpy's ufuncs by name (``exp``, ``arctan2``, ...) and Python's ``abs`` and ``float``.
The scalar path runs the helpers as Python code and calls numpy's ufunc for all of a node's elements at
once (numpy's own bits: on AVX512 its SIMD exp, log, pow and tanh differ from libm's in the last bit); the
numba backend compiles the helpers, and numba's versions of the ufuncs (libm's).
"""
import math

import numpy as np


def maximum(a, b):
    # A nan on either side wins, and of two equal values b is returned (-0.0 and 0.0), as in numpy.maximum.
    return a if (a > b or a != a) else b


def minimum(a, b):
    return a if (a < b or a != a) else b


def power(a, b):
    # numpy's power loop, reading one exponent for all elements (ops.powers.one_exponent), takes shortcuts
    # that round differently from pow on some inputs: a square root for 0.5 (also sqrt(-inf) is nan and
    # sqrt(-0.0) -0.0, where pow gives inf and 0.0), a*a for 2 and 1/a for -1 (checked bit for bit on
    # 2e5 numbers of every magnitude; its other exponents give pow's results). math.pow and math.sqrt:
    # Python's ** would make a complex number of a negative base; these raise instead, and compiled by numba
    # give the hardware's NaN, as numpy does (its sign included).
    if b == 2.0:
        return a * a
    if b == -1.0:
        return 1.0 / a
    if b == 0.5:
        return math.sqrt(a)
    return math.pow(a, b)


def sign(a):
    if a > 0:
        return 1.0
    if a < 0:
        return -1.0
    # numpy.sign gives +0.0 for -0.0 (its kernel compares with 0, it does not copy the zero); nan stays
    return 0.0 if a == 0 else a


# Helpers a template may call. sqrt is IEEE's correctly rounded square root everywhere: no numpy call needed.
FUNCTIONS = {"maximum": maximum, "minimum": minimum, "sign": sign, "power": power, "sqrt": math.sqrt}
BUILTINS = frozenset({"abs", "float", "int", "bool", "max"})


def is_ufunc(name) -> bool:
    """Whether a template's call of ``name`` means numpy's ufunc of that name."""
    return name not in FUNCTIONS and name not in BUILTINS and isinstance(getattr(np, name, None), np.ufunc)


def power_each(bases, exponent):
    """numpy's power of many bases with one exponent: its loop reads the exponent with a step of 0 and takes
    its shortcuts, as for the node it stands for (the scalar path's pow)."""
    return np.power(bases, exponent).tolist()


def power_pairs(bases, exponents):
    """numpy's power with one exponent per base (IEEE pow for each)."""
    return np.power(bases, exponents).tolist()
