"""Numerical stabilization: values AND gradients stay finite where the math is finite, also when the
pattern is split by a reshape or a transpose, or its neg is written as a multiplication by -1.

Reference values come from closed forms computed stably in numpy; the graph is checked by its op counts.
"""
from collections import Counter

import numpy as np
import pytest

import staticgrad as sg


def ops_of(fn) -> Counter:
    return Counter(op for _, op in fn.graph.nodes(data="op"))


def softplus(x):
    return np.logaddexp(0.0, x)


def sigmoid(x):
    return np.exp(-softplus(-x))


def log_softmax(x, axis):
    return x - np.logaddexp.reduce(x, axis=axis, keepdims=True)


# Layouts that split a pattern: (staticgrad layout, numpy layout, numpy inverse) on a (2, 3) array.
LAYOUTS = {
    "plain": (lambda t: t, lambda a: a, lambda a: a),
    "reshape": (lambda t: t.reshape((3, 2)), lambda a: a.reshape(3, 2), lambda a: a.reshape(2, 3)),
    "flatten": (lambda t: t.reshape((6,)), lambda a: a.reshape(6), lambda a: a.reshape(2, 3)),
    "transpose": (lambda t: t.T, lambda a: a.T, lambda a: a.T),
    "transpose+reshape": (lambda t: t.T.reshape((6,)), lambda a: a.T.reshape(6), lambda a: a.reshape(3, 2).T),
}

BIG = np.array([[-1000.0, -40.0, 0.0], [1e-3, 40.0, 1000.0]])
TINY = np.array([[1e-20, -1e-18, 3e-17], [1e-10, -0.25, 2.0]])

# name -> (build(x, L) with the layout L inserted inside the pattern, f, f', feed, the op it becomes)
ELEMENTWISE = {
    "log(L(sigmoid(x)))": (lambda x, L: sg.log(L(sg.sigmoid(x))),
                           lambda a: -softplus(-a), lambda a: sigmoid(-a), BIG, "softplus"),
    "log(1 - L(sigmoid(x)))": (lambda x, L: sg.log(1 - L(sg.sigmoid(x))),
                               lambda a: -softplus(a), lambda a: -sigmoid(a), BIG, "softplus"),
    "log(L(1 - sigmoid(x)))": (lambda x, L: sg.log(L(1 - sg.sigmoid(x))),
                               lambda a: -softplus(a), lambda a: -sigmoid(a), BIG, "softplus"),
    "log(1 + (-1)*L(sigmoid(x)))": (lambda x, L: sg.log(1 + (-1) * L(sg.sigmoid(x))),
                                    lambda a: -softplus(a), lambda a: -sigmoid(a), BIG, "softplus"),
    "log(1 + L(sigmoid(x))*(-1))": (lambda x, L: sg.log(1 + L(sg.sigmoid(x)) * (-1)),
                                    lambda a: -softplus(a), lambda a: -sigmoid(a), BIG, "softplus"),
    "log(1 + L((-1)*sigmoid(x)))": (lambda x, L: sg.log(1 + L((-1) * sg.sigmoid(x))),
                                    lambda a: -softplus(a), lambda a: -sigmoid(a), BIG, "softplus"),
    "log(-L(sigmoid(x)) + 1)": (lambda x, L: sg.log(-L(sg.sigmoid(x)) + 1),
                                lambda a: -softplus(a), lambda a: -sigmoid(a), BIG, "softplus"),
    "log(L(1 + x))": (lambda x, L: sg.log(L(1 + x)), np.log1p, lambda a: 1 / (1 + a), TINY, "log1p"),
    "log(L(x + 1))": (lambda x, L: sg.log(L(x + 1)), np.log1p, lambda a: 1 / (1 + a), TINY, "log1p"),
    "L(exp(x)) - 1": (lambda x, L: L(sg.exp(x)) - 1, np.expm1, np.exp, TINY, "expm1"),
    "L(exp(x)) + (-1)": (lambda x, L: L(sg.exp(x)) + (-1), np.expm1, np.exp, TINY, "expm1"),
    "-1 + L(exp(x))": (lambda x, L: -1 + L(sg.exp(x)), np.expm1, np.exp, TINY, "expm1"),
}
# The op that must be gone once the pattern is rewritten.
UNSTABLE = {"softplus": "log", "log1p": "log", "expm1": "exp"}


