"""backend="numba" in loops: each elementwise region of a body is one call of a compiled loop of its own,
inside the loop the body's source runs; values and gradients are the numpy backend's."""
import re
import sys

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.ops.registry import apply

pytest.importorskip("numba")
from staticgrad.lower import numba_plan, numba_regions  # noqa: E402  (after the skip: it needs numba)

TANH = 1e-12          # tanh's polynomial is within 3 ulp of numpy's; a few dozen steps compound that


def both(outputs, inputs, feeds, rtol=TANH, **compile_options):
    """The numba function, after checking it gives the numpy backend's values on ``feeds``."""
    want = sg.compile(outputs, inputs=inputs, **compile_options)(*feeds)
    fast = sg.compile(outputs, inputs=inputs, backend="numba", **compile_options)
    got = fast(*feeds)
    for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]):
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-300)
    return fast


def body_source(fn):
    return fn.source[fn.source.index("# body"):]


def rnn(dtype="float64", checkpoint=None, reverse=False, steps=12):
    rng = np.random.default_rng(0)
    X = sg.placeholder((steps, 4, 3), dtype, name="X")
    Wx = sg.parameter((0.4 * rng.normal(size=(3, 5))).astype(dtype), name="Wx")
    Wh = sg.parameter((0.4 * rng.normal(size=(5, 5))).astype(dtype), name="Wh")
    b = sg.parameter((0.1 * rng.normal(size=5)).astype(dtype), name="b")

    def step(h, x):
        h = sg.tanh(x @ Wx + h @ Wh + b)
        return h, h
    _, hs = sg.scan(step, sg.constant(np.zeros((4, 5), dtype)), xs=X, checkpoint=checkpoint, reverse=reverse)
    loss = sg.mean(hs * hs)
    return [X], [loss] + sg.grad(loss, [Wx, Wh, b]), [rng.normal(size=(steps, 4, 3)).astype(dtype)]


@pytest.mark.parametrize("checkpoint, reverse", [(None, False), (None, True), (4, False), (4, True)])
def test_an_rnn_and_its_gradients_equal_the_numpy_backend(checkpoint, reverse):
    inputs, outputs, feeds = rnn(checkpoint=checkpoint, reverse=reverse)
    fn = both(outputs, inputs, feeds)
    body = body_source(fn)
    # (checkpointed, the loops pass streams the loss into the body: its region is longer)
    assert re.search(r"fused\d+\(\w+, \w+, \w+(, \w+)?\)  # fused loop over \d+ nodes: add, tanh", body)
    if checkpoint is None:
        # the loop is in the body's source, and the region writes the step's h into its stacked row
        assert re.search(r"fused\d+\(\w+, \w+, \w+, row\d\)", body) and "for t, " in body
    assert fn.report().summary["fused_regions"] >= 2
    assert fn.report().summary["numba_compile_seconds"] > 0


@pytest.mark.parametrize("checkpoint", [None, 4])
def test_a_read_only_carry_compiles_no_region_a_second_time(monkeypatch, checkpoint):
    # The reverse loop's first carry is a constant of zeros (read-only): copied once per call (by the
    # loop in the body's source, or by the runner of a checkpointed scan), so each region's loop is
    # compiled for the one argument type found at compile time, not again at run time.
    monkeypatch.setattr(numba_regions, "_compiled", {})
    inputs, outputs, feeds = rnn(checkpoint=checkpoint)
    fn = both(outputs, inputs, feeds)
    assert ("flags.writeable" in body_source(fn)) == (checkpoint is None) and len(numba_regions._compiled) >= 2
    fn(*feeds)
    assert all(len(run.signatures) == 1 for run in numba_regions._compiled.values())


def test_float32_rounds_as_the_numpy_backend_does():
    inputs, outputs, feeds = rnn("float32")
    fn = both(outputs, inputs, feeds, rtol=1e-5)
    assert "fused loop over" in body_source(fn)


