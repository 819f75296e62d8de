"""backend="numba": elementwise regions compiled into loops give the numpy backend's results."""
import re

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import ops
from staticgrad.lower import fuse

numba = pytest.importorskip("numba")
from staticgrad.lower import numba_backend  # noqa: E402  (after the skip: it needs numba)


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
    numba_backend._current.clear()          # so this plan's interpreter is built (or loaded) and timed
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


def every_op(x, y):
    """One use of each op a region can hold, with a computed scalar (a reduction) among the operands."""
    s = sg.sum(x) * 0.1
    unary = [ops.neg, ops.exp, ops.log, ops.log1p, ops.expm1, ops.sqrt, ops.sin, ops.cos, ops.tanh, ops.abs,
             ops.square, ops.sigmoid, ops.softplus, ops.relu, ops.sign, ops.stop_gradient]
    binary = [ops.add, ops.sub, ops.mul, ops.div, ops.maximum, ops.minimum, ops.less, ops.less_equal,
              ops.greater, ops.greater_equal, ops.equal, ops.not_equal]
    outs = [f(x) for f in unary] + [f(x, y) for f in binary]
    outs += [ops.pow(ops.abs(x), y), ops.pow(ops.abs(x), s), x * s - y]
    # True + True is True, so x * that is x, not 2x
    outs += [ops.where(x > y, x, y * 2.0), ops.clip(x, -0.5, 0.7), x * ((x > 0.0) + (y > 0.0))]
    every_op.unary, every_op.binary = unary, binary + [ops.pow, ops.where, ops.clip]
    return outs


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-12), ("float32", 1e-6)])
def test_every_fusible_op_equals_numpy_backend(dtype, rtol):
    x, y = sg.placeholder((3, 4), dtype, name="x"), sg.placeholder((3, 4), dtype, name="y")
    outs = every_op(x, y)
    X = np.array([[0.0, -0.0, 1.5, -2.0], [np.nan, np.inf, -np.inf, 0.3], [1e-300, -7.0, 40.0, 2.0]], dtype)
    Y = np.array([[0.0, 1.0, 1.5, 3.0], [2.0, np.nan, 0.5, -0.3], [2.0, -7.0, -40.0, 0.5]], dtype)
    fast = sg.compile(outs, inputs=[x, y], backend="numba")
    with np.errstate(all="ignore"):
        got, want = fast(X, Y), sg.compile(outs, inputs=[x, y])(X, Y)
    assert fast.report().summary["fused_regions"] >= 1
    shapes = {i: n.shape for i, n in fast.ir.nodes.items()}
    exercised = {n.op for n in fast.ir.nodes.values() if fuse.template(fast.ir.nodes, shapes, n)}
    exercised |= {"stop_gradient"}          # the passes drop that one
    assert {f.__name__ for f in every_op.unary + every_op.binary} <= exercised
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=0, equal_nan=True)


def test_float32_rounds_after_every_op():
    x, y = sg.placeholder((50,), "float32", name="x"), sg.placeholder((50,), "float32", name="y")
    h = x
    for _ in range(30):
        h = h * 1.1 + y / 3.0
    rng = np.random.default_rng(3)
    X, Y = rng.uniform(-1, 1, 50).astype(np.float32), rng.uniform(-1, 1, 50).astype(np.float32)
    want = sg.compile(h, inputs=[x, y])(X, Y)
    np.testing.assert_array_equal(sg.compile(h, inputs=[x, y], backend="numba")(X, Y), want)


def test_lowering_reuses_registers_and_regions_have_no_size_cap():
    x = sg.placeholder((5,), name="x")
    h = x
    for _ in range(1000):
        h = sg.tanh(sg.sin(h) * 0.9 + x)
    fn = sg.compile(h, inputs=[x])
    shapes = {i: n.shape for i, n in fn.ir.nodes.items()}
    (region,), _ = fuse.find_regions(fn.ir, list(fn.ir.nodes), shapes)
    templates = {fuse.template(fn.ir.nodes, shapes, fn.ir.nodes[i]) for i in region.nodes}
    code = fuse.lower(fn.ir, region, shapes, fuse.opcodes(templates))
    assert len(region.nodes) == 4000
    assert code.registers <= 4       # x, the scale and the two values in flight, not one per node


def test_plans_of_any_size_share_one_compiled_interpreter():
    X = np.random.default_rng(2).uniform(-0.2, 0.2, 40)
    frozen = X[::2].copy()
    frozen.flags.writeable = False
    for size, cycles, feed in [(7, 3, X[:7]), (20, 60, X[::2]), (20, 5, frozen)]:
        x, outs = chain(size, cycles)
        assert_same(sg.compile(outs, inputs=[x], backend="numba")(feed), sg.compile(outs, inputs=[x])(feed))
    # a new array type (read-only, another layout) would have compiled an interpreter again
    assert all(len(i.run.signatures) == 1 for i in numba_backend._current)