def compile_value_and_grad(y, x, weights, optimize=True):
    loss = sg.sum(y * sg.constant(weights))
    (g,) = sg.grad(loss, [x])
    return sg.compile([y, g], inputs=[x], optimize=optimize)


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
@pytest.mark.parametrize("case", ELEMENTWISE, ids=str)
def test_elementwise_pattern(case, layout, rng):
    build, f, df, feed, stable_op = ELEMENTWISE[case]
    L, np_L, np_inverse = LAYOUTS[layout]
    x = sg.placeholder((2, 3), name="x", requires_grad=True)
    y = build(x, L)
    weights = rng.uniform(0.5, 1.5, size=y.shape)
    want_y, want_g = np_L(f(feed)), df(feed) * np_inverse(weights)

    fn = compile_value_and_grad(y, x, weights)
    got_y, got_g = fn(feed)
    assert np.all(np.isfinite(got_y)) and np.all(np.isfinite(got_g))
    np.testing.assert_allclose(got_y, want_y, rtol=1e-12, atol=0)
    np.testing.assert_allclose(got_g, want_g, rtol=1e-12, atol=0)
    ops = ops_of(fn)
    assert ops[stable_op] >= 1, dict(ops)
    assert ops[UNSTABLE[stable_op]] == 0, dict(ops)

    # sg.grad differentiates the stable form, so even the unoptimized gradient is right
    with np.errstate(all="ignore"):      # the unoptimized forward overflows (it is the unstable form)
        _, slow_g = compile_value_and_grad(y, x, weights, optimize=False)(feed)
    np.testing.assert_allclose(slow_g, want_g, rtol=1e-12, atol=0)


def test_log_sigmoid_at_minus_1000_is_minus_1000_with_gradient_1():
    x = sg.placeholder((), name="x", requires_grad=True)
    y = sg.log(sg.sigmoid(x))
    (g,) = sg.grad(y, [x])
    value, grad = sg.compile([y, g], inputs=[x])(-1000.0)
    assert value == -1000.0 and grad == 1.0


def test_log_one_minus_sigmoid_at_1000_is_minus_1000_with_gradient_minus_1():
    x = sg.placeholder((), name="x", requires_grad=True)
    y = sg.log(1 - sg.sigmoid(x))
    (g,) = sg.grad(y, [x])
    value, grad = sg.compile([y, g], inputs=[x])(1000.0)
    assert value == -1000.0 and grad == -1.0


def test_log1p_and_expm1_are_exact_for_tiny_x():
    x = sg.placeholder((3,), name="x")
    fn = sg.compile([sg.log(1 + x), sg.exp(x) - 1], inputs=[x])
    feed = np.array([1e-20, -3e-300, 5e-324])
    got_log, got_exp = fn(feed)
    assert np.array_equal(got_log, np.log1p(feed))
    assert np.array_equal(got_exp, np.expm1(feed))
    assert np.all(got_log == feed)       # log(1 + x) as written would give 0


# ------------------------------------------------------------------ log(softmax(x))
SOFTMAX_CASES = {
    "log(softmax(x, -1))": (lambda x: sg.log(sg.softmax(x, axis=-1)), -1, LAYOUTS["plain"]),
    "log(softmax(x, 0))": (lambda x: sg.log(sg.softmax(x, axis=0)), 0, LAYOUTS["plain"]),
    "log(softmax(x).T)": (lambda x: sg.log(sg.softmax(x, axis=-1).T), -1, LAYOUTS["transpose"]),
    "log(softmax(x).reshape)": (lambda x: sg.log(sg.softmax(x, axis=1).reshape((3, 2))), 1, LAYOUTS["reshape"]),
    "log(softmax(x, 0).flatten)": (lambda x: sg.log(sg.softmax(x, axis=0).reshape((6,))), 0, LAYOUTS["flatten"]),
}


@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=str)
def test_log_softmax(case, rng):
    build, axis, (_, np_L, np_inverse) = SOFTMAX_CASES[case]
    x = sg.placeholder((2, 3), name="x", requires_grad=True)
    y = build(x)
    weights = rng.uniform(0.5, 1.5, size=y.shape)
    w = np_inverse(weights)
    want_y = np_L(log_softmax(BIG, axis))
    want_g = w - np.exp(log_softmax(BIG, axis)) * w.sum(axis=axis, keepdims=True)
    fn = compile_value_and_grad(y, x, weights)
    got_y, got_g = fn(BIG)
    # atol: log_softmax of the largest entry is -4e-18 here; the kernel's log(1 + tiny) rounds it to 0
    np.testing.assert_allclose(got_y, want_y, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got_g, want_g, rtol=1e-12, atol=1e-15)
    ops = ops_of(fn)
    assert ops["log"] == 0 and ops["log_softmax"] == 1, dict(ops)