def test_scalars_bools_and_broadcast_operands():
    x = sg.placeholder((5, 3, 4), name="x", requires_grad=True)
    col = sg.parameter(np.linspace(0.5, 1.5, 3).reshape(3, 1), name="col")
    one = sg.parameter(np.full((1, 1), 0.25), name="one")

    def step(carry, xt):
        h, total, count = carry
        h = sg.tanh(h * col + xt * one + 0.5)              # (3, 1) and (1, 1) operands, a constant
        big = h > 0.1
        s = sg.sum(h)
        return (h, total + s * 2.0 - 1.0, count + sg.sum(sg.where(big, 1.0, 0.0))), (big, s * s + total)
    (h, total, count), (bigs, ss) = sg.scan(step, (sg.constant(np.zeros((3, 4))), sg.constant(0.0),
                                                    sg.constant(0.0)), xs=x)
    loss = sg.sum(h) + total
    X = np.random.default_rng(2).normal(size=(5, 3, 4))
    fn = both([h, total, count, bigs, ss] + sg.grad(loss, [x, col, one]), [x], [X])
    assert fn(X)[3].dtype == np.bool_

    def means(total, xt):           # the mean is a stacked output too: a numpy scalar, not a buffer's array
        m = sg.mean(xt)
        return total * 0.5 + m * 2.0 - 1.0, m
    total, ms = sg.scan(means, sg.constant(0.0), xs=x)
    fn = both([total, ms], [x], [X])
    assert "fused loop over 3 nodes: mul, add, sub" in body_source(fn)


def test_nested_scans_and_a_while_loop():
    X = sg.placeholder((3, 4, 2), name="X", requires_grad=True)
    w = sg.parameter(np.array([0.7, -0.4]), name="w")

    def outer(c, block):
        d, ds = sg.scan(lambda d, row: (sg.tanh(d * w + row), d * d), c, xs=block)
        return d * 0.5 + 0.1, sg.sum(ds)
    c, sums = sg.scan(outer, sg.constant(np.zeros(2)), xs=X)
    loss = sg.sum(c) + sg.sum(sums)
    feeds = [np.random.default_rng(3).normal(size=(3, 4, 2))]
    fn = both([loss] + sg.grad(loss, [X, w]), [X], feeds)
    assert body_source(fn).count("fused loop over") >= 2
    x = sg.placeholder((6,), name="x")
    out = sg.while_loop(lambda s: sg.sum(s[0]) < 50.0, lambda s: (sg.tanh(s[0]) * 2.0 + s[0] + 1.0, s[1] + 1),
                        (x, sg.constant(0)))
    both(list(out), [x], [np.linspace(-1.0, 1.0, 6)])


def test_sin_and_cos_beyond_their_polynomials_range_are_libms():
    x = sg.placeholder((4, 8), name="x")

    def step(h, xt):
        h = sg.sin(h + xt) * 0.5 + sg.cos(xt) * 0.25
        return h, h
    _, hs = sg.scan(step, sg.constant(np.zeros(8)), xs=x)
    X = np.random.default_rng(4).normal(size=(4, 8))
    X[2, 3], X[1, 0] = 3e5, -np.inf          # a step computed again with libm's sin and cos
    with np.errstate(invalid="ignore"):
        fn = both(hs, [x], [X], rtol=1e-15)
    assert "fused loop over" in body_source(fn)


def test_an_output_never_shares_memory_with_a_view_the_loop_still_reads():
    a = sg.placeholder((256, 256), name="a")     # (a plan's float64 region this large has a loop of its own)
    y = a @ a
    z = sg.transpose(y) * 2.0 + y * 0.5          # y's slot would be free for z, but y.T is read throughout
    A = np.random.default_rng(5).normal(size=(256, 256))
    fn = both(z + 1.0, [a], [A], rtol=1e-15)
    assert fn.report().summary["fused_regions"] == 1


def test_a_region_too_long_to_compile_goes_to_the_interpreter(monkeypatch):
    monkeypatch.setattr(numba_plan, "MAX_WEIGHT", 3)
    x = sg.placeholder((4, 10), name="x")

    def step(h, xt):
        for _ in range(3):
            h = sg.tanh(h * 0.9 + xt)
        return h, h
    _, hs = sg.scan(step, sg.constant(np.zeros(10)), xs=x)
    fn = both(hs, [x], [np.random.default_rng(6).normal(size=(4, 10))])
    body = body_source(fn)
    assert re.search(r"\w+, = fused\d+\(", body)            # the interpreter's kernel returns its outputs


