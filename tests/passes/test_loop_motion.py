"""Hoisting out of a scan and a scan's length check: work on several xs that runs once over all steps
before the loop still fails, on xs of different lengths, as the scan itself does (its line, its message),
and costs nothing where the lengths are known to agree or only one xs is read. Sinking a weight's gradient
into one matrix product over the steps, where the loop's first carry is a constant zero: no stack of shifted
carries is copied (checked every way by the loops' harness: compiled, eager, numpy, finite differences,
torch)."""
import numpy as np
import pytest

import staticgrad as sg
from tests.loops.harness import SG, check

R = np.random.default_rng(21)
MESSAGE = r"scan \(built at test_loop_motion\.py:\d+\): its xs have 2 different lengths \[3, 4\]"


def ops(graph):
    return [n.op for n in graph.nodes.values()]


def three_xs(reverse=False, length=None, rows=None):
    X, Y, Z = (sg.placeholder((rows, 2), name=n, requires_grad=True) for n in "XYZ")
    W = sg.parameter(R.uniform(-1, 1, (2, 2)), name="W")

    def step(c, xyz):
        x, y, z = xyz
        return c * z + sg.sin(x @ W) * y, c
    c, ys = sg.scan(step, sg.constant(np.zeros(2)), xs=(X, Y, Z), reverse=reverse, length=length)
    return [X, Y, Z], W, sg.sum(c) + sg.sum(ys * ys)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("grad", [False, True], ids=["loss", "loss+grads"])
def test_hoisted_work_on_xs_of_different_lengths_fails_as_the_scan(reverse, grad):
    inputs, W, loss = three_xs(reverse)
    outputs = [loss] + (sg.grad(loss, inputs[:2] + [W]) if grad else [])
    fn = sg.compile(outputs, inputs=inputs)
    assert "same_length" in ops(fn.ir) and fn.report()["ops"]["scan"] == (2 if grad else 1)
    feeds = [R.uniform(-1, 1, (3, 2)) for _ in range(3)]
    assert_same = sg.compile(outputs, inputs=inputs, optimize=False)(*feeds)
    for got, want in zip(fn(*feeds), assert_same):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    for wrong in range(3):
        rows = [3, 3, 3]
        rows[wrong] = 4
        with pytest.raises(sg.ShapeError, match=MESSAGE):
            fn(*[np.ones((n, 2)) for n in rows])


def test_the_check_says_the_length_the_scan_was_given():
    inputs, _, loss = three_xs(length=3)
    fn = sg.compile(loss, inputs=inputs)
    fn(*[np.ones((3, 2))] * 3)
    with pytest.raises(sg.ShapeError, match=r"scan \(built at .*\[3, 4\] \(length=3\)"):
        fn(np.ones((3, 2)), np.ones((4, 2)), np.ones((3, 2)))


def test_no_check_where_the_lengths_are_known_or_one_xs_is_read():
    known, _, loss = three_xs(rows=3)
    assert "same_length" not in ops(sg.compile(loss, inputs=known).ir)
    X = sg.placeholder((None, 2, 3), name="X")
    W = sg.parameter(R.uniform(-1, 1, (3, 3)), name="W")
    _, hs = sg.scan(lambda h, x: (sg.tanh(x @ W + h), h), sg.constant(np.zeros((2, 3))), xs=X)
    fn = sg.compile(sg.sum(hs), inputs=[X])
    assert "same_length" not in ops(fn.ir) and "matmul" in ops(fn.ir)     # (x_t @ W: one matmul before the loop)


def test_a_plan_runs_nothing_for_the_check():
    inputs, _, loss = three_xs()
    fn = sg.compile(loss, inputs=inputs)
    fn(*[R.uniform(-1, 1, (5, 2)) for _ in range(3)])
    assert "same_length" in ops(fn.ir) and "same_length" not in fn.source


def test_prune_after_the_loops_pass_keeps_the_check():
    inputs, _, loss = three_xs()
    fn = sg.compile(loss, inputs=inputs, passes=sg.passes.DEFAULT + ["prune"])
    assert "same_length" in ops(fn.ir)
    with pytest.raises(sg.ShapeError, match=MESSAGE):
        fn(np.ones((3, 2)), np.ones((4, 2)), np.ones((3, 2)))


