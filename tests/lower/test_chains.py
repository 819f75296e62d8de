"""Product scans: a chain of small multiplications runs as one np.multiply.accumulate, with the chain's bits."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import staticgrad as sg
from staticgrad.lower import chains as scan


def _plans(outs, inputs):
    """The plan under test (numpy, planned, batched) and the reference (one numpy call per node)."""
    fast = sg.compile(outs, inputs=inputs)
    slow = sg.compile(outs, inputs=inputs)
    slow.backend = slow.backend.replace(memory_planning=False)        # no workspace, no batching, no scans
    for fn in (fast, slow):
        fn.backend = fn.backend.replace(scalar=False)     # tiny float64 plans would otherwise run as Python float code
    return fast, slow


def _same(fast, slow, *feeds):
    got, want = fast(*feeds), slow(*feeds)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
        assert np.array_equal(np.signbit(a), np.signbit(b))
    return got


def _chain_grad(size, cycles, dtype="float64"):
    x = sg.placeholder((size,) if size is not None else (), dtype=dtype, name="x", requires_grad=True)
    h = x
    for _ in range(cycles):
        h = sg.tanh(sg.sin(h) * 0.9 + x)
    loss = sg.sum(h)
    return x, [loss] + sg.grad(loss, [x])


def _calls(fn):
    return sum(1 for line in fn.source.splitlines() if " = " in line and "(" in line)


def test_the_reverse_sweep_of_a_chain_is_one_scan_with_the_chains_bits():
    x, outs = _chain_grad(10, 50)
    fast, slow = _plans(outs, [x])
    X = np.random.default_rng(0).uniform(-0.2, 0.2, 10)
    _same(fast, slow, X)
    assert fast.program.stats.get("scans", 0) == 1
    assert "mul_scan_" in fast.source
    # the stacked factors and the scan's rows (151 rows each) are memory the plan holds: the peak counts them
    summary = fast.report().summary
    assert summary["scans"] == 1
    assert summary["peak_bytes"] >= fast.program.memory.workspace_bytes >= 2 * 151 * 10 * 8
    # 4 forward calls per cycle remain; the backward's 150 multiplications are one call
    assert _calls(fast) < 4 * 50 + 20


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", [None, 1, 3, scan.MAX_SIZE])
def test_scan_bits_across_sizes_and_dtypes(size, dtype):
    x, outs = _chain_grad(size, 12, dtype)
    fast, slow = _plans(outs, [x])
    X = np.random.default_rng(1).uniform(-0.2, 0.2, () if size is None else size).astype(dtype)
    _same(fast, slow, X)
    assert fast.program.stats.get("scans", 0) >= 1


def test_rows_wider_than_max_size_are_not_scanned():
    x, outs = _chain_grad(scan.MAX_SIZE + 1, 12)
    fast, slow = _plans(outs, [x])
    _same(fast, slow, np.linspace(-0.2, 0.2, scan.MAX_SIZE + 1))
    assert not fast.program.stats.get("scans", 0)


def _scan_kernels(fn):
    return [v for v in fn.program.namespace.values() if isinstance(v, scan.Scan)]


def test_factors_of_every_kind_and_the_values_nan_inf_and_signed_zero():
    # g is multiplied by a 0-d constant, rows of a batched op's buffer (the cos of every cycle: copied in,
    # one strided copy), a feed (copied in at run time), and values computed once each before the chain
    # (they write their own row of the scan's stack); it starts from a product with a full constant.
    x = sg.placeholder((4,), name="x")
    y = sg.placeholder((4,), name="y")
    own = [sg.sin(y + 1.0), sg.exp(y * 0.1), sg.tanh(y - 0.5)]
    h, states = y, []
    for _ in range(6):
        h = sg.tanh(h * 0.7 + 0.1)
        states.append(h)
    trig = [sg.cos(s) for s in states]
    g = x * sg.constant(np.array([1.5, -2.0, 0.25, 3.0]))
    for k in range(6):
        g = g * 0.5
        g = g * trig[k]
        g = y * g
        if k < 3:
            g = g * own[k]
    fast, slow = _plans([g, g * 2.0], [x, y])
    X = np.array([np.nan, np.inf, -0.0, 1e-300])
    Y = np.array([0.3, -1.2, 0.7, -0.0])
    _same(fast, slow, X, Y)
    kernel, = _scan_kernels(fast)
    assert kernel.copies and kernel.fed
    assert sum(1 for line in fast.source.splitlines() if ("sin_" in line or "exp_" in line) and ", r" in line) == 2
    _same(fast, slow, X * 3, -Y)             # a second call refills every row


def test_a_returned_link_ends_the_chain_and_never_lives_in_a_scan_buffer():
    x = sg.placeholder((5,), name="x")
    factors = [sg.cos(p) for p in [x * float(k) for k in range(12)]]
    g, kept = x, []
    for k in range(12):
        g = g * factors[k]
        if k == 6:
            kept.append(g)
    fast, slow = _plans([g] + kept, [x])
    X1, X2 = np.linspace(-1, 1, 5), np.linspace(2, 3, 5)
    first = _same(fast, slow, X1)
    before = [a.copy() for a in first]
    _same(fast, slow, X2)
    for a, b in zip(first, before):      # a later call must not change what an earlier one returned
        np.testing.assert_array_equal(a, b)
    # links 0-5, then 7-11: the returned link 6 is computed alone
    assert fast.program.stats.get("scans", 0) == 2


def test_a_factor_computed_after_the_chain_starts_ends_the_chain():
    # each factor depends on the previous link: nothing is ready in advance, so there is no scan
    x = sg.placeholder((3,), name="x")
    g = x
    for _ in range(8):
        g = g * sg.sin(g)
    fast, slow = _plans([g], [x])
    _same(fast, slow, np.array([0.5, -0.25, 1.0]))
    assert not fast.program.stats.get("scans", 0)


def test_scans_in_a_training_step_keep_the_updates_exact():
    rng = np.random.default_rng(2)
    w = sg.parameter(rng.uniform(0.5, 1.5, 6), name="w")
    x = sg.placeholder((6,), name="x")
    h = x
    for _ in range(10):
        h = sg.tanh(h * w + x)
    loss = sg.sum(h)
    gw, = sg.grad(loss, [w])
    start = w.value.copy()
    X = rng.uniform(-1, 1, 6)
    new_values = []
    for planned in (True, False):
        w.value = start
        fn = sg.compile(loss, inputs=[x], updates=[(w, w - 0.1 * gw)])
        fn.backend = fn.backend.replace(scalar=False, memory_planning=planned)
        fn(X)
        fn(X)
        new_values.append(w.value.copy())
        if planned:
            assert fn.program.stats.get("scans", 0) >= 1
    np.testing.assert_array_equal(new_values[0], new_values[1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["const0d", "const", "feed", "own", "batched", "fork", "left"]),
                min_size=4, max_size=24),
       st.sampled_from([None, 2, 7]))
def test_random_product_chains_keep_their_bits(kinds, size):
    shape = () if size is None else (size,)
    rng = np.random.default_rng(len(kinds))
    x = sg.placeholder(shape, name="x")
    y = sg.placeholder(shape, name="y")
    ready = [sg.cos(y * float(k + 1)) for k in range(len(kinds))]
    own = [sg.sin(y - float(k)) for k in range(len(kinds))]
    g, side = x, []
    for k, kind in enumerate(kinds):
        if kind == "const0d":
            g = g * float(rng.uniform(-2, 2))
        elif kind == "const":
            g = g * sg.constant(rng.uniform(-2, 2, shape))
        elif kind == "feed":
            g = g * y
        elif kind == "own":
            g = g * own[k]
        elif kind == "batched":
            g = g * ready[k]
        elif kind == "fork":
            side.append(g)
            g = g * 1.25
        else:
            g = ready[k] * g
    total = g
    for s in side:
        total = total + s
    fast, slow = _plans([g, total], [x, y])
    X, Y = rng.uniform(-3, 3, shape), rng.uniform(-3, 3, shape)
    _same(fast, slow, X, Y)


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), unique_by=lambda p: p[0], max_size=30)
       .filter(lambda ps: len({s for _, s in ps}) == len(ps)))
def test_runs_cover_exactly_the_pairs(pairs):
    rows = np.arange(41)
    got = sorted((int(d), int(s)) for ds, ss in scan.runs(pairs) for d, s in zip(rows[ds], rows[ss], strict=True))
    assert got == sorted(pairs)


def test_a_scan_only_where_it_makes_fewer_calls_than_the_chain():
    x = sg.placeholder((3,), name="x")
    feeds = [sg.placeholder((3,), name=f"y{k}") for k in range(5)]
    g = x
    for y in feeds:                      # five factors, each copied in at run time: 6 calls for 5 links
        g = g * y
    fast, slow = _plans([g], [x] + feeds)
    values = [np.linspace(-1, 1, 3) * (k + 1) for k in range(6)]
    _same(fast, slow, *values)
    assert not fast.program.stats.get("scans", 0)
    g = x
    for _ in range(5):                   # the same factor five times: one copy, then the accumulation
        g = g * feeds[0]
    fast, slow = _plans([g], [x, feeds[0]])
    _same(fast, slow, *values[:2])
    assert fast.program.stats.get("scans", 0) == 1


def test_a_rejected_chain_is_walked_once(monkeypatch):
    # every factor is a different view of the feed, copied in at run time: no scan pays, and each link is
    # looked at once (not once per possible start, which would be quadratic in the chain's length)
    x = sg.placeholder((40, 3), name="x")
    views = [x[k] for k in range(40)]
    g = views[0]
    for k in range(1, 40):
        g = g * views[k]
    walked = []
    real = scan._calls
    monkeypatch.setattr(scan, "_calls", lambda rows, *rest: walked.append(len(rows)) or real(rows, *rest))
    fast, slow = _plans([g], [x])
    _same(fast, slow, np.random.default_rng(4).uniform(0.5, 1.5, (40, 3)))
    assert not fast.program.stats.get("scans", 0)
    assert sum(walked) <= 2 * 40


def test_each_plan_has_its_own_scan_buffers_when_batch_sizes_alternate():
    x = sg.placeholder((None,), name="x", requires_grad=True)
    h = x
    for _ in range(10):
        h = sg.tanh(sg.sin(h) * 0.9 + x)
    loss = sg.sum(h)
    outs = [loss] + sg.grad(loss, [x])
    fast, slow = _plans(outs, [x])
    rng = np.random.default_rng(7)
    feeds = [rng.uniform(-0.2, 0.2, n) for n in (3, 8, 3, 8)]
    kept = [_same(fast, slow, X) for X in feeds]
    assert fast.report().summary["plans"] == 2 and fast.program.stats.get("scans", 0) == 1
    for X, got in zip(feeds, kept):          # results of earlier calls are the caller's own
        for a, b in zip(got, slow(X)):
            np.testing.assert_array_equal(a, b)
