"""A compiled function called from many threads at once gives the serial results, and graph building keeps
its name scopes and roles per thread."""
import threading

import numpy as np
import pytest

import staticgrad as sg

THREADS, CALLS = 8, 50


def _run_threads(work):
    """Run ``work(t)`` in THREADS threads started together; re-raise the first failure."""
    barrier, errors = threading.Barrier(THREADS), []

    def target(t):
        try:
            barrier.wait()
            work(t)
        except BaseException as err:  # noqa: BLE001 (reported below, in the test's thread)
            errors.append(err)

    threads = [threading.Thread(target=target, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _layer(n, d, h, dtype):
    """A tanh layer's loss and gradients, compiled twice (one for the serial calls, one for the threads:
    their first calls race to build its plan), and the feeds."""
    rng = np.random.default_rng(1)
    x = sg.placeholder((None, d), name="x", dtype=dtype)
    W = sg.parameter((rng.normal(size=(d, h)) / np.sqrt(d)).astype(dtype), name="W")
    b = sg.parameter(np.zeros(h, dtype), name="b")
    loss = sg.mean(sg.tanh(x @ W + b) ** 2)
    gW, gb = sg.grad(loss, [W, b])
    fns = [sg.compile([loss, gW, gb], inputs=[x]) for _ in range(2)]
    return fns, [rng.normal(size=(n, d)).astype(dtype) for _ in range(THREADS * CALLS)]


@pytest.mark.parametrize("size, dtype", [((256, 64, 128), np.float64), ((2, 3, 2), np.float64),
                                         ((2, 3, 2), np.float32)], ids=["big", "tiny", "tiny-numpy"])
def test_calls_from_eight_threads_equal_the_serial_ones(size, dtype):
    (serial_fn, fn), feeds = _layer(*size, dtype)
    serial = [serial_fn(x) for x in feeds]
    got = [None] * len(feeds)

    def work(t):
        for k in range(t, len(feeds), THREADS):
            got[k] = fn(feeds[k])

    _run_threads(work)
    for want, have in zip(serial, got):
        for a, b in zip(want, have):
            np.testing.assert_array_equal(a, b)
    assert fn.program.kind == ("scalar" if size[0] == 2 and dtype == np.float64 else "numpy")


@pytest.mark.parametrize("size", [(64, 16, 8), (2, 3, 2)], ids=["big", "tiny"])
def test_training_steps_from_threads_apply_one_at_a_time(size):
    """Each step reads the parameters the previous one wrote: a sum over all steps of a parameter-free
    increment lands exactly, and the loss sequence is one serial order's."""
    n, d, h = size
    x = sg.placeholder((None, d), name="x")
    W = sg.parameter(np.zeros((d, h)), name="W")
    count = sg.parameter(0.0, name="count")
    loss = sg.sum(x @ W)
    step = sg.compile(loss, inputs=[x], updates=[(W, W + 1.0), (count, count + 1.0)])
    ones = np.ones((n, d))
    seen = [[] for _ in range(THREADS)]

    def work(t):
        for _ in range(CALLS):
            seen[t].append(float(step(ones)))

    _run_threads(work)
    np.testing.assert_array_equal(W.value, np.full((d, h), THREADS * CALLS))
    assert float(count.value) == THREADS * CALLS
    losses = sorted(v for s in seen for v in s)
    np.testing.assert_array_equal(losses, [k * n * d * h for k in range(THREADS * CALLS)])


def test_graph_building_keeps_scope_and_role_per_thread():
    labels = [None] * THREADS

    def work(t):
        mine = []
        for k in range(CALLS):
            with sg.name_scope(f"thread{t}"):
                a = sg.placeholder((2,), name=f"a{k}", requires_grad=True)
                b = sg.tanh(a) * 2.0
                (g,) = sg.grad(sg.sum(b), [a])
            mine.append((a.scope, b.scope, b.role, g.role, g.scope))
        labels[t] = mine

    _run_threads(work)
    for t, mine in enumerate(labels):
        for a_scope, b_scope, b_role, g_role, _ in mine:
            assert (a_scope, b_scope, b_role, g_role) == (f"thread{t}", f"thread{t}", "forward", "backward")
