"""sg.scan, tried as a careful jax.lax.scan user would: every case runs compiled (default passes and
optimize=False), eagerly and as a plain numpy loop, and its gradients are checked against central
differences, eager mode and torch autograd (tests/loops/harness.py)."""
import collections

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager
from staticgrad.testing import check_grads, numerical_grad

from .harness import SG, check, check_hvp, tree_leaves

R = np.random.default_rng(7)





def rand(*shape, dtype=np.float64):
    return R.uniform(-1, 1, shape).astype(dtype)


# ------------------------------------------------------------------ the basic loop
def rnn(m, X, W, h0):
    def step(h, x):
        h = m.tanh(x @ W + h)
        return h, h * 2.0
    return m.scan(step, h0, xs=X)


def test_rnn_values_and_gradients_every_way():
    check(rnn, rand(5, 2, 3), rand(3, 3), rand(2, 3), order=2)


def test_reverse_runs_last_step_first_and_stacks_ys_in_step_order():
    def model(m, X, c0):
        return m.scan(lambda c, x: (c * 0.5 + x, c * x), c0, xs=X, reverse=True)
    check(model, rand(4, 3), rand(3), order=2)


def test_reverse_order_is_visible_in_values():
    X = sg.placeholder((4,), name="X")
    c, ys = sg.scan(lambda c, x: (c + x, c), sg.constant(0.0), xs=X, reverse=True)
    got = sg.compile([c, ys], inputs=[X])(np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(got[1], [9.0, 7.0, 4.0, 0.0])     # ys[t]: the carry step t started from
    assert got[0] == 10.0


def test_python_scalars_and_arrays_as_init_and_in_the_body():
    def model(m, X):
        return m.scan(lambda c, x: (c * 0.9 + m.sum(x), 2.0 * x + c), 0.0, xs=X)
    check(model, rand(4, 3))


# ------------------------------------------------------------------ pytrees
def test_tuple_carry_lstm_like():
    def model(m, X, W, U):
        def step(carry, x):
            h, c = carry
            z = x @ W + h @ U
            c = c * m.tanh(z) + m.sin(z)
            h = m.tanh(c) * 0.5
            return (h, c), h
        return m.scan(step, (m.zeros((2, 3)), m.zeros((2, 3))), xs=X)
    check(model, rand(4, 2, 3), rand(3, 3), rand(3, 3), order=2)


def test_dict_carry_dict_xs_and_no_y():
    def model(m, A, B, s0):
        def step(c, x):
            return {"s": c["s"] + x["a"] * c["p"], "p": c["p"] * m.cos(x["b"])}, None
        carry, ys = m.scan(step, {"s": s0, "p": s0 * 2.0}, xs={"b": B, "a": A})
        assert ys is None
        return carry
    check(model, rand(5, 3), rand(5, 3), rand(3), order=2)


def test_list_carry_and_list_xs_with_different_trailing_shapes():
    def model(m, X, Y, v):
        def step(c, xy):
            x, y = xy
            a, b = c
            return [a + x @ b, b * m.tanh(y)], [a * 1.0, m.sum(b)]
        return m.scan(step, [m.sum(v), v], xs=[X, Y])
    check(model, rand(4, 3), rand(4, 3), rand(3))


def test_nested_trees_and_none_leaves_in_ys():
    def model(m, X, v):
        def step(c, x):
            new = {"a": (c["a"][0] + x["u"][0], [c["a"][1][0] * x["w"]]), "b": c["b"] - m.sum(x["w"])}
            return new, (None, {"z": new["b"] * 1.0, "q": None}, [x["u"][0] * c["b"]])
        init = {"a": (v, [v * 0.5]), "b": m.sum(v)}
        return m.scan(step, init, xs={"u": (X,), "w": X * 2.0})
    check(model, rand(3, 2), rand(2))


State = collections.namedtuple("State", "h c")


def test_named_tuples_stay_named_tuples():
    def model(m, X, h0):
        def step(s, x):
            assert isinstance(s, State)
            return State(m.tanh(s.h + x * s.c), s.c * 0.9), State(s.h, m.sum(s.c))
        carry, ys = m.scan(step, State(h0, h0 * 2.0), xs=X)
        assert isinstance(carry, State) and isinstance(ys, State)
        return carry, ys
    check(model, rand(4, 3), rand(3))


def test_none_inside_the_carry_and_duplicated_outputs():
    def model(m, X, c0):
        def step(c, x):
            a, nothing, b = c
            n = m.sin(a) + x * b
            return (n, None, n), (n, n, b)          # one value as two carries and two ys
        return m.scan(step, (c0, None, c0 * 0.5), xs=X)
    check(model, rand(4, 3), rand(3), order=2)


def test_ys_structure_holds_none_in_place():
    X = sg.placeholder((3, 2), name="X")
    c, ys = sg.scan(lambda c, x: (c + x, (None, x, {"k": None})), sg.constant(np.zeros(2)), xs=X)
    assert ys[0] is None and ys[2] == {"k": None} and ys[1].shape == (3, 2)


# ------------------------------------------------------------------ lengths
def test_length_without_xs():
    def model(m, a, c0):
        return m.scan(lambda c, _: (m.sin(c) * a + 0.1, c * c), c0, length=5)
    check(model, rand(3), rand(3), order=2)


def test_length_without_xs_and_reverse():
    def model(m, a, c0):
        return m.scan(lambda c, x: (c * a + 1.0, c), c0, length=4, reverse=True)
    check(model, rand(3), rand(3))


def test_length_one_and_zero_without_xs():
    for n in (1, 0):
        def model(m, a, c0, n=n):
            return m.scan(lambda c, _: (c * a, c + a), c0, length=n)
        check(model, rand(3), rand(3))


def test_length_agreeing_with_xs_is_accepted():
    def model(m, X, c0):
        return m.scan(lambda c, x: (c + x, c), c0, xs=X, length=4)
    check(model, rand(4, 2), rand(2))


@pytest.mark.parametrize("steps", [0, 1, 6])
def test_unknown_length_fed_at_run_time(steps):
    def model(m, X, W, h0):
        def step(h, x):
            h = m.tanh(x @ W + h)
            return h, h * x
        return m.scan(step, h0, xs=X)
    check(model, rand(steps, 2, 3), rand(3, 3), rand(2, 3), unknown=(0,))


@pytest.mark.parametrize("steps", [0, 1, 5])
def test_unknown_length_reverse_pytree_xs(steps):
    def model(m, X, Y, c0):
        return m.scan(lambda c, xy: (c * xy[1] + xy[0], {"c": c}), c0, xs=(X, Y), reverse=True)
    check(model, rand(steps, 3), rand(steps, 3), rand(3), unknown=(0, 1))


def test_one_function_one_plan_per_sequence_length():
    X = sg.placeholder((None, 3), name="X", requires_grad=True)
    w = sg.placeholder((3,), name="w", requires_grad=True)
    _, hs = sg.scan(lambda h, x: (sg.tanh(h * w + x), h), sg.constant(np.zeros(3)), xs=X)
    loss = sg.sum(hs * hs)
    fn = sg.compile([loss] + sg.grad(loss, [X, w]), inputs=[X, w])
    w0 = rand(3)
    for steps in (4, 1, 7, 0, 4):
        X0 = rand(steps, 3)
        got = fn(X0, w0)
        check_value = _numpy_tanh_loop(X0, w0)
        np.testing.assert_allclose(got[0], check_value, rtol=1e-12)
        assert got[1].shape == (steps, 3)
    assert fn.report()["plans"] == 4


def _numpy_tanh_loop(X, w):
    h, total = np.zeros(3), 0.0
    for x in X:
        total += np.sum(h * h)
        h = np.tanh(h * w + x)
    return total


@pytest.mark.parametrize("optimize", [True, False])
def test_xs_of_unknown_length_that_disagree_at_run_time_raise(optimize):
    X = sg.placeholder((None, 2), name="X")
    Y = sg.placeholder((None, 2), name="Y")
    c, _ = sg.scan(lambda c, xy: (c + xy[0] * xy[1], None),
                   sg.constant(np.zeros(2)), xs=(X, Y))
    fn = sg.compile(c, inputs=[X, Y], optimize=optimize)
    np.testing.assert_allclose(fn(np.ones((3, 2)), np.ones((3, 2))), [3.0, 3.0])
    with pytest.raises(sg.ShapeError, match=r"scan .*lengths") as err:
        fn(np.ones((3, 2)), np.ones((4, 2)))
    assert "test_scan.py:" in str(err.value)


# ------------------------------------------------------------------ integer carries and xs
def test_integer_step_counter_mixed_with_float_carry():
    def model(m, X, w):
        def step(c, x):
            k, s = c
            return (k + 1, s * w + x * m.cast(k, "float64")), k * 2
        return m.scan(step, (m.const(np.int64(0)), m.zeros(3)), xs=X)
    check(model, rand(4, 3), rand(3), order=2)


def test_integer_counter_alone_with_length():
    def model(m, a):
        def step(c, _):
            k, s = c
            return (k + 1, s + a * m.cast(k, "float64")), k
        return m.scan(step, (m.const(np.int32(3)), m.zeros(2)), length=4)
    check(model, rand(2))


def test_integer_xs():
    def model(m, idx, w):
        def step(s, i):
            return s + w * m.cast(i, "float64"), i * i
        return m.scan(step, w * 0.0, xs=idx)
    check(model, np.array([[1, 2], [3, -4], [0, 5]], np.int64), rand(2))


def test_boolean_mask_in_xs_selects_updates():
    def model(m, X, M, c0):
        return m.scan(lambda c, xm: (m.where(xm[1], c * xm[0], c), c), c0, xs=(X, M))
    check(model, rand(5, 3), R.uniform(size=(5, 3)) > 0.5, rand(3))


# ------------------------------------------------------------------ what the gradient flows to
def test_gradients_of_init_xs_and_captured_parameters():
    W0, b0 = rand(3, 3), rand(3)
    W, b = sg.parameter(W0.copy(), name="W"), sg.parameter(b0.copy(), name="b")
    X = sg.placeholder((4, 2, 3), name="X", requires_grad=True)
    h0 = sg.placeholder((2, 3), name="h0", requires_grad=True)
    hT, hs = sg.scan(lambda h, x: (sg.tanh(x @ W + h * b), h), h0, xs=X)
    loss = sg.sum(hT * hT) + sg.sum(sg.sin(hs))
    wrt = [X, h0, W, b]
    grads = sg.grad(loss, wrt)
    fn = sg.compile([loss] + grads, inputs=[X, h0])
    fn_plain = sg.compile([loss] + grads, inputs=[X, h0], optimize=False)
    X0, h00 = rand(4, 2, 3), rand(2, 3)

    def np_loss(X, h0, W, b):
        h, total = h0, 0.0
        for x in X:
            total += np.sum(np.sin(h))
            h = np.tanh(x @ W + h * b)
        return total + np.sum(h * h)
    args = [X0, h00, W0, b0]
    got, plain = fn(X0, h00), fn_plain(X0, h00)
    assert got[0] == pytest.approx(np_loss(*args), rel=1e-12)
    for k in range(4):
        numeric = numerical_grad(np_loss, args, k, 1e-6)
        np.testing.assert_allclose(got[1 + k], numeric, rtol=1e-6, atol=1e-8, err_msg=wrt[k].label())
        np.testing.assert_allclose(got[1 + k], plain[1 + k], rtol=1e-12, atol=1e-14)


def test_gradient_of_a_tensor_computed_before_the_loop():
    def model(m, X, A):
        B = m.sin(A) * 2.0 + A @ A           # an intermediate captured by the body
        return m.scan(lambda h, x: (m.tanh(h @ B + x), h), m.zeros(3), xs=X)
    check(model, rand(4, 3), rand(3, 3), order=2)


def test_work_on_outer_values_only_is_hoisted_when_traced_and_differentiated():
    def model(m, X, A, v):
        def step(h, x):
            B = m.exp(A * 0.5) @ A           # reads no carry and no x: computed once, before the loop
            u = m.sum(v * v)
            return m.tanh(h @ B + x * u), h
        return m.scan(step, m.zeros(3), xs=X)
    check(model, rand(4, 3), rand(3, 3), rand(3), order=2)
    hT, _ = model(SG, sg.placeholder((4, 3)), sg.placeholder((3, 3)), sg.placeholder((3,)))
    assert hT.inputs[0].attrs["body"].hoisted >= 2


def test_the_same_value_captured_and_fed_as_init_and_xs():
    def model(m, V):
        return m.scan(lambda c, x: (c * x + V[0], c * V[1]), V[0], xs=V)
    check(model, rand(3, 3), order=2)


def test_gradient_only_through_some_outputs():
    X0, c00 = rand(5, 3), rand(3)
    for pick in ("carry", "ys", "last_y"):
        def model(m, X, c0, pick=pick):
            c, ys = m.scan(lambda c, x: (m.sin(c) + x, c * x), c0, xs=X)
            return {"carry": c, "ys": ys, "last_y": ys[-1]}[pick]
        check(model, X0, c00)


# ------------------------------------------------------------------ bodies that ignore or pass on their carry
def test_body_that_does_not_use_its_carry():
    def model(m, X, W, c0):
        return m.scan(lambda c, x: (m.tanh(x @ W), m.sin(x) * 2.0), c0, xs=X)
    check(model, rand(4, 3), rand(3, 3), rand(3), order=2)


def test_body_that_returns_its_carry_unchanged():
    def model(m, X, c0):
        return m.scan(lambda c, x: (c, c * x + m.sin(x)), c0, xs=X)
    check(model, rand(4, 3), rand(3), order=2)


def test_body_returning_carry_unchanged_and_no_y():
    def model(m, X, c0):
        return m.scan(lambda c, x: (c, None), c0, xs=X)
    check(model, rand(4, 3), rand(3))


def test_ys_are_the_new_carry():
    def model(m, X, c0):
        def step(c, x):
            c = m.sin(c) * x
            return c, c
        return m.scan(step, c0, xs=X)
    check(model, rand(4, 3), rand(3), order=2)


def test_ys_are_the_old_carry_and_carries_swap():
    def model(m, X, a0, b0):
        return m.scan(lambda c, x: ((c[1], c[0] * x), (c[0], c)), (a0, b0), xs=X)
    check(model, rand(5, 3), rand(3), rand(3), order=2)


def test_carry_leaf_reset_to_a_python_number():
    def model(m, X, c0):
        return m.scan(lambda c, x: ((c[0] + x, 0.0), c[1] + m.sum(x)), (c0, m.sum(c0)), xs=X)
    check(model, rand(3, 2), rand(2))


def test_body_with_no_work_at_all():
    def model(m, X, c0):
        return m.scan(lambda c, x: (c, x), c0, xs=X)
    check(model, rand(4, 3), rand(3))


# ------------------------------------------------------------------ scans in scans, scans sharing a body
def test_scan_inside_a_scan():
    def model(m, X, W, h0):
        def row(h, xrow):
            def cell(a, x):
                a = m.tanh(a * h + x @ W)         # the inner body reads the outer carry
                return a, a * x
            a, inner = m.scan(cell, h * 0.5, xs=xrow)
            return h + a, m.sum(inner, axis=0)
        return m.scan(row, h0, xs=X)
    check(model, rand(3, 4, 2), rand(2, 2), rand(2), order=2)


def test_scan_inside_a_scan_reverse_and_length():
    def model(m, X, a):
        def outer(c, x):
            inner_c, inner_ys = m.scan(lambda d, _: (d * a + x, d), c, length=3, reverse=True)
            return inner_c, inner_ys[0] + inner_ys[2]
        return m.scan(outer, a, xs=X, reverse=True)
    check(model, rand(4, 2), rand(2), order=2)


def test_two_scans_sharing_a_body_function():
    def model(m, X, Y, W):
        def step(h, x):
            return m.tanh(h @ W + x), h
        a, ys_a = m.scan(step, m.zeros(3), xs=X)
        b, ys_b = m.scan(step, a, xs=Y)
        c, ys_c = m.scan(step, m.zeros(3), xs=X)          # the same loop as the first, traced again
        return a, b, c, ys_a, ys_b, ys_c
    check(model, rand(4, 3), rand(2, 3), rand(3, 3), order=2)


def test_one_scan_feeding_another_by_its_ys_and_carry():
    def model(m, X, w):
        c, hs = m.scan(lambda c, x: (m.sin(c + x), c * w), w, xs=X)
        return m.scan(lambda d, h: (d * c + h, d), c, xs=hs, reverse=True)
    check(model, rand(5, 3), rand(3), order=2)


# ------------------------------------------------------------------ grad more than once, and of grads
def _rnn_graph():
    X = sg.placeholder((4, 3), name="X", requires_grad=True)
    W = sg.placeholder((3, 3), name="W", requires_grad=True)
    _, hs = sg.scan(lambda h, x: (sg.tanh(h @ W + x), h), sg.constant(np.full(3, 0.1)), xs=X)
    return X, W, sg.sum(hs * hs)


def test_grad_called_twice_on_one_scan():
    X, W, loss = _rnn_graph()
    g1 = sg.grad(loss, [W])
    g2 = sg.grad(loss, [X, W])
    g3 = sg.grad(loss, [X])
    X0, W0 = rand(4, 3), rand(3, 3)
    for opt in (True, False):
        out = sg.compile([loss] + g1 + g2 + g3, inputs=[X, W], optimize=opt)(X0, W0)
        np.testing.assert_allclose(out[1], out[3], rtol=1e-12)
        np.testing.assert_allclose(out[2], out[4], rtol=1e-12)
        np.testing.assert_allclose(out[1], numerical_grad(_np_rnn_loss, [X0, W0], 1, 1e-6), rtol=1e-6)
    fn = sg.compile([loss] + g1 + g2 + g3, inputs=[X, W])
    loops = [n for n in fn.ir.nodes.values() if n.op == "scan"]
    assert len(loops) <= 4 and sum(not n.attrs["reverse"] for n in loops) == 1    # one forward loop


def _np_rnn_loss(X, W):
    h, total = np.full(3, 0.1), 0.0
    for x in X:
        total += np.sum(h * h)
        h = np.tanh(h @ W + x)
    return total


def test_hessian_vector_product_through_a_scan():
    X, W, loss = _rnn_graph()
    V = sg.placeholder((3, 3), name="V")
    (gW,) = sg.grad(loss, [W])
    hvp = sg.grad(sg.sum(gW * V), [W, X])
    X0, W0, V0 = rand(4, 3), rand(3, 3), rand(3, 3)
    got = {opt: sg.compile(hvp, inputs=[X, W, V], optimize=opt)(X0, W0, V0) for opt in (True, False)}
    grad_fn = sg.compile(gW, inputs=[X, W], optimize=False)
    for k, (args, index) in enumerate((([X0, W0], 1), ([X0, W0], 0))):
        numeric = numerical_grad(lambda X, W: np.sum(grad_fn(X, W) * V0), args, index, 1e-5)
        np.testing.assert_allclose(got[True][k], numeric, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got[True][k], got[False][k], rtol=1e-10, atol=1e-12)


def test_third_order_through_a_scan():
    def f(a):
        c, _ = sg.scan(lambda c, _: (sg.sin(c) * a, None), a, length=3)
        return c
    check_grads(f, [np.array(0.7)], order=3)


def test_grad_of_grad_against_torch():
    torch = pytest.importorskip("torch")
    X, W, loss = _rnn_graph()
    (gW,) = sg.grad(loss, [W])
    g2 = sg.grad(sg.sum(gW * gW), [W])
    X0, W0 = rand(4, 3), rand(3, 3)
    got = sg.compile(g2, inputs=[X, W])(X0, W0)[0]
    Xt, Wt = torch.tensor(X0), torch.tensor(W0, requires_grad=True)
    h, total = torch.full((3,), 0.1, dtype=torch.float64), 0.0
    for x in Xt:
        total = total + torch.sum(h * h)
        h = torch.tanh(h @ Wt + x)
    (gWt,) = torch.autograd.grad(total, [Wt], create_graph=True)
    (want,) = torch.autograd.grad(torch.sum(gWt * gWt), [Wt])
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------ dtypes
def test_float32_stays_float32():
    def model(m, X, W, h0):
        def step(h, x):
            h = m.tanh(x @ W + h * 0.5 + 1.0)
            return h, m.sqrt(h * h + 1.0)
        return m.scan(step, h0, xs=X)
    check(model, rand(4, 3, dtype=np.float32), rand(3, 3, dtype=np.float32), rand(3, dtype=np.float32))


def test_float32_gradients_are_float32():
    X = sg.placeholder((None, 3), dtype="float32", name="X", requires_grad=True)
    w = sg.parameter(rand(3, dtype=np.float32), name="w")
    c0 = sg.placeholder((3,), dtype="float32", name="c0", requires_grad=True)
    c, ys = sg.scan(lambda c, x: (c * w + x * 2.0, sg.sum(c) * 0.5), c0, xs=X, reverse=True)
    loss = sg.sum(c) + sg.sum(ys)
    fn = sg.compile([loss, c, ys] + sg.grad(loss, [X, w, c0]), inputs=[X, c0])
    for v in fn(rand(5, 3, dtype=np.float32), rand(3, dtype=np.float32)):
        assert v.dtype == np.float32


# ------------------------------------------------------------------ errors name the user's line
def _inputs(mode, *shapes):
    if mode == "eager":
        return [eager.tensor(np.zeros(s)) for s in shapes]
    return [sg.placeholder(s, name=f"in{k}") for k, s in enumerate(shapes)]


BAD_BODIES = {
    "carry grows an axis": (lambda c, x: (sg.stack([c, x]), None), sg.ShapeError, r"carry leaf 0 .*\(3,\).*\(2, 3\)"),
    "carry broadcast wider": (lambda c, x: (c + np.zeros((2, 3)), None), sg.ShapeError, r"carry leaf 0"),
    "carry changes dtype": (lambda c, x: (sg.cast(c, "float32"), None), sg.ShapeError, r"dtype float32"),
    "one value, not a pair": (lambda c, x: c + x, TypeError, r"must return \(carry, y\)"),
    "three values": (lambda c, x: (c, x, x), TypeError, r"must return \(carry, y\)"),
    "carry becomes None": (lambda c, x: (None, x), TypeError, r"same structure"),
    "carry becomes a pair": (lambda c, x: ((c, c), x), TypeError, r"same structure"),
    "y is text": (lambda c, x: (c, "text"), TypeError, r"text|<U4"),
}


@pytest.mark.parametrize("mode", ["static", "eager"])
@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_bad_bodies_raise_clear_errors_at_the_users_line(case, mode):
    fn, kind, message = BAD_BODIES[case]
    c0, X = _inputs(mode, (3,), (4, 3))
    with pytest.raises(kind, match=message) as err:
        sg.scan(fn, c0, xs=X)
    assert "test_scan.py:" in str(err.value)


@pytest.mark.parametrize("mode", ["static", "eager"])
def test_carry_structure_must_match_init(mode):
    a, b, X = _inputs(mode, (3,), (3,), (2, 3))
    for init, body in (((a, b), lambda c, x: ([c[0], c[1]], None)),
                       ({"a": a, "b": b}, lambda c, x: ({"a": c["a"], "c": c["b"]}, None)),
                       ([a, [b]], lambda c, x: ([c[0], c[1][0]], None))):
        with pytest.raises(TypeError, match="same structure as init") as err:
            sg.scan(body, init, xs=X)
        assert "test_scan.py:" in str(err.value)


@pytest.mark.parametrize("mode", ["static", "eager"])
def test_steps_must_be_known_and_agree(mode):
    c0, X, Y, s = _inputs(mode, (3,), (4, 3), (5, 3), ())
    body = lambda c, x: (c, None)         # noqa: E731
    cases = [(dict(xs=(X, Y)), sg.ShapeError, r"4.*5"),
             (dict(xs=X, length=3), sg.ShapeError, r"3.*4|4.*3"),
             (dict(), ValueError, r"xs or length"),
             (dict(xs=s), sg.ShapeError, r"leading axis|0-d"),
             (dict(length=-1), ValueError, r"length"),
             (dict(length=2.0), ValueError, r"length"),
             (dict(length=True), ValueError, r"length"),
             (dict(xs=X, checkpoint=0), ValueError, r"checkpoint"),
             (dict(xs=X, checkpoint=True), ValueError, r"checkpoint"),
             (dict(xs=X, checkpoint=2.0), ValueError, r"checkpoint")]
    for kwargs, kind, message in cases:
        with pytest.raises(kind, match=message) as err:
            sg.scan(body, c0, **kwargs)
        assert "test_scan.py:" in str(err.value), kwargs


def test_numpy_integers_are_a_length_and_a_checkpoint():
    c, ys = sg.scan(lambda c, _: (c + 1.0, c), sg.constant(0.0), length=np.int64(3), checkpoint=np.int32(2))
    assert ys.shape == (3,) and ys.inputs[0].attrs["length"] == 3 and ys.inputs[0].attrs["checkpoint"] == 2


def test_an_error_inside_the_body_names_the_body_line():
    X = sg.placeholder((4, 3), name="X")
    with pytest.raises(sg.ShapeError, match=r"matmul.*test_scan.py:\d+"):
        sg.scan(lambda c, x: (c @ np.zeros((2, 2)), None), sg.constant(np.zeros(3)), xs=X)


def test_compiled_scan_refuses_a_feed_of_the_wrong_shape():
    X = sg.placeholder((None, 3), name="X")
    c, _ = sg.scan(lambda c, x: (c + x, None), sg.constant(np.zeros(3)), xs=X)
    fn = sg.compile(c, inputs=[X])
    with pytest.raises(sg.FeedError, match="'X'"):
        fn(np.zeros((4, 2)))


# ------------------------------------------------------------------ eager mode specifics
def test_eager_loop_of_no_steps_gives_empty_stacks():
    c0 = eager.tensor(np.ones(3), requires_grad=True)
    for kwargs in (dict(xs=eager.tensor(np.zeros((0, 2)))), dict(length=0)):
        c, ys = sg.scan(lambda c, x: (c * 2.0, {"a": c, "b": (sg.sum(c), None)}), c0, **kwargs)
        assert eager.is_eager(c) and c.numpy().tolist() == [1.0, 1.0, 1.0]
        assert ys["a"].shape == (0, 3) and ys["b"][0].shape == (0,) and ys["b"][1] is None


def test_eager_y_must_keep_its_structure():
    X = eager.tensor(np.array([[1.0], [-1.0]]))
    with pytest.raises(TypeError, match="structure") as err:
        sg.scan(lambda c, x: (c, (c,) if float(x[0]) > 0 else c), eager.tensor(0.0), xs=X)
    assert "test_scan.py:" in str(err.value)


def test_eager_numbers_as_y_and_carry_leaves_become_eager_tensors():
    c, ys = sg.scan(lambda c, x: ((c[0] + x, 1), 2.5), (eager.tensor(0.0), 0), xs=eager.tensor(np.ones(3)))
    assert all(eager.is_eager(v) for v in (c[0], c[1], ys))
    assert c[1].dtype == np.int64 and ys.numpy().tolist() == [2.5] * 3


def test_eager_loop_taped_for_backward():
    W = eager.tensor(rand(3, 3), requires_grad=True)
    h, hs = sg.scan(lambda h, x: (sg.tanh(h @ W + x), h), eager.tensor(np.zeros(3)), xs=eager.tensor(rand(4, 3)))
    (sg.sum(hs * hs) + sg.sum(h)).backward()
    assert W.grad is not None and W.grad.shape == (3, 3)


@pytest.mark.xfail(strict=True, reason=(
    "an eager loop is chosen only when init or xs hold an eager tensor (loops/scan.py scan): with a "
    "number as init and only length, fn is traced over placeholders and mixing them with the eager "
    "tensors it reads raises"))
def test_eager_loop_with_number_init_reading_eager_tensors():
    a = eager.tensor(np.array([1.0, 2.0]), requires_grad=True)
    c, ys = sg.scan(lambda c, _: (c * a, c), 1.0, length=3)
    np.testing.assert_allclose(c.numpy(), [1.0, 8.0])
    sg.sum(c).backward()
    np.testing.assert_allclose(a.grad, [3.0, 12.0])


# ------------------------------------------------------------------ the loops pass
def test_report_has_a_loops_row_saying_what_it_did():
    X = sg.placeholder((None, 2, 3), name="X", requires_grad=True)
    W = sg.parameter(rand(3, 3), name="W")
    _, hs = sg.scan(lambda h, x: (sg.tanh(x @ W + h), h), sg.constant(np.zeros((2, 3))), xs=X)
    loss = sg.sum(hs * hs)
    fn = sg.compile([loss] + sg.grad(loss, [W]), inputs=[X])
    fn(rand(4, 2, 3))
    rows = [r for r in fn.report().rows if r["pass"] == "loops"]
    assert len(rows) == 1 and rows[0]["changed"] > 0
    details = rows[0]["details"]
    assert details["merged"] == 1 and details["hoisted"] >= 1 and details["sunk"] >= 1
    assert "loops" in str(fn.report())
    assert fn.report()["ops"]["scan"] == 2


HOISTABLE = {
    "matmul by a weight": lambda m, x, W: m.sum(x @ W, axis=0),
    "weight by a slice": lambda m, x, W: W @ x[0],
    "broadcast against a wider value": lambda m, x, W: m.sum(x[0] * W, axis=1),
    "sum over an axis": lambda m, x, W: m.sum(x, axis=0) + m.sum(x, axis=1)[0],
    "transpose": lambda m, x, W: (x.T @ x)[0] * 1.0 + m.sum(x.T, axis=1),
    "row and column": lambda m, x, W: x[1] + x[:, 2][1] + x[0:1, 1:3][0, 0],
    "negative index": lambda m, x, W: x[-1] * x[0, -1],
    "reshape": lambda m, x, W: m.sum((x * 1.0).reshape((6,)) ** 2.0) + x[0],
    "where": lambda m, x, W: m.where(x[0] > 0.0, x[1], W[0]),
    "maximum and cast": lambda m, x, W: m.maximum(x[0], W[1]) * m.cast(x[1] > 0.0, "float64"),
    "chain of elementwise": lambda m, x, W: m.exp(m.sin(x[0]) * 0.5) + m.sqrt(x[1] * x[1] + 1.0),
}


def _hoisting_model(case):
    term = HOISTABLE[case]

    def model(m, X, W, c0):
        return m.scan(lambda c, x: (m.tanh(c * 0.5 + term(m, x, W)), term(m, x, W) * c), c0, xs=X)
    return model


@pytest.mark.parametrize("case", sorted(HOISTABLE))
def test_carry_free_work_hoisted_out_of_the_loop_computes_the_same(case):
    """Each op's batch rule runs the per-step work over all steps at once (passes/loop_motion.hoist), also
    over no steps known only when called."""
    check(_hoisting_model(case), rand(4, 2, 3), rand(3, 3), rand(3))
    check(_hoisting_model(case), rand(0, 2, 3), rand(3, 3), rand(3), unknown=(0,), torch=False)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HOISTABLE))
