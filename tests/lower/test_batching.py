"""Horizontal batching: independent small elementwise ops of one kind run as one numpy call."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.lower import batching


def chain(size, cycles, extra_outputs=False):
    x = sg.placeholder((size,), name="x", requires_grad=True)
    h, states = x, []
    for _ in range(cycles):
        h = sg.tanh(sg.sin(h) * 0.9 + x)
        states.append(h)
    loss = sg.sum(h)
    outs = [loss] + sg.grad(loss, [x])
    if extra_outputs:
        outs += [states[2].reshape((2, -1)), states[3]]
    return x, outs


def unbatched(outs, x):
    fn = sg.compile(outs, inputs=[x])
    fn.backend = fn.backend.replace(memory_planning=False)     # no workspace, no batching: one numpy call per node
    return fn


def test_batched_results_are_bit_identical():
    x, outs = chain(10, 8)
    X = np.random.default_rng(0).uniform(-0.2, 0.2, 10)
    fast = sg.compile(outs, inputs=[x])
    got = fast(X)
    for a, b in zip(got, unbatched(outs, x)(X)):
        np.testing.assert_array_equal(a, b)
    assert fast.program.stats.get("batched_groups", 0) >= 3          # square, 1 - square and cos of every cycle
    # a batched op's comment says what its members were: here terms of the gradient
    batched = [line for line in fast.source.splitlines() if ", batched)" in line]
    assert len(batched) >= 3 and all(" [backward] @ " in line for line in batched), batched
    calls = sum(1 for line in fast.source.splitlines() if "= " in line and "(" in line)
    assert calls < len(fast.ir.nodes) - 10


def test_a_batched_plan_holds_the_bytes_of_every_stacked_buffer():
    # each row a batched op or a running sum writes is a view of a stacked buffer the plan keeps for the
    # whole call: its memory plan counts each buffer once, in the workspace and in the peak
    from tests.lower.test_plan import plan_for

    x, outs = chain(10, 12)
    fn = sg.compile(outs, inputs=[x])
    concrete, order, shapes, _ = plan_for(fn, [(10,)])
    batched = batching.batch(concrete, order, dict(shapes))
    bases = [v if v.base is None else v.base for v in batched.fixed_out.values()]
    buffers = {id(b): b.nbytes for b in bases}
    assert len(buffers) >= 4 and batched.nbytes == sum(buffers.values())
    fn(np.zeros(10))
    assert fn.program.memory.peak_planned >= fn.program.memory.workspace_bytes >= batched.nbytes


def test_values_returned_never_live_in_the_shared_buffers():
    x, outs = chain(4, 6, extra_outputs=True)
    fn = sg.compile(outs, inputs=[x])
    X1, X2 = np.full(4, 0.1), np.full(4, -0.15)
    first = [np.array(v, copy=True) for v in fn(X1)]
    kept = fn(X1)
    fn(X2)                                   # a later call must not change what an earlier one returned
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)


def test_large_arrays_are_left_alone():
    x, outs = chain(batching.MAX_SIZE + 1, 6)
    fn = sg.compile(outs, inputs=[x])
    fn(np.zeros(batching.MAX_SIZE + 1))
    assert not fn.program.stats.get("batched_groups", 0)


def test_batching_keeps_training_updates_exact():
    rng = np.random.default_rng(3)
    x = sg.placeholder((None, 3), name="x")
    Ws = [sg.parameter(rng.normal(size=(3, 3)) * 0.5, name=f"W{k}") for k in range(5)]
    h = x
    for W in Ws:
        h = sg.tanh(h @ W)
    loss = sg.mean(sg.square(h))
    grads = sg.grad(loss, Ws)
    updates = [(W, W - 0.1 * g) for W, g in zip(Ws, grads)]
    X = rng.normal(size=(2, 3))
    start = [W.value.copy() for W in Ws]
    fast = sg.compile(loss, inputs=[x], updates=updates)
    fast(X)
    after_fast = [W.value.copy() for W in Ws]
    for W, v in zip(Ws, start):
        W.value = v
    slow = sg.compile(loss, inputs=[x], updates=updates, optimize=False)
    slow.backend = slow.backend.replace(memory_planning=False)
    slow(X)
    for W, v in zip(Ws, after_fast):
        np.testing.assert_array_equal(W.value, v)


def _numpy_plan(outs, x):
    fn = sg.compile(outs, inputs=[x])
    fn.backend = fn.backend.replace(scalar=False)              # tiny plans would otherwise run as Python float code
    return fn


def _running_sum(size, terms, leaf_at=None):
    """sum_k sin(x * k) as a chain of adds; with ``leaf_at``, the placeholder itself is one of the terms."""
    x = sg.placeholder((size,) if size else (), name="x", requires_grad=True)
    total = sg.sin(x)
    for k in range(1, terms):
        total = total + (x if k == leaf_at else sg.sin(x * float(k + 1)))
    return x, total


def test_a_running_sum_is_one_reduction_with_the_chains_bits():
    rng = np.random.default_rng(5)
    for size, terms in ((3, 6), (10, 40), (7, 200)):
        x, total = _running_sum(size, terms)
        fn = _numpy_plan(total, x)
        X = rng.normal(size=size) * 1e3
        got = fn(X)
        assert fn.program.stats.get("running_sums", 0) == 1
        np.testing.assert_array_equal(got, unbatched([total], x)(X)[0])


def test_the_running_sums_of_a_chains_gradient_fold():
    x, outs = chain(10, 12)
    fn = sg.compile(outs, inputs=[x])
    X = np.random.default_rng(6).uniform(-0.2, 0.2, 10)
    got = fn(X)
    assert fn.program.stats.get("running_sums", 0) >= 1
    for a, b in zip(got, unbatched(outs, x)(X)):
        np.testing.assert_array_equal(a, b)


def test_a_leaf_term_splits_the_fold_and_one_number_per_row_does_not_fold():
    x, total = _running_sum(4, 20, leaf_at=10)
    fn = _numpy_plan(total, x)
    X = np.linspace(-1, 1, 4)
    np.testing.assert_array_equal(fn(X), unbatched([total], x)(X)[0])
    assert fn.program.stats.get("running_sums", 0) == 2
    x, total = _running_sum(None, 20)
    fn = _numpy_plan(total, x)
    np.testing.assert_array_equal(fn(0.3), unbatched([total], x)(0.3)[0])
    assert not fn.program.stats.get("running_sums", 0)


def test_slots_freed_where_a_batched_op_writes_its_rows_are_reused():
    # Each cycle's tanh writes into a row of a stacked buffer; what it read (sin * 0.9 + x) dies there,
    # and its slot must serve the next cycle instead of a new slot per cycle.
    X = np.random.default_rng(3).uniform(-0.2, 0.2, 10)
    for cycles in (10, 40):
        x, outs = chain(10, cycles)
        fast = sg.compile(outs, inputs=[x])
        for a, b in zip(fast(X), unbatched(outs, x)(X)):
            np.testing.assert_array_equal(a, b)
        assert fast.program.stats.get("batched_groups", 0) and fast.report().summary["workspace_slots"] <= 4


def test_a_group_whose_first_candidate_cannot_be_stacked_batches_the_rest():
    # The loss is a view of the last state (a sum over one number is a squeeze), so that state may not live
    # in a shared buffer, and neither may the first `1 - o**2` read it stacked; the others still batch.
    x = sg.placeholder((1,), dtype="float32", name="x", requires_grad=True)
    h = x
    for _ in range(12):
        h = sg.tanh(sg.sin(h) * 0.9 + x)
    loss = sg.sum(h)
    outs = [loss] + sg.grad(loss, [x])
    fn = _numpy_plan(outs, x)
    X = np.full(1, 0.1, np.float32)
    for a, b in zip(fn(X), unbatched(outs, x)(X)):
        np.testing.assert_array_equal(a, b)
    subs = [line for line in fn.source.splitlines() if "= sub_" in line]
    assert len(subs) <= 2


def test_a_running_sum_of_negative_zeros_is_negative_zero():
    # numpy's add.reduce starts from +0.0; the chain a + b + ... of -0.0 terms is -0.0 (1/it is -inf)
    x = sg.placeholder((3,), name="x")
    s = sg.sin(x)
    for k in range(2, 12):
        s = s + sg.sin(x * float(k))
    fn = sg.compile(1.0 / s, inputs=[x])
    fn.backend = fn.backend.replace(scalar=False)
    with np.errstate(divide="ignore"):
        got = fn(np.full(3, -0.0))
    assert fn.report().summary["running_sums"] == 1
    np.testing.assert_array_equal(got, np.full(3, -np.inf))


@pytest.mark.parametrize("side", ["W @ h", "h @ W", "h @ h"])
def test_matrix_products_of_many_small_vectors_are_not_batched_as_elementwise(side):
    # np.matmul is a ufunc, but not an elementwise one: W @ [h_1; ...; h_k] is not [W @ h_1; ...]
    W = sg.parameter(np.random.default_rng(2).normal(size=(4, 4)), name="W")
    x = sg.placeholder((4,), name="x")
    hs = [sg.tanh(x * float(i + 1)) for i in range(5)]
    product = {"W @ h": lambda h: W @ h, "h @ W": lambda h: h @ W, "h @ h": lambda h: h @ h}[side]
    loss = sum((sg.sum(sg.square(product(h))) for h in hs), sg.constant(0.0))
    X = np.random.default_rng(3).normal(size=4)
    fast, slow = sg.compile(loss, inputs=[x]), sg.compile(loss, inputs=[x])
    fast.backend = fast.backend.replace(scalar=False)
    slow.backend = slow.backend.replace(scalar=False)
    slow.backend = slow.backend.replace(memory_planning=False)
    assert fast(X) == slow(X)


def test_rows_of_another_shape_are_not_read_as_a_batched_operand():
    # 16 sin of 0-d values are rows of a (16,) buffer; 16 products vector * scalar must not read that
    # buffer as their (16, 16) operand (numpy would broadcast it along the wrong axis).
    n = 16
    x, y = sg.placeholder((n,), name="x"), sg.placeholder((), name="y")
    t = [y * (i + 2.0) for i in range(n)]
    s = [sg.sin(ti) for ti in t]
    a = [x * (i + 3.0) for i in range(n)]
    out = sg.stack([ai * si for ai, si in zip(a, s)])
    fn = sg.compile(out, inputs=[x, y])
    fn.backend = fn.backend.replace(scalar=False)
    X, Y = np.arange(1.0, n + 1), np.array(0.5)
    want = np.stack([X * (i + 3.0) * np.sin(Y * (i + 2.0)) for i in range(n)])
    np.testing.assert_array_equal(fn(X, Y), want)
    assert fn.program.stats.get("batched_groups", 0)


def test_an_operand_dropping_a_member_does_not_break_another_operands_run_of_rows():
    # sin(h_i) batch into rows; the third product reads a parameter, not a cos, so the cos operands lose
    # it, and the sin operands are no longer consecutive rows: that member leaves the group too.
    x = sg.placeholder((3,), name="x")
    P = sg.parameter(np.array([0.5, -1.0, 2.0]), name="P")
    h = [x * (i + 1.0) for i in range(6)]
    a = [sg.sin(hi) for hi in h]
    b = [sg.cos(hi) if i != 2 else P for i, hi in enumerate(h)]
    out = sg.stack([ai * bi for ai, bi in zip(a, b)])
    fn = _numpy_plan(out, x)
    X = np.array([0.1, 0.2, 0.3])
    np.testing.assert_array_equal(fn(X), unbatched([out], x)(X)[0])


def _lanes(seed):
    """Random lanes of vector and scalar ops, some reading x, y or P in place of their lane's values."""
    r = np.random.default_rng(seed)
    k, lanes_n, depth = int(r.choice([2, 3, 5, 8])), int(r.integers(4, 12)), int(r.integers(2, 7))
    x = sg.placeholder((k,), name="x", requires_grad=True)
    y = sg.placeholder((), name="y", requires_grad=True)
    P = sg.parameter(r.normal(size=(k,)), name="P")
    lanes = [[x * (i + 1.5), y * (i + 0.5)] for i in range(lanes_n)]
    for _ in range(depth):
        op = r.choice(["sin", "tanh", "mulvs", "addvv", "mulss", "subvs"])
        for lane in lanes:
            v, s = lane[-2], lane[-1]
            if r.random() < 0.15:
                v = x if r.integers(2) else P
            if r.random() < 0.15:
                s = y
            nv, ns = {"sin": lambda: (sg.sin(v), sg.sin(s)), "tanh": lambda: (sg.tanh(v), sg.tanh(s)),
                      "mulvs": lambda: (v * s, s), "addvv": lambda: (v + lane[0], s + 1.0),
                      "mulss": lambda: (v, s * lane[1]), "subvs": lambda: (v - s, s)}[op]()
            lane += [nv, ns]
    outs = [sg.stack([lane[-2] for lane in lanes]), sg.stack([lane[-1] for lane in lanes])]
    outs += sg.grad(sg.sum(outs[0]) + sg.sum(outs[1]), [x, y, P])
    return x, y, outs, k