# ------------------------------------------------------------------ log(sum(exp(x)))
def _lse(a, axis, keepdims=False):
    return np.logaddexp.reduce(a, axis=axis, keepdims=keepdims)


LSE_CASES = {
    # name: (build, numpy value, numpy gradient of sum(weights * y))
    "all axes": (lambda x: sg.log(sg.sum(sg.exp(x))),
                 lambda a: _lse(a, None),
                 lambda a, w: w * np.exp(a - _lse(a, None))),
    "axis 1": (lambda x: sg.log(sg.sum(sg.exp(x), axis=1)),
               lambda a: _lse(a, 1),
               lambda a, w: w[:, None] * np.exp(a - _lse(a, 1, True))),
    "axis 0 keepdims": (lambda x: sg.log(sg.sum(sg.exp(x), axis=0, keepdims=True)),
                        lambda a: _lse(a, 0, True),
                        lambda a, w: w * np.exp(a - _lse(a, 0, True))),
    "exp(x).T, axis 0": (lambda x: sg.log(sg.sum(sg.exp(x).T, axis=0)),
                         lambda a: _lse(a, 1),
                         lambda a, w: w[:, None] * np.exp(a - _lse(a, 1, True))),
    "exp(x.T), axis 0": (lambda x: sg.log(sg.sum(sg.exp(x.T), axis=0)),
                         lambda a: _lse(a, 1),
                         lambda a, w: w[:, None] * np.exp(a - _lse(a, 1, True))),
    "exp(x) flattened, all": (lambda x: sg.log(sg.sum(sg.exp(x).reshape((6,)))),
                              lambda a: _lse(a, None),
                              lambda a, w: w * np.exp(a - _lse(a, None))),
    "sum reshaped": (lambda x: sg.log(sg.sum(sg.exp(x), axis=1).reshape((2, 1))),
                     lambda a: _lse(a, 1).reshape(2, 1),
                     lambda a, w: w.reshape(2, 1) * np.exp(a - _lse(a, 1, True))),
    "exp(x) reshaped, axis 1": (lambda x: sg.log(sg.sum(sg.exp(x).reshape((3, 2)), axis=1)),
                                lambda a: _lse(a.reshape(3, 2), 1),
                                lambda a, w: (w[:, None] * np.exp(a.reshape(3, 2) - _lse(a.reshape(3, 2), 1, True))
                                              ).reshape(2, 3)),
}

LSE_FEED = np.array([[1000.0, 999.0, -5.0], [700.0, 0.0, 710.0]])


@pytest.mark.parametrize("case", LSE_CASES, ids=str)
def test_log_sum_exp(case, rng):
    build, value, grad = LSE_CASES[case]
    x = sg.placeholder((2, 3), name="x", requires_grad=True)
    y = build(x)
    weights = rng.uniform(0.5, 1.5, size=y.shape)
    fn = compile_value_and_grad(y, x, weights)
    got_y, got_g = fn(LSE_FEED)
    np.testing.assert_allclose(got_y, value(LSE_FEED), rtol=1e-12, atol=0)
    np.testing.assert_allclose(got_g, grad(LSE_FEED, weights), rtol=1e-12, atol=1e-300)
    ops = ops_of(fn)
    assert ops["log"] == 0 and ops["logsumexp"] == 1, dict(ops)


# ------------------------------------------------------------------ softmax cross-entropy
def test_softmax_cross_entropy_gradient_is_softmax_minus_onehot_over_n(rng):
    z = sg.placeholder((None, 4), name="z", requires_grad=True)
    t = sg.placeholder((None,), dtype="int64", name="t")
    loss = sg.softmax_cross_entropy(z, t)
    (g,) = sg.grad(loss, [z])
    fn = sg.compile([loss, g], inputs=[z, t])
    for n in (5, 2):
        Z = rng.normal(size=(n, 4)) * 3
        Z[0] = [1000.0, -1000.0, 0.0, 999.0]          # finite math, overflowing exp
        T = rng.integers(0, 4, size=n)
        value, grad = fn(Z, T)
        p = np.exp(log_softmax(Z, -1))
        np.testing.assert_allclose(grad, (p - np.eye(4)[T]) / n, rtol=1e-12, atol=1e-17)
        np.testing.assert_allclose(value, -np.mean(log_softmax(Z, -1)[np.arange(n), T]), rtol=1e-12)