def test_carry_free_work_hoisted_out_of_a_loop_of_unknown_length(case):
    check(_hoisting_model(case), rand(2, 2, 3), rand(3, 3), rand(3), unknown=(0,))


def test_running_sums_sunk_after_the_loop_keep_their_start():
    def model(m, X, W, s0):
        def step(c, x):
            s, h = c
            h = m.tanh(x @ W + h)
            return (s + x.T @ h, h), None             # s only sums a term per step: sunk
        return m.scan(step, (s0, m.zeros((2, 3))), xs=X)
    check(model, rand(5, 2, 3), rand(3, 3), rand(3, 3), order=2)


def test_sinking_with_a_batch_of_unknown_size():
    X = sg.placeholder((None, None, 3), name="X", requires_grad=True)
    W = sg.placeholder((3, 3), name="W", requires_grad=True)
    h0 = sg.placeholder((None, 3), name="h0")
    _, hs = sg.scan(lambda h, x: (sg.tanh(x @ W + h), h), h0, xs=X)
    loss = sg.sum(hs * hs)
    grads = sg.grad(loss, [W, X])
    fns = [sg.compile([loss] + grads, inputs=[X, W, h0], optimize=opt) for opt in (True, False)]
    for shape in ((4, 2, 3), (3, 5, 3), (1, 1, 3), (0, 2, 3), (2, 0, 3), (0, 0, 3)):
        X0, W0 = rand(*shape), rand(3, 3)
        a, b = (fn(X0, W0, np.zeros(shape[1:])) for fn in fns)
        for u, v in zip(a, b):
            np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-14)

        def np_loss(X, W):
            h, total = np.zeros((X.shape[1], 3)), 0.0
            for x in X:
                total += np.sum(h * h)
                h = np.tanh(x @ W + h)
            return total
        np.testing.assert_allclose(a[1], numerical_grad(np_loss, [X0, W0], 1, 1e-6), rtol=1e-6, atol=1e-9)


