"""Define-by-run mode: values, gradients from the same VJP rules as sg.grad, tape walking, the same model
function in both modes, and errors that read as in static mode."""
from __future__ import annotations

import os
import warnings
import zlib

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager
from staticgrad.eager import EagerTensor
from staticgrad.testing import _scalarize
from tests.op_specs import OP_SPECS

THIS_FILE = os.path.basename(__file__)
GRAD_SPECS = [s for s in OP_SPECS if s.grad]


def sample(spec):
    return spec.sample(np.random.default_rng(zlib.crc32(spec.id.encode())))


def leaves(arrays):
    return [eager.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]


def static_value_and_grads(spec, arrays):
    """The compiled value of the spec's scalarized output and its gradients w.r.t. the float inputs."""
    phs = [sg.placeholder(a.shape, dtype=a.dtype, requires_grad=a.dtype.kind == "f") for a in arrays]
    y = _scalarize(spec.build(*phs), np.random.default_rng(1))
    wrt = [p for p in phs if p.requires_grad]
    return sg.compile([y] + sg.grad(y, wrt), inputs=phs)(*arrays)


def eager_scalarized(spec, xs):
    out = spec.build(*xs)
    assert isinstance(out, EagerTensor), f"{spec.id}: an eager input gave a {type(out).__name__}"
    return out, _scalarize(out, np.random.default_rng(1))


