"""numpy's elementwise semantics for one Python float at a time (used by scalar code and fused loops)."""
import math


def sigmoid(x):
    e = math.exp(-abs(x))        # never overflows, as in the numpy kernel
    r = 1.0 / (1.0 + e)
    return r if x >= 0 else e * r


def softplus(x):
    return math.log1p(math.exp(-abs(x))) + (x if x > 0.0 else 0.0)


def maximum(a, b):
    # A nan on either side wins, and of two equal values b is returned (-0.0 and 0.0), as in numpy.maximum.
    return a if (a > b or a != a) else b


def minimum(a, b):
    return a if (a < b or a != a) else b


def power(a, b):
    # numpy's power loop, reading one exponent for all elements (fuse.one_exponent), takes shortcuts that
    # round differently from pow on some inputs: a square root for 0.5 (also sqrt(-inf) is nan and
    # sqrt(-0.0) -0.0, where pow gives inf and 0.0), a*a for 2 and 1/a for -1 (checked bit for bit on
    # 2e5 numbers of every magnitude; its other exponents give pow's results). math.pow and math.sqrt:
    # Python's ** would make a complex number of a negative base; these raise instead (numba: nan).
    if b == 2.0:
        return a * a
    if b == -1.0:
        return 1.0 / a
    if b == 0.5:
        return math.sqrt(a) if not a < 0.0 else math.nan
    return math.pow(a, b)


def sign(a):
    if a > 0:
        return 1.0
    if a < 0:
        return -1.0
    # numpy.sign gives +0.0 for -0.0 (its kernel compares with 0, it does not copy the zero); nan stays
    return 0.0 if a == 0 else a


FUNCTIONS = {"sigmoid": sigmoid, "softplus": softplus, "maximum": maximum, "minimum": minimum, "sign": sign,
             "power": power}
