"""Numerically stable forms of expressions that overflow or cancel when computed as written.

Used twice: the ``stabilize`` pass rewrites the compiled forward graph, and ``sg.grad`` differentiates the
stable form, so that values AND gradients stay finite wherever the math is finite (log(sigmoid(x)) at
x = -1000 is -1000 with gradient 1). Each rule also fires through reshape/transpose between its ops, and
sees ``x * -1`` as ``-x`` and ``1 + -s`` as ``1 - s``.
"""
from __future__ import annotations

from .rewrite import is_scalar_const, peel_layout, same_type, scalar_value, when_an_input, wrap_layout


def _negated(rw, n):
    """``x`` if ``n`` computes -x (neg, or mul by the constant -1), else None."""
    if n.op == "neg":
        return rw.inputs(n)[0]
    if n.op == "mul":
        a, b = rw.inputs(n)
        if scalar_value(rw, b) == -1 and same_type(a, n):
            return a
        if scalar_value(rw, a) == -1 and same_type(b, n):
            return b
    return None


def _one_minus(rw, n):
    """(s, layers) if ``n`` computes 1 - L(s) for layout ops L (sub, or 1 + -L(s), 1 + L(-s)), else None."""
    if n.op == "sub":
        a, b = rw.inputs(n)
        if is_scalar_const(rw, a, 1) and same_type(b, n):
            return peel_layout(rw, b)
        return None
    if n.op == "add":
        a, b = rw.inputs(n)
        for one, other in ((a, b), (b, a)):
            if is_scalar_const(rw, one, 1) and same_type(other, n):
                inner, outer = peel_layout(rw, other)
                s = _negated(rw, inner)
                if s is not None:
                    s, more = peel_layout(rw, s)
                    return s, outer + more
    return None


def _plus_one(rw, n):
    """``x`` if ``n`` computes 1 + x or x + 1 (x keeps the shape of n), else None."""
    if n.op != "add":
        return None
    a, b = rw.inputs(n)
    if is_scalar_const(rw, b, 1) and same_type(a, n):
        return a
    if is_scalar_const(rw, a, 1) and same_type(b, n):
        return b
    return None


def _floating(x) -> bool:
    # The stable forms negate x (an unsigned or INT_MIN x wraps), their kernels start reductions at -inf
    # (an integer array cannot hold it), and over integers they pick a result dtype of their own
    # (log(sum(exp(bool))) is float16, logsumexp of bool float64). expm1 and log1p need no such guard:
    # numpy gives them exp's and log's dtypes, and they negate nothing.
    return x.dtype.kind == "f"


def log_of_sigmoid(rw, node):
    """log(sigmoid(x)) -> -softplus(-x); log(1 - sigmoid(x)) -> -softplus(x)."""
    arg, outer = peel_layout(rw, rw.inputs(node)[0])
    if arg.op == "sigmoid" and _floating(rw.inputs(arg)[0]):
        x = rw.inputs(arg)[0]
        out = rw.make("neg", [rw.make("softplus", [rw.make("neg", [x])])])
        return wrap_layout(rw, out, outer)
    found = _one_minus(rw, arg)
    if found is not None:
        s, mid = found
        if s.op == "sigmoid" and _floating(rw.inputs(s)[0]):
            x = rw.inputs(s)[0]
            out = rw.make("neg", [rw.make("softplus", [x])])
            return wrap_layout(rw, wrap_layout(rw, out, mid), outer)
    return None


def log_of_softmax(rw, node):
    """log(softmax(x)) -> log_softmax(x)."""
    arg, outer = peel_layout(rw, rw.inputs(node)[0])
    if arg.op == "softmax" and _floating(rw.inputs(arg)[0]):
        return wrap_layout(rw, rw.make("log_softmax", rw.inputs(arg), arg.attrs), outer)
    return None


def log_of_sum_exp(rw, node):
    """log(sum(exp(x))) -> logsumexp(x), also with reshapes or transposes between the ops."""
    arg, outer = peel_layout(rw, rw.inputs(node)[0])
    if arg.op != "sum":
        return None
    inner, layers = peel_layout(rw, rw.inputs(arg)[0])
    if inner.op != "exp" or not _floating(rw.inputs(inner)[0]):
        return None
    # exp commutes with layout ops: sum(L(exp(x))) is sum(exp(L(x))), so the layouts move inside.
    x = wrap_layout(rw, rw.inputs(inner)[0], layers)
    attrs = {"axis": arg.attrs["axis"], "keepdims": arg.attrs["keepdims"]}
    return wrap_layout(rw, rw.make("logsumexp", [x], attrs), outer)


def log_of_one_plus(rw, node):
    """log(1 + x) -> log1p(x)."""
    arg, outer = peel_layout(rw, rw.inputs(node)[0])
    x = _plus_one(rw, arg)
    if x is None or x.dtype.kind not in "fc":
        return None
    return wrap_layout(rw, rw.make("log1p", [x]), outer)


@when_an_input(lambda x: x.op == "constant")     # (the 1 or -1)
def exp_minus_one(rw, node):
    """exp(x) - 1 -> expm1(x) (also exp(x) + -1)."""
    a, b = rw.inputs(node)
    if node.op == "sub" and not is_scalar_const(rw, b, 1):
        return None
    if node.op == "add":
        if is_scalar_const(rw, b, -1):
            pass
        elif is_scalar_const(rw, a, -1):
            a, b = b, a
        else:
            return None
    inner, layers = peel_layout(rw, a)
    if inner.op != "exp" or not same_type(a, node):
        return None
    return wrap_layout(rw, rw.make("expm1", rw.inputs(inner)), layers)


RULES = {
    "log": [log_of_sigmoid, log_of_softmax, log_of_sum_exp, log_of_one_plus],
    "sub": [exp_minus_one],
    "add": [exp_minus_one],
}

# Every pattern above contains one of these ops: a graph without them has nothing to rewrite.
TRIGGERS = frozenset({"log", "exp"})
