"""sin, cos and tanh as branch-free polynomials, so that a compiled loop over many elements vectorizes.

libm's sin, cos and tanh are scalar calls: in a compiled loop each costs 7-15 ns per element, more than
all the arithmetic of an elementwise chain. These forms cost about one nanosecond in SIMD registers. sin
and cos are within 1 ulp of libm's (its bits on about 97% of inputs), tanh within 3 of numpy's, only on
inputs within ``SIN_COS_LIMIT`` (sin, cos) or finite ones (tanh); the numba interpreter checks a block's
inputs and calls libm for blocks with others.

sin and cos: ``x = k*pi/2 + r + rr`` with ``|r| <= pi/4`` (Cody and Waite's reduction: pi/2 in three parts,
the first two short enough that ``k * part`` is exact, and ``rr`` the rounding error carried), then Taylor
polynomials of sin and cos on ``r`` corrected by ``rr``, the one the quadrant ``k mod 4`` asks for, with its
sign. tanh: ``e/(e + 2)`` with ``e = expm1(2|x|)``, which
loses nothing to cancellation near 0, and ``expm1(y) = 2**k * expm1(r) + (2**k - 1)`` with
``y = k*log(2) + r``.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# pi to 60 digits, from which the splits below are rounded (exactly, with Fractions).
_PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494")
_LN2 = Fraction("0.693147180559945309417232121458176568075500134360255254120680")


def _round_to_bits(value: Fraction, bits: int) -> float:
    """``value`` rounded to a float with ``bits`` significant bits (the rest zero)."""
    exponent = math.frexp(float(value))[1]
    scale = Fraction(2) ** (bits - exponent)
    return float(Fraction(round(value * scale)) / scale)


def _split(value: Fraction, bits: tuple):
    parts, rest = [], value
    for b in bits:
        parts.append(_round_to_bits(rest, b))
        rest -= Fraction(parts[-1])
    return parts


# k * PIO2_1 and k * PIO2_2 are exact for |k| < 2**20: 33 bits each, 53 for the last part.
PIO2_1, PIO2_2, PIO2_3 = _split(_PI / 2, (33, 33, 53))
TWO_OVER_PI = float(2 / _PI)
SIN_COS_LIMIT = 1.0e5          # |x| beyond this: k would need more bits than the split gives it room for
# k * LN2_HI is exact for |k| < 2**21 (32 bits).
LN2_HI, LN2_LO = _split(_LN2, (32, 53))
INV_LN2 = float(1 / _LN2)
TANH_ONE = 22.0                # tanh(x) rounds to 1.0 beyond this

# Taylor coefficients, highest degree first: on |r| <= pi/4 the first term left out is below 1e-19 of
# the result; on |r| <= log(2)/2, for expm1, below 1e-18.
_SIN = tuple(float(Fraction((-1) ** (n // 2), math.factorial(n))) for n in range(17, 2, -2))   # r^17 .. r^3
_COS = tuple(float(Fraction((-1) ** (n // 2), math.factorial(n))) for n in range(18, 3, -2))   # r^18 .. r^4
_EXPM1 = tuple(float(Fraction(1, math.factorial(n))) for n in range(14, 1, -1))                  # r^14 .. r^2
POW2 = np.array([2.0 ** k for k in range(64)])     # numba reads a global array as a constant


# Each kernel is self-contained (numba compiles it as it is, calling nothing but math). No min() or
# int(): newer numbas compile those as functions of their own on first use (0.025 s each, cold);
# math.floor gives an int in Python and in numba alike.

def sin_cos_kernel(x, want_cos):
    """sin(x) (``want_cos`` False) or cos(x) for |x| <= SIN_COS_LIMIT, in straight-line arithmetic."""
    k = math.floor(x * TWO_OVER_PI + 0.5)
    # r + rr = x - k*pi/2 to about 2**-100 relative: x - k*PIO2_1 is exact (k*PIO2_1 is within a factor
    # of 2 of x), the rounding error of the next subtraction is kept (two-sum), the last part is tiny.
    t1 = x - k * PIO2_1
    p2 = k * PIO2_2
    t2 = t1 - p2
    back = t2 - t1
    e2 = (t1 - (t2 - back)) - (p2 + back)
    p3 = k * PIO2_3
    r = t2 - p3
    rr = ((t2 - r) - p3) + e2
    z = r * r
    a = _SIN
    corr = r * z * (((((((a[0] * z + a[1]) * z + a[2]) * z + a[3]) * z + a[4]) * z + a[5]) * z + a[6]) * z + a[7])
    s = r + (corr + rr * (1.0 - 0.5 * z))          # sin(r + rr), one rounding at the end
    b = _COS
    q = z * z * (((((((b[0] * z + b[1]) * z + b[2]) * z + b[3]) * z + b[4]) * z + b[5]) * z + b[6]) * z + b[7])
    half = 0.5 * z
    head = 1.0 - half
    c = head + (((1.0 - head) - half) + (q - r * rr))   # cos(r + rr): 1 - z/2 rounds once, its error kept
    n = k + (1 if want_cos else 0)           # cos(x) = sin(x + pi/2): one quadrant on
    v = c if n & 1 else s
    v = -v if n & 2 else v
    return x if x == 0.0 and not want_cos else v      # sin(-0.0) is -0.0; the sum above gives +0.0


def tanh_kernel(x):
    """tanh(x) for finite x, in straight-line arithmetic."""
    y = abs(x)
    y = 2.0 * (y if y < TANH_ONE else TANH_ONE)
    k = math.floor(y * INV_LN2 + 0.5)
    r = (y - k * LN2_HI) - k * LN2_LO
    a = _EXPM1
    p = ((((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * r + a[6]) * r + a[7]
    p = r + r * r * (((((p * r + a[8]) * r + a[9]) * r + a[10]) * r + a[11]) * r + a[12])
    scale = POW2[k]
    e = scale * p + (scale - 1.0)            # expm1(y) = 2**k * (expm1(r) + 1) - 1
    return math.copysign(e / (e + 2.0), x)


def fmuladd(a, b, c):
    """``a * b + c``. Compiled by the numba backend it is LLVM's fmuladd: one fused multiply-add (one
    rounding) where the CPU has the instruction, a multiply and an add elsewhere (``numba_fma``)."""
    return a * b + c


def tanh_fma_kernel(x):
    """tanh_kernel with its polynomial in fused multiply-adds: a fifth faster in a compiled loop, within
    3 ulp of numpy's as well (its bits may differ from tanh_kernel's in the last place)."""
    y = abs(x)
    y = 2.0 * (y if y < TANH_ONE else TANH_ONE)
    k = math.floor(y * INV_LN2 + 0.5)
    r = (y - k * LN2_HI) - k * LN2_LO
    a = _EXPM1
    p = fmuladd(fmuladd(fmuladd(fmuladd(a[0], r, a[1]), r, a[2]), r, a[3]), r, a[4])
    p = fmuladd(fmuladd(fmuladd(fmuladd(p, r, a[5]), r, a[6]), r, a[7]), r, a[8])
    p = fmuladd(fmuladd(fmuladd(fmuladd(p, r, a[9]), r, a[10]), r, a[11]), r, a[12])
    p = r + r * r * p
    scale = POW2[k]
    e = scale * p + (scale - 1.0)            # expm1(y) = 2**k * (expm1(r) + 1) - 1
    return math.copysign(e / (e + 2.0), x)