# ------------------------------------------------------------------ every op, against its spec and sg.grad
@pytest.mark.parametrize("spec", OP_SPECS, ids=lambda s: s.id)
def test_forward_matches_the_reference(spec):
    arrays = sample(spec)
    out = spec.build(*[eager.tensor(a) for a in arrays])
    expected = np.asarray(spec.reference(*arrays))
    assert out.shape == expected.shape
    assert out.dtype == expected.dtype or spec.op in ("size",)
    np.testing.assert_allclose(out.value, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", GRAD_SPECS, ids=lambda s: s.id)
def test_gradients_match_static_mode(spec):
    arrays = sample(spec)
    xs = leaves(arrays)
    _, y = eager_scalarized(spec, xs)
    y.backward()
    static = static_value_and_grads(spec, arrays)
    np.testing.assert_allclose(y.value, static[0], rtol=1e-12, atol=1e-12)
    for x, g in zip([x for x in xs if x.requires_grad], static[1:]):
        if x.grad is None:
            # No differentiable path reached x (as in PyTorch); sg.grad says zeros.
            assert not np.any(g), f"{spec.id}: eager gave no gradient, static gave {g}"
            continue
        assert isinstance(x.grad, np.ndarray) and x.grad.shape == x.shape and x.grad.dtype == x.dtype
        np.testing.assert_allclose(x.grad, g, rtol=1e-9, atol=1e-12)


def _forking_model(x, W, b):
    # x, W, b and h each feed several ops: their gradients are sums of contributions at forks
    h = sg.tanh(x @ W + b)
    y = sg.sum(h * h) * 3.0 + sg.sum(sg.exp(h) * x[:, :1]) + sg.sum(h * W[0])
    return y + sg.sum(sg.sin(h) * b) * 1e-3 + sg.mean(x @ W * 7.1)


@pytest.mark.parametrize("optimize", [False, True])
def test_gradients_at_forks_have_the_bits_of_static_mode(optimize):
    # both sweeps visit nodes in graph.post_order's reverse, so a fork adds its contributions in the same
    # order: the same bits, not only close values (networkx's order gave 1-2 ulp on about half of these)
    rng = np.random.default_rng(0)
    for _ in range(15):
        X = rng.normal(size=(5, 3)) * 10.0 ** rng.uniform(-3, 3)
        Wv, bv = rng.normal(size=(3, 3)), rng.normal(size=3)
        x = sg.placeholder((5, 3), name="x")
        W, b = sg.parameter(Wv.copy(), name="W"), sg.parameter(bv.copy(), name="b")
        fn = sg.compile(sg.grad(_forking_model(x, W, b), [W, b]), inputs=[x], optimize=optimize)
        fn.backend = fn.backend.replace(scalar=False)     # (scalar code's matrix products round as BLAS's may not)
        We, be = eager.tensor(Wv, requires_grad=True), eager.tensor(bv, requires_grad=True)
        _forking_model(eager.tensor(X), We, be).backward()
        for got, want in zip((We.grad, be.grad), fn(X)):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("spec", [s for s in GRAD_SPECS if s.order >= 2], ids=lambda s: s.id)
def test_second_order_matches_static_mode(spec):
    """create_graph=True: d/dx (grad . v) eagerly equals sg.grad of sg.grad."""
    arrays = sample(spec)
    float_arrays = [a for a in arrays if a.dtype.kind == "f"]
    vs = [np.random.default_rng(2).uniform(0.5, 1.5, a.shape) for a in float_arrays]

    phs = [sg.placeholder(a.shape, dtype=a.dtype, requires_grad=a.dtype.kind == "f") for a in arrays]
    y = _scalarize(spec.build(*phs), np.random.default_rng(1))
    wrt = [p for p in phs if p.requires_grad]
    gs = sg.grad(y, wrt)
    hv = sum((sg.sum(g * v) for g, v in zip(gs, vs)), sg.constant(0.0))
    expected = sg.compile(sg.grad(hv, wrt), inputs=phs)(*arrays)

    xs = leaves(arrays)
    _, ye = eager_scalarized(spec, xs)
    wrt_e = [x for x in xs if x.requires_grad]
    ye.backward(create_graph=True)
    grads = [x.grad for x in wrt_e]
    eager.zero_grad(wrt_e)
    # An input no differentiable path reaches has no gradient (None): it adds nothing to grad . v.
    hve = sum((sg.sum(g * v) for g, v in zip(grads, vs) if g is not None), 0.0)
    if not isinstance(hve, EagerTensor) or not hve.requires_grad:
        # The gradient does not depend on the inputs (a linear op): the second derivative is zero.
        assert all(np.all(e == 0) for e in expected)
        return
    hve.backward()
    for x, e in zip(wrt_e, expected):
        got = np.zeros(x.shape) if x.grad is None else x.grad
        np.testing.assert_allclose(got, e, rtol=1e-8, atol=1e-10)


# ------------------------------------------------------------------ the worked examples
def test_worked_example_1_polynomial():
    u, v = eager.tensor(5.0, requires_grad=True), eager.tensor(7.0, requires_grad=True)
    t1 = u * u
    y = 2 * (t1 * u) + 3 * (u * v) + 4 * (v * v) + 5
    y.backward()
    assert y.item() == 556 and u.grad == 171 and v.grad == 71


def test_worked_example_2_sigmoid_chain():
    x1, x2 = eager.tensor(2.0), eager.tensor(3.0)
    u, v, d, w, b = (eager.tensor(c, requires_grad=True) for c in (.4, .5, .6, .7, .8))
    y = sg.sigmoid(w * sg.sigmoid(u * x1 + v * x2 + d) + b)
    y.backward()
    assert x1.grad is None and x2.grad is None
    np.testing.assert_allclose([u.grad, v.grad, d.grad, w.grad, b.grad],
                               [0.010562, 0.015843, 0.005281, 0.144655, 0.152615], atol=5e-7)
    assert y.item() == pytest.approx(0.8121, abs=5e-5)


def test_worked_example_4_relu_square():
    a, b, c = (eager.tensor(v, requires_grad=True) for v in (2.0, -3.0, 10.0))
    loss = sg.relu(a * b + c) ** 2
    loss.backward()
    assert (loss.item(), a.grad, b.grad, c.grad) == (16.0, -24.0, 16.0, 8.0)


def test_worked_example_6_tanh_neuron_both_ways():
    x1, x2 = eager.tensor(2.0, requires_grad=True), eager.tensor(0.0, requires_grad=True)
    w1, w2 = eager.tensor(-3.0, requires_grad=True), eager.tensor(1.0, requires_grad=True)
    b = eager.tensor(6.8813735870195432, requires_grad=True)
    n = x1 * w1 + x2 * w2 + b
    e = sg.exp(2 * n)
    o = (e - 1) / (e + 1)      # e forks into numerator and denominator
    o.backward()
    assert o.item() == pytest.approx(0.7071, abs=1e-4)
    np.testing.assert_allclose([x1.grad, w1.grad, x2.grad, w2.grad], [-1.5, 1.0, 0.5, 0.0], atol=1e-9)


# ------------------------------------------------------------------ the same model in both modes
def mlp(x, t, W1, b1, W2, b2, W3, b3):
    h = sg.tanh(x @ W1 + b1)
    h = sg.relu(h @ W2 + b2)
    return sg.softmax_cross_entropy(h @ W3 + b3, t) + 1e-3 * sg.sum(W1 * W1)


def mlp_params(rng):
    sizes = [(4, 16), (16, 16), (16, 3)]
    out = []
    for m, n in sizes:
        out += [rng.normal(scale=np.sqrt(1.0 / m), size=(m, n)), np.zeros(n)]
    return out


def test_the_same_mlp_trains_identically_in_both_modes(rng):
    X = rng.normal(size=(200, 4))
    T = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0.5).astype(np.int64)
    init = mlp_params(rng)
    lr, batches = 0.1, [np.arange(k * 20, k * 20 + 20) % 200 for k in range(50)]

    x, t = sg.placeholder((None, 4), name="x"), sg.placeholder((None,), dtype="int64", name="t")
    params = [sg.parameter(p) for p in init]
    loss = mlp(x, t, *params)
    step = sg.compile(loss, inputs=[x, t], updates=[(p, p - lr * g) for p, g in zip(params, sg.grad(loss, params))])
    static_losses = [float(step(X[idx], T[idx])) for idx in batches]

    ps = [eager.tensor(p, requires_grad=True) for p in init]
    eager_losses = []
    for idx in batches:
        eager.zero_grad(ps)
        loss_e = mlp(eager.tensor(X[idx]), eager.tensor(T[idx]), *ps)
        loss_e.backward()
        with eager.no_grad():
            for p in ps:
                p.value = p.value - lr * p.grad
        eager_losses.append(loss_e.item())

    assert static_losses[-1] < static_losses[0]
    np.testing.assert_allclose(eager_losses, static_losses, rtol=0, atol=1e-12)
    for p, q in zip(params, ps):
        np.testing.assert_allclose(q.value, p.value, rtol=0, atol=1e-12)


