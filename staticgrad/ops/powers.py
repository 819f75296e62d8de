"""pow: numpy.power, whose loop takes shortcuts that every backend must take the same way.

numpy's power loop, when it reads one exponent for all elements (a scalar, or a size-1 operand it steps
over with a step of 0), computes x**0.5 as sqrt(x), x**2 as x*x and x**-1 as 1/x; these round differently
from IEEE pow on some inputs (and sqrt(-0.0) is -0.0, sqrt(-inf) nan, where pow gives 0.0 and inf).
Reading one exponent per element it computes pow. So which of the two a node gets depends on how numpy
walks its operands (:func:`one_exponent`), and the kernel, the scalar path and the numba loops all follow it.
"""
from __future__ import annotations

import math

import numpy as np

from .elementary import log
from .elementwise import binary, elementwise, equal, where
from .registry import BROADCAST, INPLACE, OUT, is_a


def _pow_vjp(g, out, x, y):
    gx = g * y * power(x, y - 1)
    if not (y.op == "constant" and np.all(y.value != 0)):
        # x**0 is constant, but y * x**(y-1) is 0 * inf = nan at x = 0: mask it, as torch does.
        gx = where(equal(y, 0), 0, gx)
    # x**y log x tends to 0 as x -> 0 (y > 0): taking log 1 there avoids 0 * -inf = nan, as torch does.
    safe_log = log(where(equal(x, 0), 1, x))
    return gx, g * out * safe_log


def power_kernel(x, y, out=None):
    # A broadcast exponent is a value of its shape, read per element like the fresh array a pass may fold
    # it from or into, so results follow shapes, not memory layout (one_exponent says which loop runs).
    if type(y) is np.ndarray and y.size > 1 and 0 in y.strides:
        y = np.ascontiguousarray(y)
    return np.power(x, y, out=out)


def one_exponent(nodes, shapes, node):
    """Whether numpy's power loop reads one exponent for every element of ``node`` (a pow), as it does
    for a scalar exponent: its step is then 0, and numpy takes its shortcuts. False when it reads one
    exponent per element (pow); None when that depends on how numpy orders its loops (an exponent
    broadcast along some axes only, e.g. (3, 1) against (3, 4): numpy 2.4 gives pow there but sqrt for
    (2, 1, 1) against (3, 4)).
    """
    base, exp = node.inputs
    out, a, b = tuple(shapes[node.id]), tuple(shapes[base]), tuple(shapes[exp])
    if math.prod(out) == 1:
        # One element: the exponent steps by its size only in numpy's loop for operands of the output's
        # shape (or a 0-d base); otherwise size-1 axes step by 0.
        return not (out and b == out and (a == out or not a))
    if math.prod(b) == 1:
        return True
    if is_a(nodes[exp], BROADCAST):
        return False            # power_kernel reads a broadcast view per element
    padded = (1,) * (len(out) - len(b)) + b
    if any(n == 1 and m > 1 for n, m in zip(padded, out)):
        return None
    return False


def _pow_template(node, shapes, nodes):
    """scalar_math.power (numpy's shortcuts) for one exponent, IEEE pow for one per element."""
    one = one_exponent(nodes, shapes, node)
    if one is None:
        return None
    return "power({0}, {1})" if one else "({0} ** {1})"


_SHORTCUTS = {0.5: "sqrt({0})", 2.0: "({0} * {0})", -1.0: "(1.0 / {0})"}


def _pow_scalar(em, node, ins, shape):
    """Python arithmetic for numpy's shortcuts on a literal exponent; numpy's own power, one call for the
    node's elements, for any other (math.pow may round differently from numpy's SIMD pow)."""
    one = one_exponent(em.nodes, em.shapes, node)
    numbers = [em.number(e) for e in np.asarray(ins[1]).reshape(-1)]
    plain = all(v is not None and v not in _SHORTCUTS for v in numbers)
    if one is None and not plain:
        em.refuse("an exponent broadcast along some axes only: numpy's loop order decides")
    bases = ", ".join(em.flat(ins[0], shape))
    n = math.prod(shape)
    if not one:         # (an exponent without shortcuts gives pow's bits however numpy's loop reads it)
        exponents = ", ".join(em.flat(ins[1], shape))
        return em.shaped(em.assign_many(f"power_pairs(({bases},), ({exponents},))", n), shape)
    if numbers[0] in _SHORTCUTS:
        return em.elementwise(_SHORTCUTS[numbers[0]], ins[:1], shape)
    exponent = np.asarray(ins[1]).reshape(-1)[0]
    # a fed exponent: numpy's power, given one number, takes its shortcuts itself
    return em.shaped(em.assign_many(f"power_each(({bases},), {exponent})", n), shape)


pow = binary(elementwise("pow", power_kernel, _pow_vjp, OUT | INPLACE, scalar=_pow_template, scalar_rule=_pow_scalar,
                         flops=8, torch=lambda T: T.pow))
power = pow