def test_an_interpreter_is_compiled_again_only_for_an_op_it_lacks():
    add, mul, exp = (sg.ops.REGISTRY[op].scalar for op in ("add", "mul", "exp"))
    numba_backend._current.clear()          # start from a process that has compiled nothing
    known = numba_backend.interpreter(frozenset({add, mul}))
    assert numba_backend.interpreter(frozenset({add})) is known
    bigger = numba_backend.interpreter(frozenset({add, exp}))
    assert bigger is not known and bigger.templates == {add, mul, exp}
    assert numba_backend.interpreter(frozenset({mul, exp})) is bigger    # it kept the ops seen before


def test_unknown_backend_is_an_error():
    x = sg.placeholder((2,), name="x")
    with pytest.raises(ValueError, match="backend"):
        sg.compile(x * 2.0, inputs=[x], backend="cuda")


def test_short_regions_run_a_loop_of_their_own_where_it_repays_its_compile_and_long_ones_the_interpreter():
    rng = np.random.default_rng(7)
    for rows, fused in ((64, 0), (1024, 1)):          # 2 nodes over 8,192 numbers: numpy's calls; 131,072: fused
        x = sg.placeholder((rows, 128), name="x")
        b = sg.parameter(rng.normal(size=128), name="b")
        fn = sg.compile(sg.relu(x + b), inputs=[x], backend="numba")
        X = rng.normal(size=(rows, 128))
        np.testing.assert_array_equal(fn(X), np.maximum(X + b.value, 0))
        assert fn.report().summary["fused_regions"] == fused
    # the bias broadcast: the loop reads it by index
    assert re.search(r"fused\d+\(x, p_b, v\d\)  # fused loop over 2 nodes: add, relu", fn.source)
    f32 = sg.placeholder((1024, 128), "float32", name="f32")
    assert sg.compile(sg.relu(f32 * 2.0), inputs=[f32], backend="numba").report().summary["fused_regions"] == 0
    xs, outs = chain(8192, 60)               # 480 nodes over the same numbers: the interpreter
    deep = sg.compile(outs, inputs=[xs], backend="numba")
    X = rng.uniform(-0.2, 0.2, 8192)
    assert_same(deep(X), sg.compile(outs, inputs=[xs])(X))
    assert deep.report().summary["fused_regions"] == 1 and re.search(r"\w+, = fused\d+\(", deep.source)


@pytest.mark.parametrize("build", [
    lambda x: 1.0 / x ** 0.5, lambda x: 1.0 / sg.relu(x), lambda x: 1.0 / sg.maximum(x, 0.0),
    lambda x: 1.0 / sg.minimum(x, -0.0), lambda x: 1.0 / sg.clip(x, 0.0, 1.0), lambda x: 1.0 / sg.ops.sign(x)],
    ids=["1/x**0.5", "1/relu", "1/maximum", "1/minimum", "1/clip", "1/sign"])
def test_signed_zeros_and_infinities_follow_numpy(build):
    # numpy's maximum/minimum return the second operand of two equal zeros, and its power takes a square
    # root for an exponent of 0.5 (sqrt(-inf) is nan, sqrt(-0.0) is -0.0): the fused loop must agree
    x = sg.placeholder((24,), name="x")
    h = x
    for _ in range(4):
        h = h * 0.5 + 0.25              # a region deep enough to fuse
    outputs = [build(x), h]
    X = np.tile([-np.inf, -0.0, 0.0, 4.0], 6)
    with np.errstate(all="ignore"):
        want = sg.compile(outputs, inputs=[x])(X)[0]
        fused = sg.compile(outputs, inputs=[x], backend="numba")
        got = fused(X)[0]
    assert fused.report().summary["program"] != "numpy"
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0]))


@pytest.mark.parametrize("exponent", [(), (24,)], ids=["one exponent", "an exponent per element"])
def test_power_takes_numpys_square_root_only_for_one_exponent(exponent):
    # numpy takes sqrt for an exponent of 0.5 only where its loop reads one exponent for all elements:
    # an array of them goes to pow, which gives inf at -inf and 0.0 at -0.0 (sqrt: nan and -0.0)
    x, y = sg.placeholder((24,), name="x"), sg.placeholder(exponent, name="y")
    h = x ** y
    for _ in range(8):
        h = sg.maximum(h, h)            # a region deep enough to fuse
    X, Y = np.tile([-np.inf, -0.0, 0.0, 4.0], 6), np.full(exponent, 0.5)
    with np.errstate(all="ignore"):
        want = sg.compile(h, inputs=[x, y])(X, Y)
        fused = sg.compile(h, inputs=[x, y], backend="numba")
        got = fused(X, Y)
    assert fused.report().summary["fused_regions"] == 1
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0]))