def test_dead_carries_and_ys_are_not_computed_but_live_ones_are_right():
    X = sg.placeholder((4, 3), name="X")
    (a, b, n), (ya, yb) = sg.scan(lambda c, x: ((c[0] + x, c[1] * x, c[2] + 1), (c[0] * 2.0, c[1] - x)),
                                  (sg.constant(np.zeros(3)), sg.constant(np.ones(3)), sg.constant(np.int64(0))), xs=X)
    X0 = rand(4, 3)
    for outputs, want in (([a], [X0.sum(0)]), ([yb], [np.stack([np.prod(X0[:t], 0) - X0[t] for t in range(4)])]),
                          ([n, ya], [np.int64(4), 2.0 * np.cumsum(np.vstack([np.zeros(3), X0[:-1]]), 0)])):
        for opt in (True, False):
            got = sg.compile(outputs, inputs=[X], optimize=opt)(X0)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_the_same_loop_built_twice_over_the_same_inputs():
    X = sg.placeholder((4, 3), name="X", requires_grad=True)
    w = sg.placeholder((3,), name="w", requires_grad=True)

    def build():
        return sg.scan(lambda c, x: (sg.sin(c) * w + x, c), sg.zeros_like(w), xs=X)
    (c1, _), (_, y2) = build(), build()
    loss = sg.sum(c1) + sg.sum(y2 * y2)
    grads = sg.grad(loss, [X, w])
    X0, w0 = rand(4, 3), rand(3)
    a = sg.compile([loss] + grads, inputs=[X, w])(X0, w0)
    b = sg.compile([loss] + grads, inputs=[X, w], optimize=False)(X0, w0)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-12)