# ------------------------------------------------------------------ the tape
def test_grad_is_none_before_backward_and_accumulates_with_plus_equals():
    w = eager.tensor([1.0, 2.0], requires_grad=True)
    assert w.grad is None
    y = sg.sum(w * w)
    y.backward()
    first = w.grad
    np.testing.assert_array_equal(first, [2.0, 4.0])
    y.backward()
    assert w.grad is first                      # accumulated in place
    np.testing.assert_array_equal(w.grad, [4.0, 8.0])
    w.zero_grad()
    assert w.grad is None
    z = eager.tensor(3.0, requires_grad=True)
    (w.sum() * z).backward()
    eager.zero_grad([w, z])
    assert w.grad is None and z.grad is None


def test_only_leaves_get_grad_and_the_tape_records_op_inputs_attrs():
    x = eager.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    s = sg.sum(x, axis=1)
    loss = sg.mean(s)
    assert (s.op, s.inputs, s.attrs) == ("sum", (x,), {"axis": (1,), "keepdims": False})
    assert s.source == f"{THIS_FILE}:{s.source.split(':')[1]}" and s.source.startswith(THIS_FILE)
    loss.backward()
    assert s.grad is None
    np.testing.assert_allclose(x.grad, np.full((2, 3), 0.5))


def test_broadcast_gradients_are_reduced_to_the_leaf_shape():
    x = eager.tensor(np.ones((4, 3)))
    b = eager.tensor(np.zeros((1, 3)), requires_grad=True)
    c = eager.tensor(2.0, requires_grad=True)
    sg.sum((x + b) * c).backward()
    np.testing.assert_array_equal(b.grad, np.full((1, 3), 8.0))
    assert c.grad.shape == () and c.grad == 12.0


