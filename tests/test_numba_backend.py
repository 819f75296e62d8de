"""backend="numba": elementwise regions compiled into loops give the numpy backend's results."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import fuse

numba = pytest.importorskip("numba")


def chain(size, cycles):
    x = sg.placeholder((size,), name="x", requires_grad=True)
    h = x
    for _ in range(cycles):
        h = sg.tanh(sg.sin(h) * 0.9 + x)
    loss = sg.sum(h)
    return x, [loss] + sg.grad(loss, [x])


def assert_same(a, b):
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-300)


def test_chain_equals_numpy_backend_and_fuses_forward_with_backward():
    x, outs = chain(7, 2)
    X = np.random.default_rng(0).uniform(-0.2, 0.2, 7)
    fast = sg.compile(outs, inputs=[x], backend="numba")
    assert_same(fast(X), sg.compile(outs, inputs=[x])(X))
    summary = fast.report().summary
    assert summary["backend"] == "numba" and summary["numba_compile_seconds"] > 0
    # the loss reduction is moved behind the loop, so one kernel computes forward and backward
    assert summary["fused_regions"] == 1
    assert "fused loop over" in fast.source


def test_mlp_step_with_updates_and_unknown_batch():
    rng = np.random.default_rng(1)
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3, 4)), name="W")
    b = sg.parameter(np.zeros(4), name="b")
    loss = sg.mean(sg.square(sg.sigmoid(x @ W + b) - 0.5))
    gW, gb = sg.grad(loss, [W, b])
    X = rng.normal(size=(5, 3))
    results = []
    for backend in ("numpy", "numba"):
        W.value, b.value = rng.normal(size=(3, 4)) * 0 + 0.1, np.zeros(4)
        step = sg.compile([loss, gW], inputs=[x], updates=[(W, W - 0.5 * gW), (b, b - 0.5 * gb)], backend=backend)
        results.append([step(X), step(X[:2]), W.value.copy(), b.value.copy()])
    for a, c in zip(*results):
        assert_same(a if isinstance(a, list) else [a], c if isinstance(c, list) else [c])


def test_division_by_zero_follows_numpy():
    x = sg.placeholder((3,), name="x")
    y = sg.exp(1.0 / x) - x
    with np.errstate(all="ignore"):
        want = sg.compile(y, inputs=[x])(np.array([0.0, 1.0, -0.0]))
        got = sg.compile(y, inputs=[x], backend="numba")(np.array([0.0, 1.0, -0.0]))
    np.testing.assert_array_equal(got, want)


def test_regions_are_contiguous_runs_of_one_shape():
    x = sg.placeholder((4,), name="x")
    y = sg.sum(sg.exp(x) * 2.0) + sg.sum(sg.tanh(x) + x)
    fn = sg.compile(y, inputs=[x])
    shapes = {i: n.shape for i, n in fn.ir.nodes.items()}
    regions, order = fuse.find_regions(fn.ir, list(fn.ir.nodes), shapes)
    assert sorted(order) == sorted(fn.ir.nodes)
    position = {i: k for k, i in enumerate(order)}
    for r in regions:
        steps = [position[i] for i in r.nodes]
        assert steps == list(range(steps[0], steps[0] + len(steps)))
        for i in r.nodes:
            assert all(position[j] < position[i] for j in fn.ir.nodes[i].inputs)


def test_unknown_backend_is_an_error():
    x = sg.placeholder((2,), name="x")
    with pytest.raises(ValueError, match="backend"):
        sg.compile(x * 2.0, inputs=[x], backend="cuda")