@pytest.mark.parametrize("power", [2.0, -1.0, 0.5])
def test_one_exponent_rounds_like_numpys_shortcuts(power):
    # numpy's loop, given one exponent, computes x*x for 2, 1/x for -1 and sqrt for 0.5 (not pow)
    x, y = sg.placeholder((4096,), name="x"), sg.placeholder((), name="y")
    h = x ** y
    for _ in range(8):
        h = sg.maximum(h, h)            # a region deep enough to fuse
    rng = np.random.default_rng(3)
    X = np.abs(rng.normal(size=4096)) * 10.0 ** rng.uniform(-5, 5, size=4096)
    want = sg.compile(h, inputs=[x, y])(X, np.array(power))
    fused = sg.compile(h, inputs=[x, y], backend="numba")
    got = fused(X, np.array(power))
    assert fused.report().summary["fused_regions"] == 1
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("function", ["sin", "cos", "tanh"])
def test_vectorized_sin_cos_tanh_stay_within_3_ulp_and_fall_back_to_libm_outside_their_range(function):
    # Blocks whose inputs the polynomials cover run vector_math's kernels (a few ulp from numpy's libm or
    # SIMD bits, and bit for bit what the kernels give in Python); a block holding an infinity, a nan or a
    # huge number is computed with libm's call.
    from staticgrad.lower import vector_math
    kernel = {"sin": lambda v: vector_math.sin_cos_kernel(v, False),
              "cos": lambda v: vector_math.sin_cos_kernel(v, True), "tanh": vector_math.tanh_kernel}[function]

    def after(values):                       # the arithmetic that makes the region deep enough to fuse
        for _ in range(4):
            values = values * 0.5 + 0.25
        return values

    n = 20000
    x = sg.placeholder((n,), name="x")
    y = after(getattr(sg, function)(x))
    rng = np.random.default_rng(11)
    X = np.sign(rng.normal(size=n)) * 10.0 ** rng.uniform(-6, 4.9, n)
    X[:4] = [0.0, -0.0, 5e-324, vector_math.SIN_COS_LIMIT]
    X[-4:] = [np.inf, -np.nan, 1e6, -1e300]          # the last block: libm's calls
    with np.errstate(all="ignore"):
        want = sg.compile(y, inputs=[x])(X)
        fused = sg.compile(y, inputs=[x], backend="numba")
        got = fused(X)
    assert fused.report().summary["fused_regions"] == 1
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(got[-4:], want[-4:])     # nan equals nan here
    np.testing.assert_array_equal(got[:2000], after(np.array([kernel(v) for v in X[:2000].tolist()])))
    pure = np.array([kernel(v) for v in X[:-4].tolist()])
    exact = getattr(np, function)(X[:-4])
    assert np.all(np.abs(pure - exact) <= 3 * np.spacing(np.abs(exact)))


def test_large_regions_with_sin_go_to_the_interpreter_and_arithmetic_to_a_loop_of_its_own():
    # over 70,000 numbers the interpreter's blocks vectorize sin (glibc's scalar call in numpy), a region's
    # own loop does not; arithmetic runs in one pass of a loop of its own instead of numpy's pass per op
    x = sg.placeholder((70000,), name="x")
    arithmetic, with_sin = x * 1.5, sg.sin(x)
    for _ in range(10):
        arithmetic, with_sin = arithmetic * 0.5 + x, with_sin * 0.5 + x
    X = np.random.default_rng(5).normal(size=70000)
    for y, interpreted in ((arithmetic, False), (with_sin, True)):
        fn = sg.compile(y, inputs=[x], backend="numba")
        assert_same([fn(X)], [sg.compile(y, inputs=[x])(X)])
        assert fn.report().summary["fused_regions"] == 1
        assert bool(re.search(r"\w+, = fused\d+\(", fn.source)) == interpreted


def test_the_square_root_shortcut_gives_numpys_nan():
    # x**0.5 of a negative number: the hardware's NaN, its sign included, as numpy's sqrt gives it
    x = sg.placeholder((6,), dtype="float32", name="x")
    h = x
    for _ in range(4):
        h = sg.where(h > 0.0, h * 1.5, h) + 0.0
    y = h ** 0.5 + sg.sqrt(sg.abs(h))
    X = np.array([-2.0, 4.0, -0.0, 1.0, -9.0, 0.25], np.float32)
    with np.errstate(invalid="ignore"):
        want, got = sg.compile(y, inputs=[x])(X), sg.compile(y, inputs=[x], backend="numba")(X)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
