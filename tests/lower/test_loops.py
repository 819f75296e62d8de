"""Loops in plans: the loop written into the body's source, numba-fused bodies, checkpointed scans."""
import re

import numpy as np
import pytest

import staticgrad as sg


def _rnn(checkpoint=None, steps=40):
    rng = np.random.default_rng(0)
    X = sg.placeholder((None, 4, 3), name="X")
    Wx = sg.parameter(0.4 * rng.normal(size=(3, 5)), name="Wx")
    Wh = sg.parameter(0.4 * rng.normal(size=(5, 5)), name="Wh")

    def step(carry, x):
        h, total = carry
        h = sg.tanh(x @ Wx + h @ Wh)
        return (h, total + sg.sum(h * h)), None
    (_, total), _ = sg.scan(step, (sg.zeros_like(X[0] @ Wx), sg.constant(0.0)), X, checkpoint=checkpoint)
    fn = sg.compile([total] + sg.grad(total, [Wx, Wh]), inputs=[X])
    return fn, rng.normal(size=(steps, 4, 3))


def test_a_scans_loop_is_written_into_its_bodys_source():
    fn, X = _rnn()
    fn(X)
    # (the step's slices, and the rows of the stacked outputs written with out=, taken by the loop itself)
    assert re.search(r"for t, \w+, row\d in zip\(range\(T\), \w+_steps, stacked\d\):", fn.source)
    assert "in zip(range(T - 1, -1, -1), " in fn.source        # the reverse loop of the gradient


@pytest.mark.parametrize("k", [1, 3, 7, 40, 100])
def test_a_checkpointed_scan_gives_the_same_values_and_keeps_less(k):
    want, X = _rnn()
    fn, _ = _rnn(checkpoint=k)
    for a, b in zip(want(X), fn(X)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    saved = fn.report().get("checkpoint_bytes_saved", 0)
    assert (saved > 0) == (k < 40)
    np.testing.assert_allclose(fn(X[:5])[0], want(X[:5])[0], rtol=1e-12)      # another length, another plan


def test_the_numba_backend_fuses_an_elementwise_body_into_one_loop():
    pytest.importorskip("numba")
    x = sg.placeholder((6, 50), name="x")

    def step(h, xt):
        h = sg.tanh(sg.sin(h) * 0.9 + sg.cos(h * xt) * 0.5 + sg.exp(-h * h) * xt)
        return h, h * h
    _, ys = sg.scan(step, sg.constant(np.zeros(50)), x)
    X = np.random.default_rng(0).normal(size=(6, 50))
    fused = sg.compile(ys.sum(), backend="numba")
    np.testing.assert_allclose(fused(X), sg.compile(ys.sum())(X), rtol=1e-12)
    body = fused.source[fused.source.index("# body"):]
    assert "fused loop over" in body


def _stacked_rnn(rng):
    X = sg.placeholder((6, 4, 3), name="X")
    W = sg.parameter(0.4 * rng.normal(size=(3, 5)), name="W")
    U = sg.parameter(0.4 * rng.normal(size=(5, 5)), name="U")

    def step(h, x):
        h = sg.tanh(x @ W + h @ U)
        return h, h
    h, hs = sg.scan(step, sg.constant(np.zeros((4, 5))), X)
    return X, [W, U], h, hs


def test_a_loop_whose_values_stay_inside_the_call_keeps_its_stacked_buffers():
    rng = np.random.default_rng(1)
    X, weights, _, hs = _stacked_rnn(rng)
    loss = sg.sum(hs * hs)
    fn = sg.compile([loss] + sg.grad(loss, weights), inputs=[X])
    a, b = rng.normal(size=(2, 6, 4, 3))
    want_a = [np.array(v) for v in fn(a)]
    fn(b)
    assert fn.source.count("the plan's own") == 2      # the forward loop's h's and the reverse loop's
    again = fn(a)
    for x, y in zip(want_a, again):
        np.testing.assert_array_equal(x, y)
    assert fn.program.memory.workspace_bytes >= 2 * 6 * 4 * 5 * 8       # (counted as the plan's)


@pytest.mark.parametrize("out", ["hs", "h", "view"])
def test_a_loop_value_the_caller_gets_is_a_fresh_array_each_call(out):
    rng = np.random.default_rng(2)
    X, weights, h, hs = _stacked_rnn(rng)
    value = {"hs": hs, "h": h, "view": sg.reshape(hs, (-1, 5))}[out]
    fn = sg.compile([value, sg.sum(hs * hs)], inputs=[X])
    a, b = rng.normal(size=(2, 6, 4, 3))
    first = fn(a)[0]
    kept = first.copy()
    fn(b)
    np.testing.assert_array_equal(first, kept)          # the second call wrote nothing the first returned
    assert "the plan's own" not in fn.source


def test_a_bias_every_step_adds_is_spread_to_the_steps_shape_once_before_the_loop():
    rng = np.random.default_rng(3)
    X = sg.placeholder((7, 4, 3), name="X")
    W, U, b = (sg.parameter(0.4 * rng.normal(size=s), name=n) for s, n in (((3, 5), "W"), ((5, 5), "U"), ((5,), "b")))

    def step(h, x):
        h = sg.tanh(x @ W + h @ U + b) * 2.0
        return h, h
    _, hs = sg.scan(step, sg.constant(np.zeros((4, 5))), X)
    fn = sg.compile(sg.sum(hs * hs), inputs=[X])
    x = rng.normal(size=(7, 4, 3))
    h, want = np.zeros((4, 5)), 0.0
    for t in range(7):
        h = np.tanh(x[t] @ W.value + h @ U.value + b.value) * 2.0
        want += np.sum(h * h)
    np.testing.assert_allclose(fn(x), want, rtol=1e-13)
    body = fn.source[fn.source.index("# body"):]
    assert body.count("np.copyto(") == 1 and "b spread to (4, 5)" in body      # (2.0 is 0-d: not spread)


@pytest.mark.parametrize("name", ["t", "T", "row0"])
def test_a_slice_named_like_the_loops_own_names_is_renamed(name):
    X = sg.placeholder((5, 3), name=name)

    def step(h, x):
        h = h * 0.5 + x
        return h, h * h
    _, ys = sg.scan(step, sg.constant(np.zeros(3)), X, reverse=True)
    fn = sg.compile(ys, inputs=[X])
    x = np.random.default_rng(6).normal(size=(5, 3))
    h, want = np.zeros(3), np.zeros((5, 3))
    for t in range(4, -1, -1):
        h = h * 0.5 + x[t]
        want[t] = h * h
    np.testing.assert_array_equal(fn(x), want)
