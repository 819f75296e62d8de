"""Rolling huge repeated stretches into scans (staticgrad/loops/reroll.py), tried at small sizes: the
thresholds are lowered for each test, and every result is compared with the same graph left unrolled."""
import os

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.graph import ancestors
from staticgrad.loops import reroll
from staticgrad.testing import check_grads

R = np.random.default_rng(11)
STEPS = 40
# Random cells tried (a longer run by hand: STATICGRAD_REROLL_SEEDS=300, all passed on 2026-12-03)
SEEDS = int(os.environ.get("STATICGRAD_REROLL_SEEDS", 12))


@pytest.fixture
def small(monkeypatch):
    """Roll graphs of 50 op nodes and stretches of 10 copies."""
    monkeypatch.setattr(reroll, "MIN_NODES", 50)
    monkeypatch.setattr(reroll, "MIN_STEPS", 10)


def rand(*shape):
    return R.uniform(-0.5, 0.5, shape)


def start(requires_grad=True):
    """A placeholder x0 of 3 numbers and two constants c, d for ``chain``."""
    x0 = sg.placeholder((3,), name="x0", requires_grad=requires_grad)
    return x0, sg.constant(np.full(3, 0.9)), sg.constant(np.full(3, 0.1))


def chain(x, c, d, steps=STEPS):
    for _ in range(steps):
        x = sg.tanh(x * c + d)
    return x


def ops_of(fn):
    return fn.ir.op_counts()


def all_close(got, want, rtol):
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol)


def run_both(build, feeds, monkeypatch):
    """(outputs rolled, outputs unrolled, the rolled function) of ``build()`` -> (outputs, inputs); the
    rolled one must hold a scan."""
    outs, inputs = build()
    rolled = sg.compile(outs, inputs=inputs)
    assert "scan" in ops_of(rolled)
    monkeypatch.setattr(reroll, "MIN_NODES", 10**9)
    outs, inputs = build()
    plain = sg.compile(outs, inputs=inputs)
    assert "scan" not in ops_of(plain)
    return rolled(*feeds), plain(*feeds), rolled


def tanh_chain_and_grads():
    x0 = sg.placeholder((10,), name="x0", requires_grad=True)
    c, d = sg.parameter(np.linspace(0.5, 1.0, 10), name="c"), sg.parameter(np.linspace(-0.1, 0.1, 10), name="d")
    loss = sg.sum(chain(x0, c, d))
    return [loss] + sg.grad(loss, [x0, c, d]), [x0]


def test_a_chain_becomes_one_scan_and_its_values_keep_their_bits(small, monkeypatch):
    x = rand(10)
    rolled, plain, fn = run_both(tanh_chain_and_grads, [x], monkeypatch)
    assert ops_of(fn)["scan"] == 2                  # the forward loop (grad's and compile's are one) and its reverse
    assert ops_of(fn)["tanh"] < 5
    assert rolled[0] == plain[0]                    # the same ops in the same order
    np.testing.assert_array_equal(rolled[1], plain[1])
    for a, b in zip(rolled[2:], plain[2:]):         # (summed in another order: last bits may differ)
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_below_the_thresholds_nothing_changes():
    outs, inputs = tanh_chain_and_grads()
    assert "scan" not in ops_of(sg.compile(outs, inputs=inputs))


def test_the_line_is_drawn_on_forward_nodes_so_compile_leaves_an_unrolled_gradient_alone(monkeypatch):
    monkeypatch.setattr(reroll, "MIN_STEPS", 10)
    monkeypatch.setattr(reroll, "MIN_NODES", 3 * STEPS + 10)      # above the forward chain, below it with grads
    outs, inputs = tanh_chain_and_grads()
    assert sum(1 for t in ancestors(outs).values() if t.inputs) > reroll.MIN_NODES
    searched = []
    monkeypatch.setattr(reroll, "_signatures", lambda *args: searched.append(1))
    assert "scan" not in ops_of(sg.compile(outs, inputs=inputs))
    assert not searched      # (the 100,000-op chain with its gradients: 2.6 s of search at 370,000 nodes, for nothing)


def test_gradients_through_a_rolled_chain_match_finite_differences_to_second_order(small):
    check_grads(lambda x, c, d: chain(x, c, d, 30), [rand(3), 0.5 + rand(3), rand(3)], order=2)


def test_constants_equal_in_every_copy_roll_and_weights_are_read_every_step(small, monkeypatch):
    W = sg.parameter(rand(4, 4), name="W")

    def build():
        h = sg.placeholder((2, 4), name="h0", requires_grad=True)
        h0 = h
        for _ in range(STEPS):
            h = sg.tanh(h @ W) * 0.5 + 1.0       # (new constants every copy, equal by value)
        loss = sg.sum(h * h)
        return [loss] + sg.grad(loss, [h0, W]), [h0]

    rolled, plain, fn = run_both(build, [rand(2, 4)], monkeypatch)
    all_close(rolled, plain, 1e-12)


