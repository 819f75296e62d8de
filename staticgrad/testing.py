"""Check gradients against central finite differences (public, so users can check their own ops)."""
from __future__ import annotations

import numpy as np

from .autodiff import grad
from .compiler import compile
from .ops import sum as sg_sum
from .tensor import constant, placeholder


def numerical_grad(fn, args, k, eps):
    """Central differences of the scalar ``fn(*args)`` with respect to ``args[k]``."""
    x = np.array(args[k], dtype=np.float64, copy=True)
    out = np.zeros_like(x)
    flat, gflat = x.reshape(-1), out.reshape(-1)
    for j in range(flat.size):
        saved = flat[j]
        flat[j] = saved + eps
        plus = float(fn(*args[:k], x, *args[k + 1:]))
        flat[j] = saved - eps
        minus = float(fn(*args[:k], x, *args[k + 1:]))
        flat[j] = saved
        gflat[j] = (plus - minus) / (2 * eps)
    return out


def _scalarize(y, rng):
    """A scalar from ``y``: itself, or its dot product with a fixed random tensor of its shape."""
    if y.shape == ():
        return y
    weights = rng.uniform(0.5, 1.5, size=y.shape)
    return sg_sum(y * constant(weights.astype(y.dtype)))


def check_grads(f, inputs, order=1, eps=1e-6, rtol=1e-5, atol=1e-6, seed=0, optimize=(True, False)):
    """Assert that staticgrad's gradients of ``f`` match central finite differences, up to ``order``.

    ``f`` takes one tensor per array in ``inputs`` and returns a tensor (a non-scalar result is reduced by
    a fixed random projection). Floating inputs are differentiated; integer inputs are fed as data.
    Order 2 checks the derivative of (gradient . random direction), and so on. Every order is checked
    with each ``optimize`` setting, and the settings must agree. Returns True or raises AssertionError.
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
    for level in range(1, order + 1):
        grads = grad(y, wrt)
        for opt in optimize:
            value_fn = compile(y, inputs=phs, optimize=opt)
            grad_fn = compile(grads, inputs=phs, optimize=opt)
            analytic = grad_fn(*inputs)
            positions = [k for k, d in enumerate(diff) if d]
            for g, k in zip(analytic, positions):
                numeric = numerical_grad(value_fn, inputs, k, eps)
                if not np.allclose(g, numeric, rtol=rtol, atol=atol, equal_nan=False):
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
