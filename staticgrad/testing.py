"""Check gradients against central finite differences (public, so users can check their own ops)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from .autodiff import grad
from .compiler import compile
from .ops import sum as sg_sum
from .tensor import Tensor, constant, placeholder


def numerical_grad(fn, args, k, eps):
    """Central differences of the scalar ``fn(*args)`` with respect to ``args[k]``."""
    return _central_differences(fn, args, k, eps)[0]


def _central_differences(fn, args, k, eps):
    """(gradient, noise): central differences, and how far rounding ``fn``'s values can move each one.

    Each difference is divided by the step actually taken once ``x +- eps`` is rounded to the input's
    dtype (in float32 that rounding is a sizeable part of a small step). A value computed in that dtype
    is only known to about machine eps times its size, so a difference is only known to that over the step.
    """
    x = np.array(args[k], copy=True)
    if x.dtype.kind not in "f":
        x = x.astype(np.float64)        # integers differentiate as the numbers they hold
    rounding = np.finfo(x.dtype).eps
    grad, noise = np.zeros(x.shape), np.zeros(x.shape)
    flat, gflat, nflat = x.reshape(-1), grad.reshape(-1), noise.reshape(-1)
    for j in range(flat.size):
        saved = flat[j]
        flat[j] = saved + eps
        up, plus = float(flat[j]), float(fn(*args[:k], x, *args[k + 1:]))
        flat[j] = saved - eps
        down, minus = float(flat[j]), float(fn(*args[:k], x, *args[k + 1:]))
        flat[j] = saved
        if up == down:
            raise ValueError(f"numerical_grad: a step of {eps:g} is below {x.dtype}'s resolution at "
                             f"{float(saved):g} (x + eps rounds back to x); take a larger eps")
        gflat[j] = (plus - minus) / (up - down)
        nflat[j] = rounding * (abs(plus) + abs(minus)) / (up - down)
    return grad, noise


def default_tolerances(dtype):
    """(eps, rtol, atol) for central differences of a function computed in ``dtype``.

    float64 keeps the historical (1e-6, 1e-5, 1e-6). A less precise dtype steps by cbrt(machine eps),
    which balances the truncation error (~step**2) against rounding (~machine eps / step), and allows
    about twice that as relative and absolute error: float32 gives a step of 4.9e-3 and tolerances of 1e-2.
    """
    info = np.finfo(dtype)
    if info.eps <= np.finfo(np.float64).eps:
        return 1e-6, 1e-5, 1e-6
    step = float(np.cbrt(info.eps))
    return step, 2 * step, 2 * step


def _scalarize(y, rng):
    """A scalar from ``y``: itself, or its dot product with a fixed random tensor of its shape."""
    if y.shape == ():
        return y
    weights = rng.uniform(0.5, 1.5, size=y.shape)
    return sg_sum(y * constant(weights.astype(y.dtype)))


def check_grads(f: Callable[..., Tensor], inputs: Sequence[npt.ArrayLike], order: int = 1, eps: float | None = None,
                rtol: float | None = None, atol: float | None = None, seed: int = 0,
                optimize: Sequence[bool] = (True, False)) -> bool:
    """Assert that staticgrad's gradients of ``f`` match central finite differences, up to ``order``.

    ``f`` takes one tensor per array in ``inputs`` and returns a tensor (a non-scalar result is reduced by
    a fixed random projection). Floating inputs are differentiated; integer inputs are fed as data.
    Order 2 checks the derivative of (gradient . random direction), and so on. Every order is checked
    with each ``optimize`` setting, and the settings must agree. Returns True or raises AssertionError.
    ``eps`` (the step), ``rtol`` and ``atol`` default to what the least precise floating input allows
    (see :func:`default_tolerances`): 1e-6, 1e-5, 1e-6 for float64; 4.9e-3, 1e-2, 1e-2 for float32.
    """
    inputs = [np.asarray(a) for a in inputs]
    diff = [a.dtype.kind == "f" for a in inputs]
    phs = [placeholder(a.shape, dtype=a.dtype, name=f"arg{k}", requires_grad=d)
           for k, (a, d) in enumerate(zip(inputs, diff))]
    rng = np.random.default_rng(seed)
    y = _scalarize(f(*phs), rng)
    wrt = [p for p, d in zip(phs, diff) if d]
    if not wrt:
        raise ValueError("check_grads: no floating input to differentiate")
    coarsest = max((p.dtype for p in wrt), key=lambda d: np.finfo(d).eps)
    defaults = default_tolerances(coarsest)
    eps, rtol, atol = (d if v is None else v for v, d in zip((eps, rtol, atol), defaults))
    for level in range(1, order + 1):
        grads = grad(y, wrt)
        for opt in optimize:
            value_fn = compile(y, inputs=phs, optimize=opt)
            grad_fn = compile(grads, inputs=phs, optimize=opt)
            analytic = grad_fn(*inputs)
            positions = [k for k, d in enumerate(diff) if d]
            for g, k in zip(analytic, positions):
                numeric, noise = _central_differences(value_fn, inputs, k, eps)
                if not np.all(np.isclose(g, numeric, rtol=rtol, atol=atol + noise)):
                    err = np.max(np.abs(np.asarray(g) - numeric))
                    raise AssertionError(
                        f"order {level} gradient of input {k} (optimize={opt}) differs from finite differences "
                        f"by {err:.3g}\nanalytic:\n{np.asarray(g)}\nnumeric:\n{numeric}")
        if level < order:
            y = sg_sum(_dot_all(grads, rng))
    return True


def _dot_all(grads, rng):
    total = None
    for g in grads:
        term = _scalarize(g, rng) if g.shape != () else g
        total = term if total is None else total + term
    return total