def test_stop_gradient_inside_the_body():
    def model(m, X, c0):
        stop = sg.stop_gradient if m is SG else (lambda v: v)
        return m.scan(lambda c, x: (m.sin(c) * stop(c) + x, c), c0, xs=X)
    X0, c00 = rand(4, 3), rand(3)
    c, _ = model(SG, sg.placeholder((4, 3)), sg.placeholder((3,), requires_grad=True))
    check(model, X0, c00, grads=False)
    X = sg.placeholder((4, 3), name="X")
    c0 = sg.placeholder((3,), name="c0", requires_grad=True)
    c, _ = model(SG, X, c0)
    got = sg.compile(sg.grad(sg.sum(c), [c0]), inputs=[X, c0])(X0, c00)[0]
    # d c_{t+1} / d c_t with the second factor held: cos(c_t) * c_t
    want, ct = np.ones(3), c00
    factors = []
    for x in X0:
        factors.append(np.cos(ct) * ct)
        ct = np.sin(ct) * ct + x
    for f in factors:
        want = want * f
    np.testing.assert_allclose(got, want, rtol=1e-12)


def _checkpointed(k, reverse=False):
    def model(m, X, W, c0):
        def step(c, x):
            h, s = c
            h = m.tanh(x @ W + h * 0.5)
            return (h, s + m.sum(h * x)), {"h": h, "hx": h * x}
        return m.scan(step, (c0, m.sum(c0)), xs=X, reverse=reverse, checkpoint=k)
    return model