def test_a_loop_within_a_loop_checks_its_own_xs():
    """The inner scan's hoisted work runs in the outer body, where its rows' lengths are first known."""
    A = sg.placeholder((2, None, 2), name="A")
    B = sg.placeholder((2, None, 2), name="B")

    def outer(f, ab):
        a, b = ab
        d, _ = sg.scan(lambda d, xy: (d + xy[0] * xy[1], None), f, xs=(a, b))
        return d, None
    f, _ = sg.scan(outer, sg.constant(np.zeros(2)), xs=(A, B))
    fn = sg.compile(f, inputs=[A, B])
    np.testing.assert_allclose(fn(np.ones((2, 3, 2)), np.ones((2, 3, 2))), [6.0, 6.0])
    with pytest.raises(sg.ShapeError, match=MESSAGE):
        fn(np.ones((2, 3, 2)), np.ones((2, 4, 2)))


# ------------------------------------------------------------------ sinking with a zero first carry
R_SUNK = np.random.default_rng(11)


def _sunk_rnn(reverse, zero=True):
    def model(m, X, W, U):
        def step(h, x):
            h = m.tanh(x @ W + h @ U)
            return h, h
        h0 = m.zeros((X.shape[1], U.shape[0])) if zero else m.const(np.full((X.shape[1], U.shape[0]), 0.3))
        return m.scan(step, h0, xs=X, reverse=reverse)
    return model


def _sunk_ops(model, *arrays):
    """The ops of the compiled loss and gradients (what check compiled too)."""
    X, W, U = (sg.placeholder(a.shape, name=n, requires_grad=True) for a, n in zip(arrays, "XWU"))
    h, hs = model(SG, X, W, U)
    loss = sg.sum(hs * hs) + sg.sum(h)
    fn = sg.compile(sg.grad(loss, [W, U]), inputs=[X, W, U])
    return [n.op for n in fn.ir.nodes.values()]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("steps", [1, 2, 7])
def test_a_zero_first_carry_adds_nothing_and_no_shifted_stack_is_made(reverse, steps):
    X, W, U = R_SUNK.uniform(-1, 1, (steps, 3, 2)), R_SUNK.uniform(-1, 1, (2, 4)), R_SUNK.uniform(-1, 1, (4, 4))
    check(_sunk_rnn(reverse), X, W, U)
    assert "concatenate" not in _sunk_ops(_sunk_rnn(reverse), X, W, U)


@pytest.mark.parametrize("reverse", [False, True])
def test_any_other_first_carry_keeps_the_stack_of_carries(reverse):
    X, W, U = R_SUNK.uniform(-1, 1, (5, 3, 2)), R_SUNK.uniform(-1, 1, (2, 4)), R_SUNK.uniform(-1, 1, (4, 4))
    check(_sunk_rnn(reverse, zero=False), X, W, U)
    assert "concatenate" in _sunk_ops(_sunk_rnn(reverse, zero=False), X, W, U)


# ------------------------------------------------------------------ one stack per body value
def test_a_body_value_two_readers_want_stacked_is_stacked_once():
    X = sg.placeholder((None, 4, 3), name="X")
    Wx = sg.parameter(R.normal(size=(3, 5)), name="Wx")
    Wh = sg.parameter(R.normal(size=(5, 5)), name="Wh")

    def step(carry, x):
        h, total = carry
        h = sg.tanh(x @ Wx + h @ Wh)
        return (h, total + sg.sum(h * h)), None     # (h read by the loss and, saved, by tanh's VJP)
    (_, total), _ = sg.scan(step, (sg.zeros_like(X[0] @ Wx), sg.constant(0.0)), X)
    fn = sg.compile([total] + sg.grad(total, [Wx, Wh]), inputs=[X])
    for node in fn.ir.nodes.values():
        if node.op == "scan":
            body = node.attrs["body"].graph
            stacked = body.outputs[node.attrs["n_carry"]:]
            assert len(stacked) == len(set(stacked)), node
    want = sg.compile([total] + sg.grad(total, [Wx, Wh]), inputs=[X], optimize=False)
    feed = R.normal(size=(6, 4, 3))
    for got, ref in zip(fn(feed), want(feed)):
        np.testing.assert_allclose(got, ref, rtol=1e-12)
