"""fn.save_source: a plan written as a module that runs on its own, its arrays in an .npz file beside it."""
import importlib.util
import itertools
import zipfile

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import nn, optim
from staticgrad.function import READING
from staticgrad.lower import Backend

_names = itertools.count()


def saved(fn, tmp_path, stem="step"):
    """``fn`` saved as ``stem``.py, imported by path (under a name of its own: no module cache between tests)."""
    path = fn.save_source(str(tmp_path / f"{stem}.py"))
    spec = importlib.util.spec_from_file_location(f"saved_{stem}_{next(_names)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def same_steps(fn, module, feeds, calls=3, exact=True):
    """Call both ``calls`` times: the same outputs, and the same parameters after each call."""
    check = np.testing.assert_array_equal if exact else lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12)
    for _ in range(calls):
        want = fn(*feeds)
        got = module.step(*feeds)
        want = want if isinstance(want, list) else [want]
        assert len(got) == len(want)
        for a, b in zip(want, got):
            check(a, b)
        for p, q in zip(fn.parameters(), module.P):
            check(p.value, q._value)


def mlp_step(rng, backend="numpy"):
    x, t = sg.placeholder((None, 2), name="x"), sg.placeholder((None,), name="t")
    model = nn.MLP([2, 8, 1], activation="tanh", seed=0)
    loss = nn.binary_cross_entropy_with_logits(sg.reshape(model(x), (-1,)), t).named("loss")
    step = sg.compile(loss, inputs=[x, t], updates=optim.Adam(model, lr=0.01).updates(loss), backend=backend)
    return step, [rng.normal(size=(32, 2)), (rng.random(32) > 0.5) * 1.0]


def test_a_saved_training_step_runs_on_its_own_as_the_function_does(tmp_path):
    rng = np.random.default_rng(0)
    step, feeds = mlp_step(rng)
    step(*feeds)
    module = saved(step, tmp_path)
    outputs, new_values = module.run(*feeds)          # (no update: the next call starts from the same values)
    assert [p.name for p in module.P][:4] == ["mlp.0.weight", "mlp.0.bias", "mlp.1.weight", "mlp.1.bias"]
    assert len(outputs) == 1 and len(new_values) == len(step.ir.updates)
    same_steps(step, module, feeds)
    assert "run takes the feeds (x float64 (32, 2), t float64 (32,)" in module.__doc__
    assert "outputs (loss)" in module.__doc__ and "step.npz beside this file" in module.__doc__


def test_the_npz_beside_it_holds_arrays_only(tmp_path):
    rng = np.random.default_rng(1)
    step, feeds = mlp_step(rng)
    step(*feeds)
    step.save_source(str(tmp_path / "step.py"))
    with np.load(tmp_path / "step.npz", allow_pickle=False) as arrays:
        np.testing.assert_array_equal(arrays["P0"], step.parameters()[0].value)
    with zipfile.ZipFile(tmp_path / "step.npz") as archive:
        assert all(name.endswith(".npy") for name in archive.namelist())


def _rnn(checkpoint):
    rng = np.random.default_rng(2)
    xs = sg.placeholder((6, 3, 4), name="xs")
    W = sg.parameter(0.5 * rng.normal(size=(4, 4)), name="W")

    def body(h, x):
        h = sg.tanh(h @ W + x)
        return h, h
    _, hs = sg.scan(body, sg.constant(np.zeros((3, 4))), xs, checkpoint=checkpoint)
    loss = sg.mean(hs ** 2).named("loss")
    fn = sg.compile([loss] + sg.grad(loss, [W]), inputs=[xs], updates=optim.SGD([W], lr=0.1).updates(loss))
    return fn, [rng.normal(size=(6, 3, 4))]


@pytest.mark.parametrize("checkpoint", [None, 2])
def test_a_saved_scan_runs_its_bodies_as_functions_of_the_module(tmp_path, checkpoint):
    fn, feeds = _rnn(checkpoint)
    fn(*feeds)
    module = saved(fn, tmp_path, "rnn")
    same_steps(fn, module, feeds)
    text = (tmp_path / "rnn.py").read_text()
    assert "def scan_" in text and "restore(ScanRunner" in text
    assert ("in zip(range(T), " in text) == (checkpoint is None)      # (else the runner loops over the body)