@pytest.mark.parametrize("seed", [12, 13, 39, 71, 89] + list(range(100, 112)))
def test_random_lanes_batch_to_the_unbatched_results(seed):
    x, y, outs, k = _lanes(seed)
    fast = sg.compile(outs, inputs=[x, y])
    fast.backend = fast.backend.replace(scalar=False)
    slow = sg.compile(outs, inputs=[x, y])
    slow.backend = slow.backend.replace(scalar=False, memory_planning=False)
    r = np.random.default_rng(seed + 5)
    X, Y = r.normal(size=k), np.array(r.normal())
    for a, b in zip(fast(X, Y), slow(X, Y)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_two_running_sums_that_meet_in_one_add_are_summed_once_each():
    # a = s1 + ... + s5 and b = c1 + ... + c5, then a + b: both chains continued into that add, so each
    # fold took it, and the other chain's last add as a row (the result was 30% off, no error)
    x = sg.placeholder((3,), name="x")
    a = sg.sin(x * 1.0) + sg.sin(x * 2.0) + sg.sin(x * 3.0) + sg.sin(x * 4.0) + sg.sin(x * 5.0)
    b = sg.cos(x * 1.0) + sg.cos(x * 2.0) + sg.cos(x * 3.0) + sg.cos(x * 4.0) + sg.cos(x * 5.0)
    fn = sg.compile(a + b, inputs=[x])
    fn.backend = fn.backend.replace(scalar=False)
    X = np.array([0.1, 0.2, 0.3])
    want = sum(np.sin(X * k) for k in range(1, 6)) + sum(np.cos(X * k) for k in range(1, 6))
    np.testing.assert_array_equal(fn(X), want)
    assert fn.report()["running_sums"] == 2          # each chain is still one reduction


def test_values_laid_out_like_a_transpose_stay_out_of_batched_rows():
    # tanh(x.T) is laid out like x.T in numpy; copied into a C-ordered row of a batched buffer its later
    # sum added in another order (the loss differed in the last bit on 89 of 200 feeds)
    def build(planned):
        x = sg.placeholder((3, 3), name="x", requires_grad=True)
        h = sg.tanh(x.T)
        for _ in range(3):
            h = sg.tanh(h)
        y = sg.sum(h)
        fn = sg.compile([y, sg.grad(y, [x])[0]], inputs=[x])
        fn.backend = fn.backend.replace(scalar=False, memory_planning=planned)
        return fn
    planned, plain = build(True), build(False)
    rng = np.random.default_rng(0)
    for _ in range(60):
        X = rng.normal(size=(3, 3)) * 2
        assert planned(X)[0] == plain(X)[0]