@pytest.mark.parametrize("reverse", [False, True])
def test_checkpointed_pytree_loop_second_order_over_segments_of_every_kind(reverse):
    """7 steps in segments of 2: three full ones and a partial one, whose rows a reverse loop and the
    reverse loop of that loop ask for in different orders (second order)."""
    check_hvp(_checkpointed(2, reverse), rand(7, 2, 3), rand(3, 3), rand(2, 3))
    check_hvp(_checkpointed(3, reverse), rand(7, 2, 3), rand(3, 3), rand(2, 3), unknown=(0,))


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_checkpointed_loops_of_any_length(k):
    for steps in (0, 1, 4, 7):
        check(_checkpointed(k, reverse=steps % 2 == 1), rand(steps, 2, 3), rand(3, 3), rand(2, 3), unknown=(0,),
              torch=False)


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("reverse", [False, True])
def test_checkpointed_loops_every_length_first_and_second_order(k, reverse):
    for steps in range(0, 10):
        check(_checkpointed(k, reverse), rand(steps, 2, 3), rand(3, 3), rand(2, 3), unknown=(0,))
        check_hvp(_checkpointed(k, reverse), rand(steps, 2, 3), rand(3, 3), rand(2, 3))


def test_checkpoint_gives_the_same_values_and_gradients():
    def model_for(k):
        def model(m, X, W, h0):
            return m.scan(lambda h, x: (m.tanh(x @ W + h), h * h), h0, xs=X, checkpoint=k)
        return model
    X0, W0, h00 = rand(7, 3), rand(3, 3), rand(3)
    for k in (1, 2, 3, 7, 10):
        check(model_for(k), X0, W0, h00)