def test_hand_written_cross_entropy_is_stabilized(rng):
    z = sg.placeholder((None, 3), name="z", requires_grad=True)
    onehot = sg.placeholder((None, 3), name="onehot")
    loss = -sg.mean(sg.sum(onehot * sg.log(sg.softmax(z, axis=-1)), axis=-1))
    (g,) = sg.grad(loss, [z])
    fn = sg.compile([loss, g], inputs=[z, onehot])
    Z = np.array([[1000.0, 0.0, -1000.0], [1.0, 2.0, 3.0]])
    T = np.array([1, 2])
    value, grad = fn(Z, np.eye(3)[T])
    np.testing.assert_allclose(value, -np.mean(log_softmax(Z, -1)[[0, 1], T]), rtol=1e-12)
    np.testing.assert_allclose(grad, (np.exp(log_softmax(Z, -1)) - np.eye(3)[T]) / 2, rtol=1e-12, atol=1e-17)
    assert ops_of(fn)["log"] == 0


# ------------------------------------------------------------------ what must not be rewritten
@pytest.mark.parametrize("build", [
    lambda x: sg.log(sg.constant(np.ones(3)) + x),
    lambda x: sg.log(sg.constant(np.ones(3)) - sg.sigmoid(x)),
    lambda x: sg.exp(x) - sg.constant(np.ones(3)),
    lambda x: sg.log(sg.constant(np.ones((1, 1))) + x),
], ids=["log(ones(3) + x)", "log(ones(3) - sigmoid(x))", "exp(x) - ones(3)", "log(ones((1,1)) + x)"])
def test_broadcasting_patterns_keep_their_shape(build):
    x = sg.placeholder((1,), name="x")
    y = build(x)
    fn = sg.compile(y, inputs=[x])
    slow = sg.compile(y, inputs=[x], optimize=False)
    feed = np.array([0.5])
    assert fn(feed).shape == slow(feed).shape == y.shape
    np.testing.assert_allclose(fn(feed), slow(feed), rtol=1e-14)


def test_log_of_one_plus_an_integer_is_not_log1p_of_an_integer():
    x = sg.placeholder((3,), dtype="int64", name="x")
    y = sg.log(1 + x)
    fn = sg.compile(y, inputs=[x])
    np.testing.assert_allclose(fn(np.arange(3)), np.log(1 + np.arange(3)), rtol=1e-15)
    assert fn(np.arange(3)).dtype == y.dtype


def test_log_of_sigmoid_plus_one_is_not_touched():
    x = sg.placeholder((3,), name="x")
    fn = sg.compile(sg.log(1 + sg.sigmoid(x)), inputs=[x])
    feed = np.array([-1.0, 0.0, 1.0])
    np.testing.assert_allclose(fn(feed), np.log1p(sigmoid(feed)), rtol=1e-14)
    assert ops_of(fn)["softplus"] == 0


def test_gradient_with_respect_to_an_intermediate_inside_a_pattern():
    # s is asked for, so log(1 - s) cannot become -softplus(x): its gradient is -1/(1-s)
    x = sg.placeholder((2,), name="x", requires_grad=True)
    s = sg.sigmoid(x)
    y = sg.sum(sg.log(1 - s))
    gx, gs = sg.grad(y, [x, s])
    feed = np.array([-2.0, 3.0])
    got_y, got_gx, got_gs = sg.compile([y, gx, gs], inputs=[x])(feed)
    np.testing.assert_allclose(got_y, np.sum(-softplus(feed)), rtol=1e-12)
    np.testing.assert_allclose(got_gx, -sigmoid(feed), rtol=1e-12)
    np.testing.assert_allclose(got_gs, -1 / (1 - sigmoid(feed)), rtol=1e-12)


def test_gradient_with_respect_to_a_tensor_y_does_not_depend_on_is_zero():
    # sg.grad differentiates the stable twin of y's graph; a wrt outside that graph still gets zeros
    x = sg.placeholder((), name="x", requires_grad=True)
    w = sg.placeholder((2,), name="w", requires_grad=True)
    gx, gw = sg.grad(sg.log(sg.sigmoid(x)), [x, w])
    got_x, got_w = sg.compile([gx, gw], inputs=[x, w])(-1000.0, np.ones(2))
    assert got_x == 1.0
    np.testing.assert_array_equal(got_w, np.zeros(2))