def test_a_deep_chain_does_not_recurse():
    x = eager.tensor(0.5, requires_grad=True)
    y = x
    for _ in range(20000):
        y = y * 1.0 + 0.0
    y.backward()
    assert x.grad == 1.0


def test_create_graph_gives_a_taped_gradient():
    x = eager.tensor(3.0, requires_grad=True)
    (x ** 3).backward(create_graph=True)
    g = x.grad
    assert isinstance(g, EagerTensor) and g.requires_grad and g.item() == 27.0
    x.zero_grad()
    g.backward(create_graph=True)
    h = x.grad
    assert h.item() == 18.0
    x.zero_grad()
    h.backward()
    assert x.grad == 6.0


def test_functional_grad_takes_intermediates_and_leaves_grad_alone():
    x = eager.tensor([1.0, -2.0, 3.0], requires_grad=True)
    h = x * x
    y = sg.sum(h * 2.0)
    gh, gx = eager.grad(y, [h, x])
    np.testing.assert_array_equal(gh.value, [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(gx.value, [4.0, -8.0, 12.0])
    assert x.grad is None
    other = eager.tensor(1.0, requires_grad=True)
    assert eager.grad(y, other).value == 0.0


def test_vector_jacobian_product_with_grad_output():
    x = eager.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    y.backward(np.array([1.0, 10.0]))
    np.testing.assert_array_equal(x.grad, [2.0, 40.0])


def test_only_needed_input_gradients_are_computed():
    """x @ W with x data: the backward runs one matmul (for W), not the data gradient g @ W.T."""
    x = eager.tensor(np.ones((5, 4)))
    W = eager.tensor(np.ones((4, 3)), requires_grad=True)
    loss = sg.sum(x @ W)
    with eager.trace() as ops:
        loss.backward()
    assert [t.op for t in ops].count("matmul") == 1


def test_unneeded_gradient_parts_raise_no_warnings():
    """pow's exponent gradient (a log of the base) is not computed for a constant exponent."""
    y = eager.tensor([1.0, 2.0])
    w = eager.tensor([3.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sg.mean((y - w) ** 2).backward()
    np.testing.assert_allclose(w.grad, [2.0, -1.0])


def test_no_grad_and_data_dependent_control_flow():
    w = eager.tensor(2.0, requires_grad=True)
    with eager.no_grad():
        z = w * 3
    assert not z.requires_grad and z.inputs == ()
    y = w
    while y < 100:               # a Python loop on a value: only define-by-run can do this
        y = y * w
    y.backward()
    assert y.item() == 128.0 and w.grad == 7 * 2.0 ** 6


def test_float32_stays_float32():
    x = eager.tensor(np.ones(3, np.float32), requires_grad=True)
    y = sg.sum(sg.exp(x) * 2.0 + 1)
    assert y.dtype == np.float32
    y.backward()
    assert x.grad.dtype == np.float32


def test_numpy_interop():
    x = eager.tensor([1.0, 2.0])
    assert isinstance(np.asarray(x), np.ndarray) and float(sg.sum(x)) == 3.0
    y = np.array([1.0, 1.0]) + x
    assert isinstance(y, EagerTensor) and list(y.value) == [2.0, 3.0]
    assert len(x) == 2 and [v.item() for v in x] == [1.0, 2.0]
    assert "requires_grad" not in repr(x)


# ------------------------------------------------------------------ errors read as in static mode
def test_shape_error_names_the_op_and_the_user_line():
    a, b = eager.tensor(np.ones((2, 3))), eager.tensor(np.ones((2, 3)))
    with pytest.raises(sg.ShapeError, match=rf"matmul: .*not aligned.*{THIS_FILE}:\d+"):
        a @ b


def test_mixing_with_a_placeholder_is_a_type_error():
    x = sg.placeholder((2,), name="x")
    with pytest.raises(TypeError, match="placeholder 'x'"):
        eager.tensor([1.0, 2.0]) + x


def test_backward_errors():
    x = eager.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(sg.GradError, match="grad_output"):
        (x * 2).backward()
    with pytest.raises(sg.GradError, match="does not require grad"):
        sg.sum(eager.tensor([1.0])).backward()
    with pytest.raises(sg.GradError, match="floating"):
        eager.tensor([1, 2], requires_grad=True)
    with pytest.raises(TypeError, match="leaf"):
        (x * 2).value = np.zeros(2)
    with pytest.raises(sg.ShapeError):
        x.value = np.zeros(3)


def test_leaves_sharing_one_adjoint_get_separate_grad_arrays():
    """x + y hands one adjoint to both leaves: accumulating into one must not change the other."""
    x = eager.tensor(np.ones(3), requires_grad=True)
    y = eager.tensor(np.ones(3), requires_grad=True)
    (x + y).backward(np.ones(3))
    assert x.grad is not y.grad
    sg.sum(x * 2.0).backward()
    np.testing.assert_array_equal(x.grad, [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(y.grad, [1.0, 1.0, 1.0])


def test_grad_output_array_is_not_taken_over():
    x = eager.tensor(np.ones(2), requires_grad=True)
    seed = np.array([1.0, 2.0])
    x.backward(seed)             # the seed is x's own adjoint: its array must not become x.grad
    sg.sum(x).backward()
    np.testing.assert_array_equal(seed, [1.0, 2.0])
    np.testing.assert_array_equal(x.grad, [2.0, 3.0])


def test_a_grad_output_tensor_that_requires_grad_is_not_taken_over():
    # Such a seed is kept as it is (its tape serves create_graph): x.grad must still be an array of its own.
    x = eager.tensor([1.0, 2.0], requires_grad=True)
    go = eager.tensor([10.0, 20.0], requires_grad=True)
    (x + 0.0).backward(go)
    assert not np.shares_memory(x.grad, go.value)
    (x + 0.0).backward(np.ones(2))
    np.testing.assert_array_equal(go.value, [10.0, 20.0])
    np.testing.assert_array_equal(x.grad, [11.0, 21.0])


STABLE_PATTERNS = {
    "log(sigmoid)": lambda z: sg.sum(sg.log(sg.sigmoid(z))),
    "log(1 - sigmoid)": lambda z: sg.sum(sg.log(1 - sg.sigmoid(z))),
    "log(softmax)": lambda z: sg.sum(sg.log(sg.softmax(z))),
    "log(sum(exp))": lambda z: sg.log(sg.sum(sg.exp(z))),
}


@pytest.mark.parametrize("pattern", STABLE_PATTERNS, ids=str)
def test_gradients_of_stable_patterns_are_those_of_static_mode(pattern):
    # sg.grad differentiates the stable form even without optimization; backward must too, or eager
    # gives nan where static gives 1 (the naive log(sigmoid(-1000)) has 0 * inf in its chain)
    f = STABLE_PATTERNS[pattern]
    zv = np.array([-1000.0, 0.5, 800.0])
    z = eager.tensor(zv, requires_grad=True)
    zs = sg.placeholder((3,), requires_grad=True)
    with np.errstate(all="ignore"):
        f(z).backward()
        want = sg.compile(sg.grad(f(zs), [zs])[0], inputs=[zs], optimize=False)(zv)
        (got,) = eager.grad(f(z) * 1.0, [z])
    assert np.isfinite(want).all()
    np.testing.assert_array_equal(z.grad, want)
    np.testing.assert_array_equal(got.value, want)


def test_intermediates_asked_for_survive_the_stable_form():
    z = eager.tensor(np.array([-1000.0, 0.5]), requires_grad=True)
    s = sg.sigmoid(z)
    with np.errstate(all="ignore"):
        (gs,) = eager.grad(sg.sum(sg.log(s)), [s])     # s is kept: the gradient with respect to it is 1/s
        want = 1.0 / s.value
    np.testing.assert_array_equal(gs.value, want)


PATTERN_ROOTS = {       # each returns the pattern's root itself, the tensor stabilize replaces
    "log(sigmoid)": lambda z: sg.log(sg.sigmoid(z)),
    "log(1 - sigmoid)": lambda z: sg.log(1 - sg.sigmoid(z)),
    "log(softmax)": lambda z: sg.log(sg.softmax(z)),
    "log(sum(exp))": lambda z: sg.log(sg.sum(sg.exp(z), keepdims=True)),
}


@pytest.mark.parametrize("pattern", PATTERN_ROOTS, ids=str)
def test_asking_for_the_patterns_own_gradient_keeps_the_inputs_stable(pattern):
    # The root of a stable pattern may be in wrt too: its stand-in has the same adjoint, so the input's
    # gradient still comes from the stable form (it was nan when the root was kept as written).
    f = PATTERN_ROOTS[pattern]
    zv = np.array([-1000.0, 0.5, 800.0])
    zs = sg.placeholder((3,), requires_grad=True)
    ys = f(zs)
    with np.errstate(all="ignore"):
        want = sg.compile(sg.grad(sg.sum(f(zs)), [zs])[0], inputs=[zs])(zv)
        assert np.isfinite(want).all()
        for optimize in (True, False):
            g_y, g_z = sg.compile(sg.grad(sg.sum(ys), [ys, zs]), inputs=[zs], optimize=optimize)(zv)
            np.testing.assert_array_equal(g_y, np.ones(ys.shape))
            np.testing.assert_array_equal(g_z, want)
        z = eager.tensor(zv, requires_grad=True)
        ye = f(z)
        e_y, e_z = eager.grad(sg.sum(ye), [ye, z])
    np.testing.assert_array_equal(e_y.value, np.ones(ys.shape))
    np.testing.assert_array_equal(e_z.value, want)


def test_grad_of_a_result_no_tensor_requiring_grad_reaches_is_zeros_as_in_static_mode():
    a = eager.tensor([1.0, 2.0], requires_grad=True)
    b = eager.tensor([3.0, 4.0])
    (g,) = eager.grad(sg.sum(b * 2.0), [a])
    np.testing.assert_array_equal(g.value, [0.0, 0.0])
    with pytest.raises(sg.GradError, match="does not require grad"):
        sg.sum(b * 2.0).backward()           # backward still needs something to fill, as in PyTorch


def test_stable_forms_keep_static_and_eager_bits_together():
    # Both modes differentiate the stable twin (log1p, expm1 here) built in creation order: the twins' ids,
    # and so the order their contributions meet at w, are the same in both.
    def f(x, w):
        return sg.sum(sg.log(1.0 + (x - w))) + sg.sum(w + (sg.exp(w) - 1.0))
    x, w = sg.placeholder((3,), name="x"), sg.parameter(np.array(0.0), name="w")
    fn = sg.compile(sg.grad(f(x, w), w), inputs=[x])
    rng = np.random.default_rng(0)
    for _ in range(300):
        v, wv = rng.uniform(0, 1, 3), rng.uniform(-0.5, 0.5)
        w.value = np.array(wv)
        we = eager.tensor(np.array(wv), requires_grad=True)
        f(eager.tensor(v), we).backward()
        assert fn(v).tobytes() == np.asarray(we.grad).tobytes()