def test_each_region_source_is_compiled_once_and_kept_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("STATICGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(numba_regions, "_compiled", {})
    x = sg.placeholder((256, 256), name="x")
    y = sg.tanh(x * 1.25 - 0.5) * x
    first = sg.compile(y, inputs=[x], backend="numba")
    X = np.random.default_rng(7).normal(size=(256, 256))
    want = first(X)
    files = [f for f in tmp_path.iterdir() if f.name.startswith("region_") and f.suffix == ".py"]
    assert len(files) == 1
    run = next(iter(numba_regions._compiled.values()))
    np.testing.assert_array_equal(sg.compile(y, inputs=[x], backend="numba")(X), want)
    assert len(numba_regions._compiled) == 1        # (the same source: compiled once in the process)
    numba_regions._compiled.clear()        # as a new process: the machine code is loaded from the folder
    again = sg.compile(y, inputs=[x], backend="numba")
    np.testing.assert_array_equal(again(X), want)
    loaded = next(iter(numba_regions._compiled.values()))
    assert loaded is not run and sum(loaded.stats.cache_hits.values()) >= 1


def test_a_failing_op_in_a_body_is_named_with_its_line(boom):
    X = sg.placeholder((None, 3), name="X")

    def step(c, x):
        return apply(boom, (sg.tanh(c + x) * 60.0 + x,)), None
    line = f"test_numba_plan.py:{sys._getframe().f_lineno - 1}"
    c, _ = sg.scan(step, sg.constant(np.zeros(3)), xs=X)
    fn = sg.compile(c, inputs=[X], backend="numba")
    fn(np.zeros((4, 3)))
    assert "fused loop over" in body_source(fn)
    with pytest.raises(sg.ExecutionError, match=rf"{boom} node \d+ \(.*{line}\) failed at run time .*value over 100"):
        fn(np.full((4, 3), 50.0))


def test_feeds_of_any_layout_or_read_only():
    x, b = sg.placeholder((256, 300), name="x"), sg.placeholder((300,), name="b")
    y = sg.tanh(x * 2.0 + b) * x
    X = np.random.default_rng(8).normal(size=(300, 256)).T       # Fortran order
    frozen = np.array(X)
    frozen.flags.writeable = False
    B = np.linspace(0.0, 1.0, 600)
    fn = both(y, [x, b], [X, B[::2]], rtol=1e-15)                # (a loop compiled for these too)
    np.testing.assert_allclose(fn(frozen, B[:300]), sg.compile(y, inputs=[x, b])(frozen, B[:300]), rtol=1e-15)
    assert re.search(r"fused\d+\(x, c\d+, b, v\d\)", fn.source)   # the constant 2.0 passed as a float


def test_a_parameters_new_value_is_written_over_its_gradient_and_handed_over():
    rng = np.random.default_rng(9)
    x = sg.placeholder((8, 256), name="x")
    start = rng.normal(size=(256, 256)) * 0.05
    feeds = rng.normal(size=(3, 8, 256))
    values = []
    for backend in ("numpy", "numba"):
        W = sg.parameter(start.copy(), name="W")
        loss = sg.sum(sg.tanh(x @ W) ** 2)
        (g,) = sg.grad(loss, [W])
        step = sg.compile(loss, inputs=[x], updates=[(W, W - 0.01 * g)], backend=backend)
        for batch in feeds:
            step(batch)
        values.append(W.value.copy())
    np.testing.assert_allclose(values[1], values[0], rtol=1e-12)
    assert step.report().summary["fused_regions"] >= 1
    # the update's loop writes over the gradient's buffer (no argument of its own), which the parameter takes
    line = next(s for s in step.source.splitlines() if "fused loop over 2 nodes: mul, sub" in s)
    assert "np.empty" not in step.source and step.program.handoff
    assert re.fullmatch(r"fused\d+\(c\d+, \w+, p_W\)", line.split("#")[0].strip())
