"""staticgrad.nn.functional: batch_norm and layer_norm against torch.nn.functional and finite differences."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager
from staticgrad.testing import check_grads

TOL = 1e-10
SHAPES = [(6, 3), (5, 3, 4), (4, 3, 3, 2)]


def _weights(rng, shape):
    """A fixed projection, so each output element's gradient differs."""
    return rng.uniform(0.5, 1.5, size=shape)


def torch_batch_norm(x, proj, w, b, steps, training=True, stats=None):
    """torch's output, the gradient of sum(out * proj) wrt x, w and b, and the running stats after ``steps``."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    C = x.shape[1]
    rm, rv = (torch.zeros(C, dtype=torch.float64), torch.ones(C, dtype=torch.float64)) if stats is None else \
        tuple(torch.tensor(s) for s in stats)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    for _ in range(steps):
        out = F.batch_norm(xt, rm, rv, wt, bt, training=training, momentum=0.2)
    (out * torch.tensor(proj)).sum().backward()
    return [out.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy(), rm.numpy(), rv.numpy()]


def static_batch_norm(x, proj, w, b, steps, training=True, stats=None):
    """The same through one compiled function of an input of unknown batch size, called ``steps`` times."""
    C = x.shape[1]
    rm, rv = (np.zeros(C), np.ones(C)) if stats is None else stats
    rm, rv = (sg.parameter(s, name=n, requires_grad=False) for s, n in ((rm, "rm"), (rv, "rv")))
    xs = sg.placeholder((None,) + x.shape[1:], name="x", requires_grad=True)
    ws, bs = sg.parameter(w, name="w"), sg.parameter(b, name="b")
    out = sg.batch_norm(xs, rm, rv, ws, bs, training=training, momentum=0.2)
    fn = sg.compile([out] + sg.grad(sg.sum(out * proj), [xs, ws, bs]), inputs=[xs])
    for _ in range(steps):
        got = fn(x)
    return list(got) + [rm.value, rv.value]


def eager_batch_norm(x, proj, w, b, steps, training=True, stats=None):
    C = x.shape[1]
    rm, rv = (np.zeros(C), np.ones(C)) if stats is None else (np.array(s) for s in stats)
    rm = eager.tensor(rm)                      # an eager tensor, and a numpy array: both change at once
    xe, we, be = (eager.tensor(a, requires_grad=True) for a in (x, w, b))
    for _ in range(steps):
        out = sg.batch_norm(xe, rm, rv, we, be, training=training, momentum=0.2)
    sg.sum(out * proj).backward()
    return [out.value, xe.grad, we.grad, be.grad, rm.value, rv]


def assert_all_close(got, want, tol=TOL):
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"item {k}")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("run", [static_batch_norm, eager_batch_norm], ids=["static", "eager"])
def test_batch_norm_in_training_matches_torch_with_running_stats_after_three_steps(shape, run, rng):
    x, proj = rng.normal(2.0, 3.0, size=shape), _weights(rng, shape)
    w, b = rng.normal(size=shape[1]), rng.normal(size=shape[1])
    want = torch_batch_norm(x, proj, w, b, steps=3)
    assert_all_close(run(x, proj, w, b, steps=3), want)
    assert not np.allclose(want[4], 0) and not np.allclose(want[5], 1)     # the stats did move


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("run", [static_batch_norm, eager_batch_norm], ids=["static", "eager"])
def test_batch_norm_in_evaluation_reads_the_running_stats_and_leaves_them(shape, run, rng):
    x, proj = rng.normal(size=shape), _weights(rng, shape)
    w, b = rng.normal(size=shape[1]), rng.normal(size=shape[1])
    stats = (rng.normal(size=shape[1]), rng.uniform(0.5, 2.0, size=shape[1]))
    want = torch_batch_norm(x, proj, w, b, steps=2, training=False, stats=stats)
    got = run(x, proj, w, b, steps=2, training=False, stats=stats)
    assert_all_close(got, want)
    np.testing.assert_array_equal(got[4], stats[0])
    np.testing.assert_array_equal(got[5], stats[1])


def test_batch_norm_in_float32_matches_torch(rng):
    torch = pytest.importorskip("torch")
    x = rng.normal(size=(8, 4, 5, 5)).astype(np.float32)
    xs = sg.placeholder((None, 4, 5, 5), dtype="float32")
    w, b = (rng.normal(size=4).astype(np.float32) for _ in range(2))
    out = sg.compile(sg.batch_norm(xs, weight=w, bias=b, training=True))(x)
    want = torch.nn.functional.batch_norm(torch.tensor(x), None, None, torch.tensor(w), torch.tensor(b), training=True)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradients_match_finite_differences_to_second_order(training, rng):
    stats = (rng.normal(size=3), rng.uniform(0.5, 2.0, size=3))

    def f(x, w, b):
        if training:
            return sg.batch_norm(x, weight=w, bias=b, training=True, eps=1e-3)
        return sg.batch_norm(x, *stats, weight=w, bias=b, eps=1e-3)

    assert check_grads(f, [rng.normal(size=(4, 3, 2)), rng.normal(size=3), rng.normal(size=3)], order=2)


@pytest.mark.parametrize("which", ["batch_norm", "layer_norm"])
def test_second_derivatives_match_torch(which, rng):
    torch = pytest.importorskip("torch")
    x, v = rng.normal(size=(5, 3, 2)), rng.normal(size=(5, 3, 2))
    w, b = (rng.normal(size=3 if which == "batch_norm" else (3, 2)) for _ in range(2))
    proj = _weights(rng, x.shape)

    def norm(F, x, w, b):
        if which == "batch_norm":
            return F.batch_norm(x, None, None, w, b, training=True)
        return F.layer_norm(x, (3, 2), w, b)

    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    out = norm(torch.nn.functional, xt, wt, bt)
    gx, gw = torch.autograd.grad((out ** 2 * torch.tensor(proj)).sum(), [xt, wt], create_graph=True)
    want = torch.autograd.grad((gx * torch.tensor(v)).sum() + gw.sum(), [xt, wt, bt], allow_unused=True)
    xs, ws, bs = (sg.placeholder(a.shape, requires_grad=True) for a in (x, w, b))
    out = norm(sg, xs, ws, bs)
    gx, gw = sg.grad(sg.sum(out ** 2 * proj), [xs, ws])
    got = sg.compile(sg.grad(sg.sum(gx * v) + sg.sum(gw), [xs, ws, bs]), inputs=[xs, ws, bs])(x, w, b)
    for a, t in zip(got, want):
        np.testing.assert_allclose(a, np.zeros_like(a) if t is None else t.numpy(), rtol=1e-9, atol=1e-9)


def test_batch_norm_refuses_what_torch_refuses_when_built():
    with pytest.raises(ValueError, match=r"more than 1 value per channel when training, got an input of "
                                         r"shape \(1, 3\) \(at test_functional.py:\d+\)"):
        sg.batch_norm(sg.placeholder((1, 3)), training=True)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        sg.batch_norm(sg.placeholder((1, 3, 1, 1)), training=True)
    sg.batch_norm(sg.placeholder((1, 3, 2)), training=True)              # two values per channel: fine
    with pytest.raises(ValueError, match="running_mean and running_var must be given in evaluation mode"):
        sg.batch_norm(sg.placeholder((4, 3)))
    with pytest.raises(sg.ShapeError, match=r"weight of shape \(4,\) does not fit an input of shape \(None, 3\)"):
        sg.batch_norm(sg.placeholder((None, 3)), weight=np.ones(4), training=True)
    with pytest.raises(sg.ShapeError, match=r"expected an input of shape \(N, C, ...\), got \(3,\)"):
        sg.batch_norm(sg.placeholder((3,)), training=True)
    with pytest.raises(ValueError, match="give both running_mean and running_var, or neither"):
        sg.batch_norm(sg.placeholder((4, 3)), running_mean=sg.parameter(np.zeros(3), requires_grad=False),
                      training=True)


def test_batch_norm_in_a_graph_updates_parameters_only():
    with pytest.raises(TypeError, match="the state it updates must be a parameter"):
        sg.batch_norm(sg.placeholder((4, 3)), np.zeros(3), np.ones(3), training=True)
    with pytest.raises(TypeError, match="must be a parameter, an eager tensor or a writable numpy array"):
        sg.batch_norm(eager.tensor(np.ones((4, 3))), (0, 0, 0), np.ones(3), training=True)


def test_a_batch_norm_in_a_loop_body_is_refused():
    def step(c, x):
        y = sg.batch_norm(x, sg.parameter(np.zeros(3), requires_grad=False),
                          sg.parameter(np.ones(3), requires_grad=False), training=True)
        return c + sg.sum(y), None

    with pytest.raises(sg.StaticgradError, match="running mean inside a scan, cond or while_loop body"):
        sg.scan(step, sg.constant(0.0), sg.placeholder((2, 4, 3)))


# ------------------------------------------------------------------ layer_norm
@pytest.mark.parametrize("shape, normalized", [((4, 5), 5), ((3, 4, 5), (4, 5)), ((2, 3, 4), (4,))], ids=str)
def test_layer_norm_matches_torch_static_and_eager(shape, normalized, rng):
    torch = pytest.importorskip("torch")
    tail = (normalized,) if isinstance(normalized, int) else normalized
    x, proj = rng.normal(1.0, 2.0, size=shape), _weights(rng, shape)
    w, b = rng.normal(size=tail), rng.normal(size=tail)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    out = torch.nn.functional.layer_norm(xt, tail, wt, bt)
    (out * torch.tensor(proj)).sum().backward()
    want = [out.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()]
    xs = sg.placeholder((None,) + shape[1:], requires_grad=True)
    ws, bs = sg.parameter(w), sg.parameter(b)
    y = sg.layer_norm(xs, normalized, ws, bs)
    assert_all_close(sg.compile([y] + sg.grad(sg.sum(y * proj), [xs, ws, bs]), inputs=[xs])(x), want)
    xe, we, be = (eager.tensor(a, requires_grad=True) for a in (x, w, b))
    ye = sg.layer_norm(xe, normalized, we, be)
    sg.sum(ye * proj).backward()
    assert_all_close([ye.value, xe.grad, we.grad, be.grad], want)


def test_layer_norm_gradients_match_finite_differences_to_second_order(rng):
    def f(x, w, b):
        return sg.layer_norm(x, (2, 3), w, b, eps=1e-3)

    assert check_grads(f, [rng.normal(size=(2, 2, 3)), rng.normal(size=(2, 3)), rng.normal(size=(2, 3))], order=2)
    assert check_grads(lambda x: sg.layer_norm(x, 4), [rng.normal(size=(3, 4))], order=2)


def test_layer_norm_refuses_a_shape_that_is_not_the_input_tail():
    with pytest.raises(sg.ShapeError, match=r"normalized_shape=\(3,\) must be the last sizes of the input, got "
                                            r"an input of shape \(3, 4\)"):
        sg.layer_norm(sg.placeholder((3, 4)), 3)
    with pytest.raises(sg.ShapeError, match="must be the last sizes"):
        sg.layer_norm(sg.placeholder((4,)), (2, 4))
    with pytest.raises(sg.ShapeError, match=r"weight of shape \(3,\), expected \(4,\)"):
        sg.layer_norm(sg.placeholder((3, 4)), 4, weight=np.ones(3))