def test_a_value_read_in_the_middle_cuts_the_stretch_there(small, monkeypatch):
    def build():
        x0, c, d = start()
        mid = chain(x0, c, d, 25)
        end = chain(mid, c, d, 25)
        loss = sg.sum(end) + 2.0 * sg.sum(mid * mid)
        return [loss, sg.grad(loss, x0)], [x0]

    rolled, plain, fn = run_both(build, [rand(3)], monkeypatch)
    np.testing.assert_allclose(rolled[0], plain[0], rtol=1e-14)
    np.testing.assert_allclose(rolled[1], plain[1], rtol=1e-12)


def test_a_gradient_asked_for_inside_a_chain_is_the_unrolled_one(small, monkeypatch):
    def build():
        x0, c, d = start(requires_grad=False)
        mid = chain(x0, c, d, 20)
        loss = sg.sum(chain(mid, c, d, 20))
        return [loss, sg.grad(loss, mid)], [x0]

    rolled, plain, fn = run_both(build, [rand(3)], monkeypatch)
    assert np.all(rolled[1] != 0)
    np.testing.assert_allclose(rolled[1], plain[1], rtol=1e-12)


def test_an_output_inside_a_chain_stays_an_output(small, monkeypatch):
    def build():
        x0 = sg.placeholder((3,), name="x0")
        c = sg.constant(np.full(3, 0.9))
        mid = chain(x0, c, c, 30)
        return [sg.sum(chain(mid, c, c, 30)), mid], [x0]

    rolled, plain, fn = run_both(build, [rand(3)], monkeypatch)
    assert ops_of(fn)["scan"] == 2
    for a, b in zip(rolled, plain):
        np.testing.assert_array_equal(a, b)


def test_two_chains_built_in_one_loop_roll_into_one_scan_with_two_carries(small, monkeypatch):
    def build():
        a0 = sg.placeholder((2,), name="a0", requires_grad=True)
        b0 = sg.placeholder((2,), name="b0", requires_grad=True)
        a, b = a0, b0
        for _ in range(STEPS):
            a, b = sg.sin(a) + 0.1 * b, sg.cos(b) * 0.9
        loss = sg.sum(a * b)
        return [loss] + sg.grad(loss, [a0, b0]), [a0, b0]

    rolled, plain, fn = run_both(build, [rand(2), rand(2)], monkeypatch)
    assert ops_of(fn)["scan"] == 2
    all_close(rolled, plain, 1e-12)


def test_training_updates_through_a_rolled_chain(small, monkeypatch):
    def build():
        x0 = sg.placeholder((4,), name="x0")
        c = sg.parameter(np.full(4, 0.8), name="c")
        loss = sg.sum(chain(x0, c, 0.05) ** 2)
        return ([loss], [x0]), [(c, c - 0.1 * sg.grad(loss, c))], c

    values = []
    for limit in (50, 10**9):
        monkeypatch.setattr(reroll, "MIN_NODES", limit)
        (outs, inputs), updates, c = build()
        fn = sg.compile(outs, inputs=inputs, updates=updates)
        assert ("scan" in ops_of(fn)) == (limit == 50)
        x = np.linspace(-0.5, 0.5, 4)
        values.append([fn(x)[0], fn(x)[0], c.value.copy()])
    for a, b in zip(*values):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_random_draws_are_never_rolled(small):
    key = sg.random.key(0)
    x = sg.placeholder((3,), name="x")
    for _ in range(STEPS):
        x = x + sg.random.normal((3,), key=key)
    fn = sg.compile(sg.sum(x))
    assert "scan" not in ops_of(fn)
    assert len({float(fn(x=np.zeros(3))) for _ in range(3)}) == 3      # (each call draws anew)


def test_a_rolled_function_saves_and_loads(small, tmp_path):
    outs, inputs = tanh_chain_and_grads()
    fn = sg.compile(outs, inputs=inputs)
    path = sg.save(fn, tmp_path / "rolled.sgz")
    x = rand(10)
    for a, b in zip(sg.load(path)(x), fn(x)):
        np.testing.assert_array_equal(a, b)


def test_the_loop_keeps_the_users_line_and_says_it_was_rolled(small):
    outs, inputs = tanh_chain_and_grads()
    fn = sg.compile(outs, inputs=inputs)
    scans = [n for n in fn.ir.nodes.values() if n.op == "scan"]
    assert any(n.attrs["body"].name == "rolled stretch of 3 ops" for n in scans)
    assert fn.report().summary["rolled_loops"] == 1
    assert "rolled_loops" not in sg.compile(sg.sum(rand(3) * sg.placeholder((3,)))).report().summary
    assert all("test_reroll.py" in n.source for n in scans)