def test_a_batched_plan_keeps_the_arrays_that_share_memory_shared(tmp_path):
    rng = np.random.default_rng(3)
    x = sg.placeholder((3,), name="x")
    ps = [sg.parameter(rng.normal(size=3), name=f"p{k}") for k in range(12)]
    loss = sg.sum(sum((sg.sin(p * x) for p in ps), sg.constant(np.zeros(3))) ** 2)
    fn = sg.compile(loss, inputs=[x], updates=optim.SGD(ps, lr=0.01).updates(loss),
                    backend=Backend("numpy", scalar=False))
    feeds = [rng.normal(size=3)]
    fn(*feeds)
    assert fn.report().summary.get("batched_groups")       # rows of stacked buffers: views written through
    module = saved(fn, tmp_path, "batched")
    assert "np.ndarray(" in (tmp_path / "batched.py").read_text()
    same_steps(fn, module, feeds)


def test_a_branch_and_a_while_loop_save_and_run(tmp_path):
    p, a = sg.placeholder((), name="p"), sg.placeholder((3,), name="a", requires_grad=True)
    c = sg.cond(p > 0, lambda a: a * 2.0, lambda a: a - 1.0, a)
    _, v = sg.while_loop(lambda s: s[0] < 4, lambda s: (s[0] + 1, s[1] * 1.5), (sg.constant(0), sg.sum(c)))
    fn = sg.compile([v, sg.grad(sg.sum(c), a)], inputs=[p, a])
    for pred in (1.0, -1.0):
        feeds = [np.float64(pred), np.arange(3.0)]
        fn(*feeds)
        same_steps(fn, saved(fn, tmp_path, "branch"), feeds, calls=1)


def test_what_cannot_be_saved_is_refused_by_name(tmp_path):
    x = sg.placeholder((), name="x", requires_grad=True)
    _, v = sg.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * x), (sg.constant(0), sg.constant(1.0)))
    fn = sg.compile([v, sg.grad(v, x)], inputs=[x])
    fn(np.float64(1.5))
    with pytest.raises(sg.StaticgradError, match=r"save_source: reverse_tape_\w+ is a loop body built at each call"):
        fn.save_source(str(tmp_path / "tape.py"))
    assert not list(tmp_path.iterdir())                    # nothing half written
    y = sg.placeholder((None, 2), name="y")
    with pytest.raises(sg.FeedError, match="placeholder 'y' has shape \\(None, 2\\).*call the function once first"):
        sg.compile(y * 2.0, inputs=[y]).save_source(str(tmp_path / "generic.py"))


def test_before_any_call_the_static_shapes_are_saved(tmp_path):
    x = sg.placeholder((2, 3), name="x")
    W = sg.parameter(np.arange(6.0).reshape(3, 2), name="W")
    fn = sg.compile(sg.tanh(x @ W), inputs=[x])
    module = saved(fn, tmp_path, "static")
    X = np.linspace(-1, 1, 6).reshape(2, 3)
    np.testing.assert_allclose(module.run(X)[0][0], fn(X), rtol=1e-12)


def test_fn_source_says_it_is_for_reading_and_how_to_get_a_runnable_module():
    x = sg.placeholder((2,), name="x")
    fn = sg.compile(x * 2.0, inputs=[x])
    assert fn.source.startswith(READING) and "fn.save_source('name.py')" in READING
    fn(np.ones(2))
    assert fn.source == READING + fn.program.source


@pytest.mark.slow          # (numba compiles its interpreter: seconds)
def test_a_numba_function_saves_its_numpy_plan(tmp_path):
    pytest.importorskip("numba")
    rng = np.random.default_rng(4)
    step, feeds = mlp_step(rng, backend="numba")
    step(*feeds)
    same_steps(step, saved(step, tmp_path, "numba_step"), feeds, exact=False)