def test_stabilize_alone_on_a_forward_graph():
    x = sg.placeholder((4,), name="x")
    fn = sg.compile(sg.log(sg.sigmoid(x)), inputs=[x], passes=["stabilize", "dce"])
    assert ops_of(fn) == {"placeholder": 1, "neg": 2, "softplus": 1}
    (row, _) = fn.report().rows
    assert row["pass"] == "stabilize" and row["changed"] == 1 and row["fixed_point"]
    assert row["removed"] == {"log": 1, "sigmoid": 1}
    assert row["added"] == {"neg": 2, "softplus": 1}
    np.testing.assert_allclose(fn(np.array([-1000.0, -1.0, 0.0, 50.0])),
                               -softplus(-np.array([-1000.0, -1.0, 0.0, 50.0])), rtol=1e-14)


def test_float32_stays_float32():
    x = sg.placeholder((3,), dtype="float32", name="x", requires_grad=True)
    y = sg.sum(sg.log(sg.sigmoid(x)) + sg.log(1 + x * x) + (sg.exp(x) - 1))
    (g,) = sg.grad(y, [x])
    fn = sg.compile([y, g], inputs=[x])
    value, grad = fn(np.array([-200.0, 1e-4, 2.0], np.float32))
    assert value.dtype == np.float32 and grad.dtype == np.float32
    assert np.isfinite(value) and np.all(np.isfinite(grad))


@pytest.mark.parametrize("dtype, feed", [("int64", [0, 3, 7]), ("int8", [0, 3, -128]), ("uint8", [0, 3, 9]),
                                         ("bool", [True, False, True])])
def test_log_sum_exp_of_integers_is_left_as_written(dtype, feed):
    # logsumexp's kernel shifts by a max starting at -inf (an integer array cannot hold it) and picks its
    # own dtype (float64 for bool, where exp gives float16)
    x = sg.placeholder((3,), dtype=dtype, name="x")
    y = sg.log(sg.sum(sg.exp(x)))
    fn = sg.compile(y, inputs=[x])
    slow = sg.compile(y, inputs=[x], optimize=False)
    feed = np.array(feed, dtype)
    got, want = fn(feed), slow(feed)
    assert got.dtype == want.dtype == y.dtype
    np.testing.assert_array_equal(got, want)
    assert ops_of(fn)["logsumexp"] == 0


@pytest.mark.parametrize("build", [
    lambda x: sg.log(sg.ops.apply("sigmoid", (x,), {})),
    lambda x: sg.log(1 - sg.ops.apply("sigmoid", (x,), {})),
    lambda x: sg.log(sg.ops.apply("softmax", (x,), {"axis": (0,)})),
], ids=["log(sigmoid(u))", "log(1 - sigmoid(u))", "log(softmax(u))"])
def test_stable_forms_that_negate_are_not_built_over_integers(build):
    # -softplus(-x) negates x: -uint8(3) is 253. sg.sigmoid casts to float first; a graph applying the op
    # to integers directly keeps the form it was written in
    x = sg.placeholder((3,), dtype="uint8", name="x")
    fn = sg.compile(build(x), inputs=[x], passes=["stabilize", "dce"])
    assert ops_of(fn)["softplus"] == ops_of(fn)["log_softmax"] == ops_of(fn)["neg"] == 0


def test_a_graph_without_log_or_exp_is_returned_as_it_is():
    # Every stable pattern holds a log or an exp (stable.TRIGGERS): without one the pass rewrites nothing,
    # and says so without walking the rules; with one it still rewrites (exp(x) - 1 -> expm1(x)).
    from staticgrad.graph import Graph
    from staticgrad.passes import stabilize
    from staticgrad.stable import RULES, TRIGGERS
    x = sg.placeholder((3,), name="x")
    plain = Graph.from_tensors([sg.tanh(x * 2.0) - 1.0 + sg.sqrt(x)], inputs=[x])
    same, stats = stabilize.run(plain)
    assert same is plain and stats.changed == 0 and stats.fixed_point
    rewritten, stats = stabilize.run(Graph.from_tensors([sg.exp(x) - 1.0], inputs=[x]))
    assert stats.changed == 1 and "expm1" in {n.op for n in rewritten.nodes.values()}
    assert set(RULES) <= TRIGGERS | {"add", "sub"}     # (the add and sub rules look for an exp)