def test_a_value_of_the_last_copy_that_no_copy_carries_comes_out_as_a_carry_of_its_own(small, monkeypatch):
    def build():
        x0 = sg.placeholder((3,), name="x0", requires_grad=True)
        x = sg.sin(x0)
        for _ in range(STEPS):
            y = x * 0.9                     # (read by the next line only: no copy carries it)
            x = sg.sin(y)
        loss = sg.sum(x) + sg.sum(y * y)
        return [loss, sg.grad(loss, x0)], [x0]

    outs, _ = build()
    (loss,), _ = reroll.roll([outs[0]], ancestors([outs[0]]))
    scans = [t for t in ancestors([loss]).values() if t.op == "scan"]
    assert [t.attrs["n_carry"] for t in scans] == [2]
    rolled, plain, fn = run_both(build, [rand(3)], monkeypatch)
    all_close(rolled, plain, 1e-13)


def test_two_stretches_one_after_the_other_become_two_loops_and_nothing_stays_unrolled(small, monkeypatch):
    def build():
        x0, c, d = start()
        x = chain(x0, c, d, 30)
        bridge = x * 2.0                    # (between the two: read by the second's first copy)
        for _ in range(60):                 # (the first 21 read the bridge less than 64 nodes back)
            x = sg.sin(x) * 0.5 + bridge
        loss = sg.sum(x)
        return [loss, sg.grad(loss, x0)], [x0]

    rolled, plain, fn = run_both(build, [rand(3)], monkeypatch)
    assert ops_of(fn)["scan"] == 4 and ops_of(fn).get("tanh", 0) + ops_of(fn).get("sin", 0) < 6, ops_of(fn)
    all_close(rolled, plain, 1e-13)


def random_cell(rng, width):
    """A step over ``width`` state values, the same ops every copy, drawn once by ``rng``: each new value
    mixes two old ones (or a fresh intermediate) by a random op, scales by a weight, and squashes."""
    picks = [(int(rng.integers(width)), int(rng.integers(width)), str(rng.choice(["add", "mul", "sub", "max"])),
              str(rng.choice(["tanh", "sin", "none"])), float(rng.uniform(0.3, 0.9))) for _ in range(width)]

    def cell(state, weights):
        new = []
        for (a, b, op, squash, scale), w in zip(picks, weights):
            x, y = state[a], (new[-1] if new and b % 2 else state[b])
            mixed = {"add": x + y, "mul": x * y, "sub": x - y, "max": sg.maximum(x, y)}[op]
            out = mixed * w * scale
            new.append(out if squash == "none" else getattr(sg, squash)(out))
        return new
    return cell


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_cells_roll_to_the_values_and_gradients_of_the_unrolled_graph(small, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    width, steps, read_mid = int(rng.integers(1, 4)), int(rng.integers(30, 50)), bool(rng.integers(2))
    cell = random_cell(rng, width)
    starts = [rand(2) for _ in range(width)]
    weights = [0.5 + rand(2) for _ in range(width)]

    def build():
        xs = [sg.placeholder((2,), name=f"x{k}", requires_grad=True) for k in range(width)]
        ws = [sg.parameter(w, name=f"w{k}") for k, w in enumerate(weights)]
        state, seen = list(xs), []
        for step in range(steps):
            state = cell(state, ws)
            if step == steps // 2:
                seen = state[:1] if read_mid else []
        loss = sum(sg.sum(s * s) for s in state + seen)
        return [loss] + sg.grad(loss, xs + ws), xs

    rolled, plain, _ = run_both(build, starts, monkeypatch)
    all_close(rolled, plain, 1e-11)


def test_a_batch_norm_after_a_rolled_stretch_still_moves_its_running_statistics(small, monkeypatch):
    def build():
        x0 = sg.placeholder((4, 2), name="x0")
        mean = sg.parameter(np.zeros(2), name="mean", requires_grad=False)
        var = sg.parameter(np.ones(2), name="var", requires_grad=False)
        x = chain(x0, 0.9, 0.1)
        return [sg.sum(sg.batch_norm(x, mean, var, training=True))], [x0], mean

    x = np.linspace(-0.5, 0.5, 8).reshape(4, 2)
    means = []
    for limit in (50, 10**9):
        monkeypatch.setattr(reroll, "MIN_NODES", limit)
        outs, inputs, mean = build()
        fn = sg.compile(outs, inputs=inputs)
        assert ("scan" in ops_of(fn)) == (limit == 50)
        fn(x)
        means.append(mean.value.copy())
    assert np.any(means[0] != 0)
    all_close(means[0:1], means[1:2], 1e-13)
