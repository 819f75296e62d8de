"""Loops and branches in define-by-run code whose state holds no eager tensor (a number as init, only a
length, int bounds) but whose functions read one: they run eagerly, as a Python loop would, and their
gradients reach the eager tensors read. Graph-mode loops are still traced once."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager

R = np.random.default_rng(11)


def rand(*shape):
    return R.uniform(-1, 1, shape)


def grad_of(loss_of, value):
    """(value, gradient) of the scalar ``loss_of(a)`` at ``value``, run eagerly."""
    a = eager.tensor(value, requires_grad=True)
    loss = loss_of(a)
    assert eager.is_eager(loss)
    loss.backward()
    return loss.item(), a.grad


def central(loss_of, value, h=1e-6):
    """d loss_of / d value by central differences, ``loss_of`` run eagerly on plain eager tensors."""
    value = np.array(value, dtype=np.float64)
    out = np.zeros_like(value)
    for k in np.ndindex(value.shape):
        up, down = value.copy(), value.copy()
        up[k] += h
        down[k] -= h
        out[k] = (loss_of(eager.tensor(up)).item() - loss_of(eager.tensor(down)).item()) / (2 * h)
    return out


def check(loss_of, value):
    got, g = grad_of(loss_of, value)
    np.testing.assert_allclose(g, central(loss_of, value), rtol=1e-6, atol=1e-8)
    return got


def test_scan_over_a_length_reading_a_weight():
    W = rand(3, 3)

    def loss_of(a):
        h, hs = sg.scan(lambda h, _: (sg.tanh(h @ (a * W) + 0.5), h), np.zeros(3), length=4)
        return sg.sum(h) + sg.sum(hs * hs)
    check(loss_of, rand(3, 3))


def test_scan_over_numpy_xs_reading_a_weight_and_reverse():
    X = rand(4, 2)

    def loss_of(a):
        c, ys = sg.scan(lambda c, x: (c * a + x, sg.sin(c)), np.zeros(2), xs=X, reverse=True)
        return sg.sum(c) + sg.sum(ys[0])
    check(loss_of, rand(2))


def test_scan_whose_y_alone_reads_the_eager_tensor():
    def loss_of(a):
        c, ys = sg.scan(lambda c, _: (c + 1.0, a * 2.0), 0.0, length=3)
        assert c.item() == 3.0
        return sg.sum(ys)
    value = rand(2)
    assert check(loss_of, value) == pytest.approx(6.0 * np.sum(value))


def test_cond_on_a_number_reading_an_eager_tensor():
    for pred, want in ((True, "then"), (0, "other"), (sg.constant(True), "then")):
        def loss_of(a, pred=pred):
            return sg.cond(pred, lambda x: sg.sum(x * a * a), lambda x: sg.sum(x + a), 3.0)
        value = rand(2)
        got = check(loss_of, value)
        assert got == pytest.approx(3.0 * np.sum(value ** 2) if want == "then" else np.sum(3.0 + value))


def test_while_loop_with_number_state_reading_an_eager_tensor():
    def loss_of(a):
        out = sg.while_loop(lambda s: s[1] < 3, lambda s: (s[0] * sg.sum(a * a) + 0.5, s[1] + 1), (1.0, 0))
        assert eager.is_eager(out[1]) and out[1].item() == 3
        return out[0]
    check(loss_of, rand(2))


def test_while_loop_whose_condition_alone_reads_an_eager_tensor():
    def loss_of(a):
        return sg.while_loop(lambda s: s < sg.sum(a), lambda s: s + 1.0, 0.0) * sg.sum(a)
    got, _ = grad_of(loss_of, np.array([1.5, 1.0]))
    assert got == 3.0 * 2.5


def test_fori_loop_with_int_bounds_and_a_number_state():
    seen = []

    def loss_of(a):
        def body(i, s):
            seen.append(i)
            return s * a + i
        return sg.sum(sg.fori_loop(1, 4, body, np.zeros(2)))
    check(loss_of, rand(2))
    assert seen[-3:] == [1, 2, 3] and all(type(i) is int for i in seen[-3:])    # (as a Python loop's index)


def test_fori_loop_with_an_eager_bound_and_a_number_state():
    def loss_of(a):
        return sg.fori_loop(0, eager.tensor(3), lambda i, s: s * a + sg.cast(i, "float64"), 1.0)
    check(loss_of, np.array(0.7))


def test_nested_loops_reading_an_eager_tensor_run_eagerly():
    def loss_of(a):
        def outer(c, _):
            d, _ = sg.scan(lambda d, _: (sg.sin(d) * a, None), c, length=2)
            return d + 1.0, d
        c, ds = sg.scan(outer, np.ones(2), length=3)
        return sg.sum(c) + sg.sum(ds)
    check(loss_of, rand(2))


def test_a_placeholder_among_the_state_is_still_refused():
    X = sg.placeholder((3,), name="X")
    a = eager.tensor(2.0)
    with pytest.raises(eager.MixingError, match=r"scan: cannot mix eager tensors with the symbolic placeholder "
                                                r"'X' \(at test_eager_loops.py:\d+"):
        sg.scan(lambda c, x: (c * a + x, None), 0.0, xs=X)
    with pytest.raises(TypeError, match=r"placeholder 'p'"):
        sg.cond(sg.placeholder((), "bool", name="p"), lambda: a, lambda: a * 2.0)


def test_graph_mode_loops_reading_parameters_and_placeholders_trace_once():
    W = sg.parameter(rand(2, 2), name="W")
    v = sg.placeholder((2,), name="v")
    calls = []

    def step(c, _):
        calls.append(c)
        return sg.tanh(c @ W + v), c
    c, ys = sg.scan(step, np.zeros(2), length=3)
    s = sg.while_loop(lambda s: sg.sum(s) < 10.0, lambda s: calls.append(s) or s + sg.sum(v * v) + 1.0, 0.0)
    b = sg.cond(sg.sum(v) > 0.0, lambda x: calls.append(x) or x @ W, lambda x: calls.append(x) or x, v)
    assert len(calls) == 4 and not any(eager.is_eager(t) for t in (c, ys, s, b))
    fn = sg.compile([c, ys, s, b], inputs=[v])
    got = fn(np.ones(2))
    h = np.zeros(2)
    for _ in range(3):
        h = np.tanh(h @ W.value + 1.0)
    np.testing.assert_allclose(got[0], h)
    assert got[2] == 12.0 and np.allclose(got[3], np.ones(2) @ W.value)