def test_gradient_of_a_loss_that_ignores_the_loop_is_zero():
    X = sg.placeholder((3, 2), name="X", requires_grad=True)
    w = sg.placeholder((2,), name="w", requires_grad=True)
    c, _ = sg.scan(lambda c, x: (c * x, None), w, xs=X)
    loss = sg.sum(w * w)
    gX, gw = sg.compile(sg.grad(loss + 0.0 * sg.sum(c), [X, w]), inputs=[X, w])(rand(3, 2), np.array([1.0, 2.0]))
    gX2 = sg.compile(sg.grad(loss, [X]), inputs=[X, w])(rand(3, 2), np.array([1.0, 2.0]))[0]
    np.testing.assert_array_equal(gX, np.zeros((3, 2)))
    np.testing.assert_array_equal(gX2, np.zeros((3, 2)))
    np.testing.assert_allclose(gw, [2.0, 4.0])


# ------------------------------------------------------------------ training through a scan
def test_sgd_updates_through_a_scan_loss_equal_numpys():
    X0, T0 = rand(6, 2, 3), rand(2, 3)
    W0, b0 = rand(3, 3) * 0.5, rand(3) * 0.1
    W, b = sg.parameter(W0.copy(), name="W"), sg.parameter(b0.copy(), name="b")
    X = sg.placeholder((None, 2, 3), name="X")
    target = sg.placeholder((2, 3), name="target")
    hT, hs = sg.scan(lambda h, x: (sg.tanh(x @ W + h @ W * 0.5 + b), sg.sum(h)), sg.constant(np.zeros((2, 3))), xs=X)
    loss = sg.mean((hT - target) ** 2.0) + 0.01 * sg.sum(hs * hs)
    gW, gb = sg.grad(loss, [W, b])
    lr = 0.3
    step = sg.compile(loss, inputs=[X, target], updates=[(W, W - lr * gW), (b, b - lr * gb)])
    Wn, bn = W0.copy(), b0.copy()
    for _ in range(4):
        got = step(X0, T0)
        want, dW, db = _np_rnn_sgd_grads(X0, T0, Wn, bn)
        assert got == pytest.approx(want, rel=1e-12)
        Wn, bn = Wn - lr * dW, bn - lr * db
        np.testing.assert_allclose(W.value, Wn, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(b.value, bn, rtol=1e-10, atol=1e-13)


def _np_rnn_sgd_grads(X, T, W, b):
    """The loss of test_sgd_updates_through_a_scan_loss_equal_numpys and its gradients, by hand (BPTT)."""
    hs = [np.zeros((2, 3))]
    for x in X:
        h = hs[-1]
        hs.append(np.tanh(x @ W + h @ W * 0.5 + b))
    sums = np.array([np.sum(h) for h in hs[:-1]])
    loss = np.mean((hs[-1] - T) ** 2) + 0.01 * np.sum(sums * sums)
    dW, db = np.zeros_like(W), np.zeros_like(b)
    dh = 2.0 * (hs[-1] - T) / T.size
    for t in range(len(X) - 1, -1, -1):
        da = dh * (1.0 - hs[t + 1] ** 2)
        dW += X[t].T @ da + 0.5 * hs[t].T @ da
        db += da.sum(0)
        dh = 0.5 * da @ W.T + 0.01 * 2.0 * sums[t] * np.ones_like(hs[t])
    return loss, dW, db


# ------------------------------------------------------------------ loops of unknown length that read no slice
@pytest.mark.parametrize("steps", [0, 1, 3])
def test_unknown_length_loop_whose_body_ignores_its_slices(steps):
    """The number of steps comes from xs alone: a body reading no slice (or a reverse body reading none)
    still runs that many steps (passes/loop_motion.drop_dead and the VJP keep one xs for it)."""
    def model(m, X, c0, w):
        a, ys = m.scan(lambda c, x: (c * 2.0 + w, c), c0, xs=X)
        b, _ = m.scan(lambda c, x: (c, None), c0, xs=X)
        d, _ = m.scan(lambda c, x: (m.stack([c[2], c[0], c[1]]) * 1.5, None), c0, xs=X, reverse=True)
        return a, ys, b, d
    check(model, rand(steps, 3), rand(3), rand(3), unknown=(0,))


def test_gradient_of_an_unknown_length_loop_through_its_carry_alone():
    X = sg.placeholder((None, 3), name="X")
    c0 = sg.placeholder((3,), name="c0", requires_grad=True)
    c, _ = sg.scan(lambda c, x: (c * 2.0 + x, None), c0, xs=X)
    (g,) = sg.grad(sg.sum(c), [c0])
    for opt in (True, False):
        fn = sg.compile(g, inputs=[X, c0], optimize=opt)
        for steps in (0, 1, 3):
            np.testing.assert_array_equal(fn(rand(steps, 3), rand(3)), np.full(3, 2.0 ** steps))


def test_outputs_never_alias_the_callers_arrays():
    A = np.arange(3.0)
    c0 = sg.placeholder((3,), name="c0")
    X = sg.placeholder((None, 3), name="X")
    for body in (lambda c, x: (c, None), lambda c, x: (c.reshape((3,)), c), lambda c, x: (c[::-1], x)):
        outs = tree_leaves(sg.scan(body, c0, xs=X))
        for opt in (True, False):
            fn = sg.compile(outs, inputs=[c0, X], optimize=opt)
            for steps in (0, 1, 2):
                Xs = np.ones((steps, 3))
                for out in fn(A, Xs):
                    assert not np.shares_memory(out, A) and not np.shares_memory(out, Xs)


def test_views_of_a_parameter_as_carry_and_ys_hold_the_values_before_its_update():
    W = sg.parameter(np.arange(4.0).reshape(2, 2), name="W")
    X = sg.placeholder((None,), name="X")
    c, ys = sg.scan(lambda c, x: (W.T, W[0] * x), sg.constant(np.zeros((2, 2))), xs=X)
    fn = sg.compile([c, ys], inputs=[X], updates=[(W, W * 10.0)])
    c_out, ys_out = fn(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(c_out, [[0.0, 2.0], [1.0, 3.0]])
    np.testing.assert_array_equal(ys_out, [[0.0, 1.0], [0.0, 2.0]])
    np.testing.assert_array_equal(W.value, [[0.0, 10.0], [20.0, 30.0]])


# ------------------------------------------------------------------ gradients taken inside the body
def test_gradient_descent_inside_the_body_differentiated_again():
    """A meta-learning loop: each step takes a gradient of an inner loss in the body (sg.grad on the
    carry's placeholder), and the outer loss is differentiated through those steps (second order)."""
    def model(m, X, c0):
        def step(c, x):
            inner = m.sum((c * x - 1.0) ** 2.0)
            if m.name == "staticgrad":
                (g,) = sg.grad(inner, [c])
            elif m.name == "eager":
                (g,) = eager.grad(inner, [c], create_graph=True)
            else:
                g = 2.0 * (c * x - 1.0) * x
            return c - 0.1 * g, inner
        return m.scan(step, c0, xs=X)
    check(model, rand(4, 3), rand(3), order=2)


def test_one_forward_loop_after_passes_that_rewrote_the_body():
    X = sg.placeholder((4, 3), name="X", requires_grad=True)
    _, hs = sg.scan(lambda h, x: (sg.tanh(h * 1.0 + x * (sg.constant(2.0) * 3.0)), h), sg.constant(np.zeros(3)),
                    xs=X)
    loss = sg.sum(hs * hs)
    fn = sg.compile([loss] + sg.grad(loss, [X]), inputs=[X])
    assert [n.attrs["reverse"] for n in fn.ir.nodes.values() if n.op == "scan"].count(False) == 1


# ------------------------------------------------------------------ loops over constants only
def test_a_loop_over_constants_compiles():
    c, ys = sg.scan(lambda c, _: (c * 0.5 + 1.0, c), sg.constant(np.ones(2)), length=3)
    for opt in (False, True):
        got = sg.compile([c, ys], optimize=opt)()
        np.testing.assert_allclose(got[1], [[1.0, 1.0], [1.5, 1.5], [1.75, 1.75]])


def test_a_counter_left_alone_once_its_sum_is_sunk_compiles():
    X = sg.placeholder((3,), name="X")

    def step(c, x):
        k, s = c
        return (k + 1, s + x * sg.cast(k, "float64")), k
    (k, s), ks = sg.scan(step, (sg.constant(np.int64(0)), sg.constant(0.0)), xs=X)
    got = sg.compile([k, s, ks], inputs=[X])(np.array([1.0, 2.0, 3.0]))
    assert got[0] == 3 and got[1] == 8.0 and got[2].tolist() == [0, 1, 2]


def test_gradient_of_a_final_carry_weighted_by_a_constant_compiles():
    """The reverse loop of d sum(w * c_T) / dX for c' = c / 2 + x reads no stacked value: its inputs are
    all constants (w as its initial carry)."""
    X = sg.placeholder((4, 3), name="X", requires_grad=True)
    c, _ = sg.scan(lambda c, x: (c * 0.5 + x, None), sg.constant(np.ones(3)), xs=X)
    (g,) = sg.grad(sg.sum(c * np.arange(3.0)), [X])
    got = sg.compile(g, inputs=[X])(rand(4, 3))
    np.testing.assert_allclose(got, np.outer(0.5 ** np.arange(3, -1, -1), np.arange(3.0)))


def test_trace_shows_a_function_with_a_loop():
    X = sg.placeholder((None, 3), name="X", requires_grad=True)
    c, ys = sg.scan(lambda c, x: (sg.tanh(c + x), c), sg.constant(np.zeros(3)), xs=X)
    loss = sg.sum(ys * ys) + sg.sum(c)
    fn = sg.compile([loss] + sg.grad(loss, [X]), inputs=[X])
    assert "scan" in str(sg.trace(fn, np.ones((2, 3))))


# ------------------------------------------------------------------ modules and optimizers in a body
def test_adam_on_an_rnn_of_linear_modules_equals_torch_gradients_and_adams_rule():
    torch = pytest.importorskip("torch")
    X0, T0 = rand(5, 2, 3), rand(2, 4)
    cell, head = sg.nn.Linear(3 + 4, 4, seed=1, name="cell"), sg.nn.Linear(4, 4, seed=2, name="head")
    X = sg.placeholder((None, 2, 3), name="X")

    def step(h, x):
        h = sg.tanh(sg.concatenate([x, h], axis=1) @ cell.weight + cell.bias)
        return h, head(h)
    hT, outs = sg.scan(step, sg.constant(np.zeros((2, 4))), xs=X)
    loss = sg.mean((hT - T0) ** 2.0) + 0.1 * sg.mean(outs * outs)
    params = cell.parameters() + head.parameters()
    opt = sg.optim.Adam(params, lr=0.05)
    train = sg.compile(loss, inputs=[X], updates=opt.updates(loss))
    values = [p.value.copy() for p in params]
    moments = [(np.zeros_like(v), np.zeros_like(v)) for v in values]
    for step_number in range(1, 4):
        got = train(X0)
        tparams = [torch.tensor(v, requires_grad=True) for v in values]
        Wc, bc, Wh, bh = tparams
        h, total = torch.zeros((2, 4), dtype=torch.float64), 0.0
        for x in torch.tensor(X0):
            h = torch.tanh(torch.cat([x, h], dim=1) @ Wc + bc)
            o = h @ Wh + bh
            total = total + torch.sum(o * o)
        want = torch.mean((h - torch.tensor(T0)) ** 2) + 0.1 * total / (5 * 2 * 4)
        grads = torch.autograd.grad(want, tparams)
        assert got == pytest.approx(want.item(), rel=1e-10)
        for k, g in enumerate(grads):       # Adam's update (torch.optim.Adam's defaults), by hand
            m, v = moments[k]
            m, v = 0.9 * m + 0.1 * g.numpy(), 0.999 * v + 0.001 * g.numpy() ** 2
            moments[k] = (m, v)
            values[k] = values[k] - 0.05 * (m / (1 - 0.9 ** step_number)) / (
                np.sqrt(v / (1 - 0.999 ** step_number)) + 1e-8)
        for p, value in zip(params, values):
            np.testing.assert_allclose(p.value, value, rtol=1e-9, atol=1e-12)


def test_carries_ending_each_step_on_one_value_keep_their_own_start():
    """Two carries set to one body value each step still end a loop of no steps on their own inits
    (passes/loop_motion found a carry's new index by its body value, which both share)."""
    def model(m, X, a0, b0):
        return m.scan(lambda c, x: ((c[1] * x, c[1] * x, c[0]), c[2]), (a0, b0, a0 * 2.0), xs=X)
    for steps in (0, 1, 3):
        check(model, rand(steps, 3), rand(3), rand(3))
        check(model, rand(steps, 3), rand(3), rand(3), unknown=(0,))


def test_outer_values_and_constants_as_carries_and_ys():
    def model(m, X, W, c0):
        a, ys = m.scan(lambda c, x: (W[0] * 1.0, (c * x, W)), c0, xs=X)   # carry: an outer value
        b, zs = m.scan(lambda c, x: (c + x, W[1]), c0, xs=X)               # y: an outer value
        d, us = m.scan(lambda c, x: (m.const(np.ones(3)), c), c0, xs=X)      # carry: a constant
        return a, ys, b, zs, d, us
    check(model, rand(4, 3), rand(2, 3), rand(3), order=2)


# ------------------------------------------------------------------ unknown sizes inside the steps
def test_carries_and_slices_of_unknown_width():
    def model(m, X, c0, s0):
        return m.scan(lambda c, x: ((m.tanh(c[0] * x + c[1]), c[1] + m.sum(x)), c[0] * c[1]), (c0, s0), xs=X)
    for width in (1, 4):
        check(model, rand(3, width), rand(width), rand(), unknown=(0, 1))
    X = sg.placeholder((None, None), name="X")
    c0 = sg.placeholder((None,), name="c0")
    c, _ = sg.scan(lambda c, x: (c * x, None), c0, xs=X)
    assert sg.compile(c, inputs=[X, c0])(np.ones((2, 5)), np.ones(5)).shape == (5,)


@pytest.mark.parametrize("optimize", [True, False])
def test_a_carry_that_changes_size_at_run_time_is_refused(optimize):
    X = sg.placeholder((None, None), name="X")
    c0 = sg.placeholder((None,), name="c0")
    c, _ = sg.scan(lambda c, x: (c[1:] * 2.0, None), c0, xs=X)         # (n,) -> (n - 1,): known only when fed
    fn = sg.compile(c, inputs=[X, c0], optimize=optimize)
    for steps in (2, 0):        # (a loop of no steps too: its body is ill-formed at these sizes)
        with pytest.raises(sg.ShapeError, match=r"carry 0 of shape \(3,\) into one of shape \(2,\)") as err:
            fn(np.ones((steps, 3)), np.ones(3))
        assert "test_scan.py:" in str(err.value)


# ------------------------------------------------------------------ any pipeline, files, eager second order
def _mixed_loop():
    """A reverse loop of a tuple carry (float matrix, float sum, int counter) and dict ys, with grads."""
    X = sg.placeholder((None, 2, 3), name="X", requires_grad=True)
    W = sg.placeholder((3, 3), name="W", requires_grad=True)

    def step(c, x):
        h, s, k = c
        h = sg.tanh(x @ W + h @ W * 0.5)
        return (h, s + sg.sum(h * h) * sg.cast(k, "float64"), k + 1), {"h": h, "x2": x * 2.0}
    init = (sg.constant(np.zeros((2, 3))), sg.constant(0.0), sg.constant(np.int64(1)))
    (_, s, k), ys = sg.scan(step, init, xs=X, reverse=True)
    loss = s + sg.sum(ys["h"] * ys["x2"])
    return [X, W], [loss, k] + sg.grad(loss, [X, W])


PIPELINES = [[name] for name in sg.passes.PASSES] + [["loops", "loops"], ["dce", "loops", "cse", "loops"],
                                                     ["loops", "simplify", "constant_fold", "loops"]]


@pytest.mark.parametrize("pipeline", PIPELINES, ids="+".join)
def test_any_pipeline_computes_what_no_pass_does(pipeline):
    inputs, outs = _mixed_loop()
    X0, W0 = rand(4, 2, 3), rand(3, 3)
    want = sg.compile(outs, inputs=inputs, optimize=False)(X0, W0)
    for got, ref in zip(sg.compile(outs, inputs=inputs, passes=pipeline)(X0, W0), want):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)


def test_saved_and_loaded_function_with_loops(tmp_path):
    inputs, outs = _mixed_loop()
    fn = sg.compile(outs, inputs=inputs)
    sg.save(fn, tmp_path / "loops.sg")
    loaded = sg.load(tmp_path / "loops.sg")
    for steps in (3, 0, 1):
        X0, W0 = rand(steps, 2, 3), rand(3, 3)
        for a, b in zip(fn(X0, W0), loaded(X0, W0)):
            np.testing.assert_array_equal(a, b)


def test_gradient_with_respect_to_a_captured_intermediate():
    X = sg.placeholder((4, 3), name="X")
    A = sg.placeholder((3, 3), name="A", requires_grad=True)
    B = sg.sin(A) * 2.0
    c, ys = sg.scan(lambda h, x: (sg.tanh(h @ B + x), h), sg.constant(np.zeros(3)), xs=X)
    loss = sg.sum(ys * ys) + sg.sum(c)
    gB, gA = sg.compile(sg.grad(loss, [B, A]), inputs=[X, A])(rand(4, 3), A0 := rand(3, 3))
    np.testing.assert_allclose(gA, gB * 2.0 * np.cos(A0), rtol=1e-12)


def test_eager_second_order_through_a_loop_equals_compiled():
    X0, A0, V0 = rand(4, 3), rand(3, 3), rand(3, 3)

    def loss_of(A, X, h0):
        c, ys = sg.scan(lambda h, x: (sg.tanh(h @ (sg.sin(A) * 2.0) + x), h), h0, xs=X)
        return sg.sum(ys * ys) + sg.sum(c)
    A_e = eager.tensor(A0, requires_grad=True)
    (g_e,) = eager.grad(loss_of(A_e, eager.tensor(X0), eager.tensor(np.zeros(3))), [A_e], create_graph=True)
    (h_e,) = eager.grad(sg.sum(g_e * eager.tensor(V0)), [A_e])
    A, X, V = sg.placeholder((3, 3), name="A", requires_grad=True), sg.placeholder((4, 3), name="X"), \
        sg.placeholder((3, 3), name="V")
    (g,) = sg.grad(loss_of(A, X, sg.constant(np.zeros(3))), [A])
    (h,) = sg.grad(sg.sum(g * V), [A])
    g_s, h_s = sg.compile([g, h], inputs=[A, X, V])(A0, X0, V0)
    np.testing.assert_allclose(g_e.numpy(), g_s, rtol=1e-12)
    np.testing.assert_allclose(h_e.numpy(), h_s, rtol=1e-10, atol=1e-13)


# ------------------------------------------------------------------ failures while a loop runs
def test_check_numerics_names_the_body_op_that_made_a_nan():
    X = sg.placeholder((None, 2), name="X")
    c, _ = sg.scan(lambda c, x: (sg.log(c - x), None),
                   sg.constant(np.full(2, 3.0)), xs=X)
    for opt in (True, False):
        fn = sg.compile(c, inputs=[X], optimize=opt, check_numerics=True)
        with pytest.raises(sg.NumericsError, match=r"log .*test_scan.py:\d+"):
            fn(np.ones((5, 2)))


@pytest.mark.xfail(strict=True, reason=(
    "lower/interpret.failed_node looks the innermost '<staticgrad>' frame's line up in the outer plan's line "
    "table, but that frame is the body program's: the error names the outer node on that line number (here "
    "the exp before the loop), or none"))
def test_a_kernel_failing_inside_a_body_is_named(boom):
    from staticgrad.ops.registry import apply
    X = sg.placeholder((None, 2), name="X")
    Y = sg.exp(sg.sin(X) * 3.0) + 1.0
    c, _ = sg.scan(lambda c, x: (apply(boom, (c * 10.0 + x,)), None), sg.constant(np.ones(2)), xs=Y)
    fn = sg.compile(c, inputs=[X])
    with pytest.raises(sg.ExecutionError, match=rf"{boom} node .*test_scan.py:\d+.*value over 100"):
        fn(np.ones((5, 2)))


@pytest.mark.slow
def test_three_nested_loops_to_second_order():
    def inner(d, r):
        return sg.sin(d) + r, d

    def middle(e, row):
        d, ys = sg.scan(inner, e, xs=row)
        return d * 0.5 + sg.sum(ys, axis=0), d

    def outer(f, block):
        e, ys = sg.scan(middle, f, xs=block, reverse=True)
        return sg.tanh(e + f), sg.sum(ys)

    def f(A, f0):
        f, ys = sg.scan(outer, f0, xs=A)
        return sg.sum(f * f) + sg.sum(ys)
    check_grads(f, [rand(2, 2, 2, 3), rand(3)], order=2)


# ------------------------------------------------------------------ branches in the body
def test_a_branch_on_the_data_in_each_step():
    def model(m, X, W, c0):
        def step(c, x):
            c = m.cond(m.sum(x) > 0.0, lambda c, x: m.tanh(c @ W + x), lambda c, x: c * 0.5 - x, c, x)
            return c, m.cond(m.sum(c) > 0.0, lambda c: c * 2.0, lambda c: m.sin(c), c)
        return m.scan(step, c0, xs=X)
    X0 = rand(6, 3)
    X0[::2] = np.abs(X0[::2])
    X0[1::2] = -np.abs(X0[1::2])            # both branches taken
    check(model, X0, rand(3, 3), rand(3), order=2)
    check(model, X0, rand(3, 3), rand(3), unknown=(0,))


def test_a_loop_inside_a_branch():
    def model(m, X, a, c0):
        def loop(c):
            return m.scan(lambda d, x: (m.sin(d) * a + x, d * x), c, xs=X)
        return m.cond(m.sum(a) > 0.0, loop, lambda c: (c * 2.0, X * c), c0)
    for sign in (1.0, -1.0):
        check(model, rand(4, 3), np.abs(rand(3)) * sign, rand(3), order=2)
