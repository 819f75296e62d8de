"""Streaming a checkpointed scan's stacked values: a loss over every step's output, and its cotangent fed to
the reverse loop, are computed step by step, so the ys are kept as checkpoints instead of whole. Values
and gradients are those of the same loop without checkpoints (and of finite differences); nothing is
streamed without ``checkpoint``, nor what something else reads whole."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.passes import loop_streaming
from staticgrad.testing import check_grads

STEPS, BATCH, IN, HIDDEN = 12, 4, 3, 5


def rnn(checkpoint, unknown=False, dtype="float64", extra=None, reverse=False):
    """A tanh RNN whose loss reads every step's h: 0.5 * mean(h^2) + sum((h - Y)^2)."""
    rng = np.random.default_rng(3)
    steps = None if unknown else STEPS
    X = sg.placeholder((steps, BATCH, IN), dtype=dtype, name="X")
    Y = sg.placeholder((steps, BATCH, HIDDEN), dtype=dtype, name="Y")
    Wx = sg.parameter((0.5 * rng.normal(size=(IN, HIDDEN))).astype(dtype), name="Wx")
    Wh = sg.parameter((0.5 * rng.normal(size=(HIDDEN, HIDDEN))).astype(dtype), name="Wh")

    def step(h, x):
        h = sg.tanh(x @ Wx + h @ Wh)
        return h, h
    h0 = sg.constant(np.zeros((BATCH, HIDDEN), dtype))
    _, hs = sg.scan(step, h0, X, checkpoint=checkpoint, reverse=reverse)
    loss = 0.5 * sg.mean(hs * hs) + sg.sum((hs - Y) ** 2)
    outputs = [loss] + sg.grad(loss, [Wx, Wh]) + ([extra(hs)] if extra else [])
    feeds = [rng.normal(size=(STEPS, BATCH, IN)).astype(dtype), rng.normal(size=(STEPS, BATCH, HIDDEN)).astype(dtype)]
    return sg.compile(outputs, inputs=[X, Y]), feeds


def streamed(fn):
    return sum(r.get("details", {}).get("streamed", 0) for r in fn.report() if r["pass"] == "loops")


def whole_reads(fn):
    """Ops outside the loops that read a (steps, batch, hidden) value whole."""
    nodes = fn.ir.nodes
    return [n.op for n in nodes.values() if n.op not in ("scan", "loop_output")
            and any(nodes[x].shape[1:] == (BATCH, HIDDEN) and len(nodes[x].shape) == 3 for x in n.inputs)]


@pytest.mark.parametrize("k", [1, 3, 5, 12])
@pytest.mark.parametrize("reverse", [False, True])
def test_a_loss_over_every_step_reads_no_stack_whole(k, reverse):
    want_fn, feeds = rnn(None, reverse=reverse)
    fn, _ = rnn(k, reverse=reverse)
    for got, want in zip(fn(*feeds), want_fn(*feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    # the mean and the sum become carries, and the cotangent of the h's is computed in the reverse loop
    assert streamed(fn) == 3 and streamed(want_fn) == 0
    assert whole_reads(fn) == [] and "mean" in whole_reads(want_fn)


def test_the_ys_are_kept_as_checkpoints():
    fn, feeds = rnn(3)
    fn(*feeds)
    ys = STEPS * BATCH * HIDDEN * 8
    # the h's and the carries each step starts with are both recomputed: about two stacks less the checkpoints
    assert fn.report()["checkpoint_bytes_saved"] > ys
    # and the plan's peak counts a segment's rows for them, not the stacks (a plan without checkpoints: both)
    assert fn.report()["peak_bytes"] < ys
    want_fn, _ = rnn(None)
    want_fn(*feeds)
    assert want_fn.report()["peak_bytes"] > 2 * ys


def test_float32_and_gradients_against_finite_differences():
    want_fn, feeds = rnn(None, dtype="float32")
    fn, _ = rnn(4, dtype="float32")
    for got, want in zip(fn(*feeds), want_fn(*feeds)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert streamed(fn) == 3


    def loss(X):
        _, ys = sg.scan(lambda h, x: (sg.tanh(h * 0.5 + x), sg.sin(h) * x), sg.constant(np.zeros(2)), X,
                        checkpoint=2)
        return sg.sum(sg.exp(ys) * 0.3) + sg.mean(ys * ys)
    check_grads(loss, [np.random.default_rng(0).normal(size=(6, 2))], order=2)


def test_over_steps_of_unknown_number_only_the_loops_own_values_stream():
    want_fn, feeds = rnn(None, unknown=True)
    fn, _ = rnn(3, unknown=True)
    for n in (STEPS, 5):
        for got, want in zip(fn(*[f[:n] for f in feeds]), want_fn(*[f[:n] for f in feeds])):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    # Y's rows might not be the steps' (its length is unknown too), and the mean needs the number of steps
    assert streamed(fn) == 0

    X = sg.placeholder((None, 2), name="X", requires_grad=True)
    _, ys = sg.scan(lambda h, x: (sg.tanh(h * 0.5 + x), h * x), sg.constant(np.ones(2)), X, checkpoint=2)
    loss = sg.sum(ys * ys)
    outputs = [loss] + sg.grad(loss, [X])
    fn, want_fn = sg.compile(outputs, inputs=[X]), sg.compile(outputs, inputs=[X], optimize=False)
    for n in (0, 1, 5):
        x = np.random.default_rng(n).normal(size=(n, 2))
        for got, want in zip(fn(x), want_fn(x)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert streamed(fn) == 2            # the sum, and the cotangent 2 * y


def test_what_something_else_reads_whole_stays_whole():
    want_fn, feeds = rnn(None, extra=lambda hs: hs * hs)        # h^2 is an output as well as the mean's input
    fn, _ = rnn(3, extra=lambda hs: hs * hs)
    for got, want in zip(fn(*feeds), want_fn(*feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert "mean" in whole_reads(fn) and streamed(fn) == 2


def test_a_reduction_over_some_axes_is_not_streamed():
    X = sg.placeholder((5, 3), name="X")
    _, ys = sg.scan(lambda h, x: (h + x, h * x), sg.constant(np.zeros(3)), X, checkpoint=2)
    per_step = sg.sum(ys * 2.0, axis=1)
    fn = sg.compile([per_step, sg.sum(sg.sin(ys)), sg.sum(ys)], inputs=[X])
    x = np.random.default_rng(1).normal(size=(5, 3))
    ref = np.cumsum(np.vstack([np.zeros(3), x[:-1]]), axis=0) * x
    got = fn(x)
    np.testing.assert_allclose(got[0], (ref * 2.0).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(got[1], np.sin(ref).sum(), rtol=1e-12)
    np.testing.assert_allclose(got[2], ref.sum(), rtol=1e-12)
    # the sum of sin(y) only: the per-step sums read the ys whole, and so the full sum of them stays too
    assert streamed(fn) == 1


def test_the_rewrites_leave_a_scan_without_checkpoint_alone():
    fn, _ = rnn(None)
    graph = fn.ir
    for i, node in graph.nodes.items():
        if node.op == "scan":
            assert loop_streaming.reduce(graph, i)[1] == 0 and loop_streaming.feed(graph, i)[1] == 0
