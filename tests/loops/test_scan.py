"""sg.scan, tried as a careful jax.lax.scan user would: every case runs compiled (default passes and
optimize=False), eagerly and as a plain numpy loop, and its gradients are checked against central
differences, eager mode and torch autograd (tests/loops/harness.py)."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager

from .harness import SG, check, tree_leaves

R = np.random.default_rng(7)


def rand(*shape, dtype=np.float64):
    return R.uniform(-1, 1, shape).astype(dtype)


# ------------------------------------------------------------------ the basic loop
def rnn(m, X, W, h0):
    def step(h, x):
        h = m.tanh(x @ W + h)
        return h, h * 2.0
    return m.scan(step, h0, xs=X)


def test_rnn_values_and_gradients_every_way():
    check(rnn, rand(5, 2, 3), rand(3, 3), rand(2, 3), order=2)


def test_reverse_runs_last_step_first_and_stacks_ys_in_step_order():
    def model(m, X, c0):
        return m.scan(lambda c, x: (c * 0.5 + x, c * x), c0, xs=X, reverse=True)
    check(model, rand(4, 3), rand(3), order=2)


def test_reverse_order_is_visible_in_values():
    X = sg.placeholder((4,), name="X")
    c, ys = sg.scan(lambda c, x: (c + x, c), sg.constant(0.0), xs=X, reverse=True)
    got = sg.compile([c, ys], inputs=[X])(np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(got[1], [9.0, 7.0, 4.0, 0.0])     # ys[t]: the carry step t started from
    assert got[0] == 10.0


def test_python_scalars_and_arrays_as_init_and_in_the_body():
    def model(m, X):
        return m.scan(lambda c, x: (c * 0.9 + m.sum(x), 2.0 * x + c), 0.0, xs=X)
    check(model, rand(4, 3))


# ------------------------------------------------------------------ pytrees
def test_tuple_carry_lstm_like():
    def model(m, X, W, U):
        def step(carry, x):
            h, c = carry
            z = x @ W + h @ U
            c = c * m.tanh(z) + m.sin(z)
            h = m.tanh(c) * 0.5
            return (h, c), h
        return m.scan(step, (m.zeros((2, 3)), m.zeros((2, 3))), xs=X)
    check(model, rand(4, 2, 3), rand(3, 3), rand(3, 3), order=2)


def test_dict_carry_dict_xs_and_no_y():
    def model(m, A, B, s0):
        def step(c, x):
            return {"s": c["s"] + x["a"] * c["p"], "p": c["p"] * m.cos(x["b"])}, None
        carry, ys = m.scan(step, {"s": s0, "p": s0 * 2.0}, xs={"b": B, "a": A})
        assert ys is None
        return carry
    check(model, rand(5, 3), rand(5, 3), rand(3), order=2)


def test_list_carry_and_list_xs_with_different_trailing_shapes():
    def model(m, X, Y, v):
        def step(c, xy):
            x, y = xy
            a, b = c
            return [a + x @ b, b * m.tanh(y)], [a * 1.0, m.sum(b)]
        return m.scan(step, [m.sum(v), v], xs=[X, Y])
    check(model, rand(4, 3), rand(4, 3), rand(3))


def test_nested_trees_and_none_leaves_in_ys():
    def model(m, X, v):
        def step(c, x):
            new = {"a": (c["a"][0] + x["u"][0], [c["a"][1][0] * x["w"]]), "b": c["b"] - m.sum(x["w"])}
            return new, (None, {"z": new["b"] * 1.0, "q": None}, [x["u"][0] * c["b"]])
        init = {"a": (v, [v * 0.5]), "b": m.sum(v)}
        return m.scan(step, init, xs={"u": (X,), "w": X * 2.0})
    check(model, rand(3, 2), rand(2))


def test_ys_structure_holds_none_in_place():
    X = sg.placeholder((3, 2), name="X")
    c, ys = sg.scan(lambda c, x: (c + x, (None, x, {"k": None})), sg.constant(np.zeros(2)), xs=X)
    assert ys[0] is None and ys[2] == {"k": None} and ys[1].shape == (3, 2)


# ------------------------------------------------------------------ lengths
def test_length_without_xs():
    def model(m, a, c0):
        return m.scan(lambda c, _: (m.sin(c) * a + 0.1, c * c), c0, length=5)
    check(model, rand(3), rand(3), order=2)


def test_length_without_xs_and_reverse():
    def model(m, a, c0):
        return m.scan(lambda c, x: (c * a + 1.0, c), c0, length=4, reverse=True)
    check(model, rand(3), rand(3))


def test_length_one_and_zero_without_xs():
    for n in (1, 0):
        def model(m, a, c0, n=n):
            return m.scan(lambda c, _: (c * a, c + a), c0, length=n)
        check(model, rand(3), rand(3))


def test_length_agreeing_with_xs_is_accepted():
    def model(m, X, c0):
        return m.scan(lambda c, x: (c + x, c), c0, xs=X, length=4)
    check(model, rand(4, 2), rand(2))


@pytest.mark.parametrize("steps", [0, 1, 6])
def test_unknown_length_fed_at_run_time(steps):
    def model(m, X, W, h0):
        def step(h, x):
            h = m.tanh(x @ W + h)
            return h, h * x
        return m.scan(step, h0, xs=X)
    check(model, rand(steps, 2, 3), rand(3, 3), rand(2, 3), unknown=(0,))


@pytest.mark.parametrize("steps", [0, 1, 5])
def test_unknown_length_reverse_pytree_xs(steps):
    def model(m, X, Y, c0):
        return m.scan(lambda c, xy: (c * xy[1] + xy[0], {"c": c}), c0, xs=(X, Y), reverse=True)
    check(model, rand(steps, 3), rand(steps, 3), rand(3), unknown=(0, 1))


def test_one_function_one_plan_per_sequence_length():
    X = sg.placeholder((None, 3), name="X", requires_grad=True)
    w = sg.placeholder((3,), name="w", requires_grad=True)
    _, hs = sg.scan(lambda h, x: (sg.tanh(h * w + x), h), sg.constant(np.zeros(3)), xs=X)
    loss = sg.sum(hs * hs)
    fn = sg.compile([loss] + sg.grad(loss, [X, w]), inputs=[X, w])
    w0 = rand(3)
    for steps in (4, 1, 7, 0, 4):
        X0 = rand(steps, 3)
        got = fn(X0, w0)
        check_value = _numpy_tanh_loop(X0, w0)
        np.testing.assert_allclose(got[0], check_value, rtol=1e-12)
        assert got[1].shape == (steps, 3)
    assert fn.report()["plans"] == 4


def _numpy_tanh_loop(X, w):
    h, total = np.zeros(3), 0.0
    for x in X:
        total += np.sum(h * h)
        h = np.tanh(h * w + x)
    return total


HOISTED_LENGTH_CHECK = pytest.mark.xfail(strict=True, reason=(
    "a body op on two xs hoisted out of the loop (passes/loop_motion.hoist) runs before the scan checks "
    "its xs' lengths: the error blames a broadcast of (3, 2) and (4, 2) in the user's mul"))


@pytest.mark.parametrize("optimize", [pytest.param(True, marks=HOISTED_LENGTH_CHECK), False])
def test_xs_of_unknown_length_that_disagree_at_run_time_raise(optimize):
    X = sg.placeholder((None, 2), name="X")
    Y = sg.placeholder((None, 2), name="Y")
    c, _ = sg.scan(lambda c, xy: (c + xy[0] * xy[1], None),
                   sg.constant(np.zeros(2)), xs=(X, Y))
    fn = sg.compile(c, inputs=[X, Y], optimize=optimize)
    np.testing.assert_allclose(fn(np.ones((3, 2)), np.ones((3, 2))), [3.0, 3.0])
    with pytest.raises(sg.ShapeError, match=r"scan .*lengths") as err:
        fn(np.ones((3, 2)), np.ones((4, 2)))
    assert "test_scan.py:" in str(err.value)
