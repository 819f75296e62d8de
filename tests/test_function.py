"""Calling a compiled function: feeds, outputs, updates, and what a failing call leaves behind."""
import re
import sys

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.ops.registry import apply


@pytest.fixture
def xt():
    x = sg.placeholder((None, 3), name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    W = sg.parameter(np.arange(6.0).reshape(3, 2), name="W")
    y = sg.sum(x @ W) + sg.sum(t)
    return x, t, W, y, sg.compile(y, inputs=[x, t])


def expected_y(X, T, W):
    return float((X @ W).sum() + T.sum())


# ------------------------------------------------------------------ ways to feed
def test_positional_feeds_follow_inputs(xt, rng):
    x, t, W, y, fn = xt
    X, T = rng.normal(size=(4, 3)), np.array([1, 2, 3, 4])
    assert float(fn(X, T)) == pytest.approx(expected_y(X, T, W.value))
    fn_swapped = sg.compile(y, inputs=[t, x])
    assert float(fn_swapped(T, X)) == pytest.approx(expected_y(X, T, W.value))


def test_dict_by_placeholder_and_by_name(xt, rng):
    x, t, W, y, fn = xt
    X, T = rng.normal(size=(2, 3)), np.array([5, 6])
    want = expected_y(X, T, W.value)
    assert float(fn({x: X, t: T})) == pytest.approx(want)
    assert float(fn({"x": X, "t": T})) == pytest.approx(want)
    assert float(fn({x: X, "t": T})) == pytest.approx(want)


def test_inputs_none_feeds_every_placeholder_by_dict(rng):
    x = sg.placeholder((None,), name="x")
    z = sg.placeholder((), name="z")
    fn = sg.compile(sg.sum(x) * z)
    assert float(fn({"x": np.ones(4), z: 2.0})) == 8.0
    assert float(fn(x=np.ones(4), z=2.0)) == 8.0
    # Several placeholders have no order the user gave: positional feeds would be a guess.
    with pytest.raises(sg.FeedError, match=r"compiled with inputs=None: feed its placeholders \('x', 'z'\)"):
        fn(np.ones(4), 2.0)
    one = sg.compile(sg.sum(x))         # one placeholder: its position is not in doubt
    assert float(one(np.ones(3))) == 3.0


def test_inputs_none_stays_dict_only_after_save_and_load(tmp_path):
    a, b = sg.placeholder((2,), name="a"), sg.placeholder((2,), name="b")
    sg.save(sg.compile(b - a), tmp_path / "f.npz")
    fn = sg.load(tmp_path / "f.npz")
    assert fn({"a": np.zeros(2), "b": np.ones(2)}).tolist() == [1.0, 1.0]
    with pytest.raises(sg.FeedError, match="inputs=None"):
        fn(np.zeros(2), np.ones(2))


def test_feeds_convert_lists_and_compatible_dtypes(xt):
    x, t, W, y, fn = xt
    # a list, float32 into float64, bool into int64: all castable with same_kind
    out = fn([[1.0, 0.0, 0.0]], np.array([True]))
    assert float(out) == pytest.approx(expected_y(np.array([[1.0, 0, 0]]), np.array([1]), W.value))
    out32 = fn(np.ones((2, 3), dtype=np.float32), np.array([1, 1], dtype=np.int32))
    assert float(out32) == pytest.approx(expected_y(np.ones((2, 3)), np.array([1, 1]), W.value))


def test_python_scalar_feed_for_a_0d_placeholder():
    s = sg.placeholder((), name="s")
    fn = sg.compile(s * 3.0, inputs=[s])
    out = fn(2)
    assert isinstance(out, np.ndarray) and out.shape == () and float(out) == 6.0


# ------------------------------------------------------------------ bad feeds
def assert_feed_error(info, name, *fragments):
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    assert re.search(rf"\b{name}\b", msg), msg
    for fragment in fragments:
        assert fragment in msg, (fragment, msg)


def test_missing_feed_by_dict(xt):
    x, t, W, y, fn = xt
    with pytest.raises(sg.FeedError) as info:
        fn({x: np.ones((2, 3))})
    assert_feed_error(info, "t", "(None,)", "int64")


def test_missing_feed_positionally(xt):
    # Too few positional feeds: the missing placeholder and what it expects are named.
    x, t, W, y, fn = xt
    with pytest.raises(sg.FeedError) as info:
        fn(np.ones((2, 3)))
    assert_feed_error(info, "t", "(None,)", "int64")


def test_too_many_positional_feeds(xt):
    x, t, W, y, fn = xt
    with pytest.raises(sg.FeedError):
        fn(np.ones((2, 3)), np.arange(2), np.arange(2))


def test_unknown_name_is_an_error(xt):
    x, t, W, y, fn = xt
    with pytest.raises(sg.FeedError) as info:
        fn({x: np.ones((2, 3)), t: np.arange(2), "bogus": 1.0})
    assert_feed_error(info, "bogus")


def test_placeholder_that_is_not_an_input_is_an_error(xt):
    x, t, W, y, fn = xt
    other = sg.placeholder((None, 3), name="other")
    with pytest.raises(sg.FeedError) as info:
        fn({other: np.ones((2, 3)), x: np.ones((2, 3)), t: np.arange(2)})
    assert_feed_error(info, "other")


def test_feeding_the_same_placeholder_twice_is_an_error(xt):
    x, t, W, y, fn = xt
    with pytest.raises(sg.FeedError, match="x"):
        fn({x: np.ones((2, 3)), "x": np.ones((2, 3)), t: np.arange(2)})


@pytest.mark.parametrize("value, given_shape, given_dtype", [
    (np.ones(3), "(3,)", "float64"),                  # wrong rank
    (np.ones((2, 3, 1)), "(2, 3, 1)", "float64"),     # wrong rank
    (np.ones((2, 4)), "(2, 4)", "float64"),           # wrong size on a fixed axis
    (np.ones((2, 3), dtype=np.complex128), "(2, 3)", "complex128"),
    (np.array([["a", "b", "c"]]), "(1, 3)", "<U1"),
    (np.array([[object(), 1, 2]], dtype=object), "(1, 3)", "object"),
], ids=["rank1", "rank3", "size", "complex", "text", "object"])
def test_bad_feed_for_x_names_it_with_expected_and_given(xt, value, given_shape, given_dtype):
    x, t, W, y, fn = xt
    with pytest.raises(sg.FeedError) as info:
        fn(value, np.arange(2))
    assert_feed_error(info, "x", "(None, 3)", "float64", given_shape, given_dtype)


@pytest.mark.parametrize("value, given_dtype", [
    (np.array([0.5, 1.5]), "float64"),
    (np.array([1.0, 2.0], dtype=np.float32), "float32"),
    (np.array(["1", "2"]), "<U1"),
], ids=["float", "float32", "text"])
def test_float_or_text_into_int_placeholder_is_an_error(xt, value, given_dtype):
    x, t, W, y, fn = xt
    with pytest.raises(sg.FeedError) as info:
        fn(np.ones((2, 3)), value)
    assert_feed_error(info, "t", "(None,)", "int64", "(2,)", given_dtype)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)   # a dtype problem


def test_bad_feed_by_dict_names_the_placeholder(xt):
    x, t, W, y, fn = xt
    with pytest.raises(sg.FeedError) as info:
        fn({"x": np.ones((2, 5)), "t": np.arange(2)})
    assert_feed_error(info, "x", "(None, 3)", "(2, 5)")


def test_fixed_size_placeholder_rejects_other_sizes():
    p = sg.placeholder((2, 2), name="p")
    fn = sg.compile(sg.sum(p), inputs=[p])
    assert float(fn(np.ones((2, 2)))) == 4.0
    with pytest.raises(sg.FeedError) as info:
        fn(np.ones((3, 2)))
    assert_feed_error(info, "p", "(2, 2)", "(3, 2)")


# ------------------------------------------------------------------ outputs
def test_single_output_is_an_array_0d_for_a_scalar(xt):
    x, t, W, y, fn = xt
    out = fn(np.ones((2, 3)), np.arange(2))
    assert type(out) is np.ndarray and out.shape == () and out.dtype == np.float64


def test_list_of_outputs_returns_a_list_even_of_one(rng):
    x = sg.placeholder((None, 2), name="x")
    fn1 = sg.compile([sg.sum(x)], inputs=[x])
    fn2 = sg.compile([sg.sum(x), x * 2.0], inputs=[x])
    X = rng.normal(size=(3, 2))
    one = fn1(X)
    assert isinstance(one, list) and len(one) == 1 and type(one[0]) is np.ndarray and one[0].shape == ()
    s, d = fn2(X)
    assert type(s) is np.ndarray and s.shape == () and d.shape == (3, 2)
    np.testing.assert_allclose(d, 2 * X)


def test_leaves_as_outputs(rng, compile_both):
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter(rng.normal(size=(2, 2)), name="W")
    c = sg.constant(np.array([1.0, 2.0]))
    X = rng.normal(size=(3, 2))
    (x_out, W_out, c_out), _ = compile_both([x, W, c], (X,), inputs=[x])
    np.testing.assert_array_equal(x_out, X)
    np.testing.assert_array_equal(W_out, W.value)
    np.testing.assert_array_equal(c_out, [1.0, 2.0])
    W_out[...] = 0.0            # the caller's copy: the parameter must not change
    assert W.value.any()


def test_outputs_survive_the_next_call(rng, compile_both):
    # Buffers may be reused inside a call, never across what a caller already holds.
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3, 3)), name="W")
    h = sg.tanh(x @ W)
    gW = sg.grad(sg.sum(h * h), W)
    X1, X2 = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    first, fn = compile_both([h, gW, sg.sum(h)], (X1,), inputs=[x])
    kept = [a.copy() for a in first]
    fn(X2)
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)


def test_feeds_and_parameters_are_not_written_into(rng, compile_both):
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3,)), name="W")
    y = sg.relu(-(x * 2.0)) + sg.exp(W) * x - W
    X = rng.normal(size=(5, 3))
    X_copy, W_copy = X.copy(), W.value.copy()
    a, fn = compile_both([y, sg.grad(sg.sum(y), W)], (X,), inputs=[x])
    b = fn(X)
    np.testing.assert_array_equal(X, X_copy)
    np.testing.assert_array_equal(W.value, W_copy)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_float32_stays_float32(rng, compile_both):
    x = sg.placeholder((None, 2), dtype="float32", name="x")
    W = sg.parameter(rng.normal(size=(2, 2)).astype(np.float32), name="W")
    y = sg.mean(sg.sigmoid(x @ W) * 2.0 + 1)
    gW = sg.grad(y, W)
    out, _ = compile_both([y, gW], (np.ones((3, 2), dtype=np.float32),), inputs=[x], updates=[(W, W - 0.1 * gW)])
    assert out[0].dtype == np.float32 and out[1].dtype == np.float32
    assert W.value.dtype == np.float32


# ------------------------------------------------------------------ updates
def test_updates_use_values_from_before_the_call(compile_both):
    A = sg.parameter(np.array([1.0, 2.0]), name="A")
    B = sg.parameter(np.array([10.0, 20.0]), name="B")
    out, fn = compile_both([A * 1.0, B * 1.0], updates=[(A, A + B), (B, A * 2.0)])
    np.testing.assert_array_equal(out[0], [1.0, 2.0])       # outputs see the old values
    np.testing.assert_array_equal(out[1], [10.0, 20.0])
    np.testing.assert_array_equal(A.value, [11.0, 22.0])
    np.testing.assert_array_equal(B.value, [2.0, 4.0])       # from the old A, not the new one


def test_swapping_two_parameters_with_updates(compile_both):
    A = sg.parameter(np.array([1.0, 2.0]), name="A")
    B = sg.parameter(np.array([3.0, 4.0]), name="B")
    _, fn = compile_both([], updates={A: B, B: A})
    np.testing.assert_array_equal(A.value, [3.0, 4.0])
    np.testing.assert_array_equal(B.value, [1.0, 2.0])
    fn()
    np.testing.assert_array_equal(A.value, [1.0, 2.0])
    np.testing.assert_array_equal(B.value, [3.0, 4.0])
    A.value[0] = 100.0             # after the swap the two parameters must not share memory
    assert B.value[0] == 3.0


def test_updates_accept_dict_and_python_scalars(compile_both):
    A = sg.parameter(np.array([1.0, 2.0]), name="A")
    s = sg.parameter(5.0, name="s")
    compile_both([], updates={A: A * 3.0, s: 0.0})
    np.testing.assert_array_equal(A.value, [3.0, 6.0])
    assert float(s.value) == 0.0 and s.value.shape == ()


@pytest.mark.parametrize("value", [lambda A: sg.sum(A), lambda A: sg.sum(A) + sg.constant(np.zeros(3))],
                         ids=["scalar", "row"])
def test_an_update_of_another_shape_is_refused_not_broadcast(value):
    A = sg.parameter(np.ones((2, 3)), name="A")
    with pytest.raises(sg.ShapeError, match=r"parameter .A. has shape .* expected \(2, 3\); .*\(at test_function"):
        sg.compile([], updates=[(A, value(A))])
    A2 = sg.parameter(np.ones((2, 3)), name="A2")
    fn = sg.compile([], updates=[(A2, sg.broadcast_to(sg.sum(A2), (2, 3)))])     # said outright, it is taken
    fn()
    np.testing.assert_array_equal(A2.value, np.full((2, 3), 6.0))


def test_a_number_as_update_fills_the_parameter():
    A = sg.parameter(np.ones((2, 3)), name="A")
    sg.compile([], updates={A: 0.0})()
    np.testing.assert_array_equal(A.value, np.zeros((2, 3)))


def test_an_output_that_is_also_an_update_does_not_alias_the_parameter(compile_both):
    W = sg.parameter(np.array([1.0, 2.0]), name="W")
    W_new = W * 2.0
    out, fn = compile_both(W_new, updates=[(W, W_new)])
    np.testing.assert_array_equal(out, [2.0, 4.0])
    np.testing.assert_array_equal(W.value, [2.0, 4.0])
    assert not np.shares_memory(out, W.value)
    out[...] = 0.0                      # the caller owns what it got back
    np.testing.assert_array_equal(W.value, [2.0, 4.0])
    np.testing.assert_array_equal(fn(), [4.0, 8.0])


def test_an_output_viewing_an_update_does_not_alias_the_parameter():
    W = sg.parameter(np.ones((20, 30)), name="W")         # large enough for numpy code, not scalar code
    x = sg.placeholder((20, 30), name="x")
    W_new = W - 0.5 * (x * x)            # written over a dying workspace value: could be handed to W
    fn = sg.compile([sg.transpose(W_new), sg.reshape(W_new, (600,))], inputs=[x], updates=[(W, W_new)])
    kept = []
    for _ in range(3):
        t_view, flat = fn(np.full((20, 30), 2.0))
        assert fn.report().summary["program"] == "numpy"
        assert not np.shares_memory(t_view, W.value) and not np.shares_memory(flat, W.value)
        np.testing.assert_array_equal(t_view.T, W.value)
        kept.append(t_view)
        flat[...] = 7.0                  # the caller owns what it got back
        assert (W.value != 7.0).all()
    for k, t_view in enumerate(kept):    # and later calls never write into it
        np.testing.assert_array_equal(t_view, np.full((30, 20), -1.0 - 2.0 * k))


def test_a_parameter_updated_to_a_constant_stays_writable_and_the_constant_intact():
    A = sg.parameter(np.array([1.0, 2.0]), name="A")
    fn = sg.compile([], updates={A: sg.constant(np.array([5.0, 6.0]))})
    fn()
    A.value[0] = 9.0
    fn()
    np.testing.assert_array_equal(A.value, [5.0, 6.0])


def test_setting_a_parameter_value_is_seen_by_the_next_call():
    A = sg.parameter(np.array([1.0, 2.0]), name="A")
    fn = sg.compile(sg.sum(A * A))
    assert float(fn()) == 5.0
    A.value = np.array([3.0, 0.0])
    assert float(fn()) == 9.0
    with pytest.raises(ValueError):
        A.value = np.ones(3)


def test_repeated_steps_follow_gradient_descent(rng):
    w = sg.parameter(np.array([3.0, -2.0]), name="w")
    loss = sg.sum(w * w)
    step = sg.compile(loss, updates=[(w, w - 0.25 * sg.grad(loss, w))])
    values = [float(step()) for _ in range(4)]
    assert values == [13.0, 13.0 / 4, 13.0 / 16, 13.0 / 64]
    np.testing.assert_allclose(w.value, np.array([3.0, -2.0]) / 16)


# ------------------------------------------------------------------ failing calls change nothing
def _training_step(rng, boom):
    x = sg.placeholder((None, 3), name="x")
    t = sg.placeholder((None,), name="t")
    W = sg.parameter(rng.normal(size=(3,)), name="W")
    b = sg.parameter(0.5, name="b")
    pred = sg.tanh(x * W) @ sg.constant(np.ones(3)) + b
    loss = sg.mean((pred - t) ** 2)
    gW, gb = sg.grad(loss, [W, b])
    W_new, b_new = W - 0.1 * gW, b - 0.1 * gb
    # the new W is read by an output that fails for large feeds: the failure comes after W_new exists
    checked = apply(boom, (sg.sum(x) + W_new,))
    return x, t, W, b, [loss, checked], [(W, W_new), (b, b_new)]


@pytest.mark.parametrize("bad", ["runtime", "feed", "batch"])
def test_a_call_that_raises_leaves_every_parameter_unchanged(bad, rng, boom):
    x, t, W, b, outputs, updates = _training_step(rng, boom)
    for optimize in (True, False):
        fn = sg.compile(outputs, inputs=[x, t], updates=updates, optimize=optimize)
        fn(np.ones((4, 3)), np.zeros(4))          # a good call first: a plan and buffers exist
        W_before, b_before = W.value.copy(), b.value.copy()
        with pytest.raises(ValueError):
            if bad == "runtime":
                fn(np.full((4, 3), 50.0), np.zeros(4))
            elif bad == "feed":
                fn(np.ones((4, 2)), np.zeros(4))
            else:
                fn(np.ones((4, 3)), np.zeros(5))   # batch sizes disagree: fails in the middle
        np.testing.assert_array_equal(W.value, W_before)
        np.testing.assert_array_equal(b.value, b_before)
        fn(np.ones((4, 3)), np.zeros(4))           # and the function still works afterwards
        assert not np.array_equal(W.value, W_before)


def test_runtime_failure_names_the_op_and_the_user_line(rng, boom):
    x = sg.placeholder((None,), name="x")
    y = sg.exp(x) * 2.0
    z = apply(boom, (y,)); line = f"test_function.py:{sys._getframe().f_lineno}"  # noqa: E702
    fn = sg.compile(sg.sum(z), inputs=[x])
    with pytest.raises(sg.ExecutionError) as info:
        fn(np.array([1.0, 10.0]))
    assert isinstance(info.value, ValueError)
    assert z.op in str(info.value) and line in str(info.value) and "boom" in str(info.value)


def test_batch_size_mismatch_at_run_time_is_a_clear_error(rng):
    x = sg.placeholder((None, 3), name="x")
    t = sg.placeholder((None,), name="t")
    y = sg.sum(x * sg.reshape(t, (-1, 1)))
    fn = sg.compile(y, inputs=[x, t])
    with pytest.raises(ValueError) as info:
        fn(np.ones((2, 3)), np.ones(3))
    assert "mul" in str(info.value) and "test_function.py:" in str(info.value)


def test_two_updates_with_one_value_leave_two_separate_arrays():
    a = sg.parameter(np.zeros(3), name="a")
    b = sg.parameter(np.zeros(3), name="b")
    x = sg.placeholder((3,), name="x")
    new = a + x
    fn = sg.compile(sg.sum(new), inputs=[x], updates=[(a, new), (b, new)])
    out = fn(np.ones(3))
    assert a.value is not b.value
    a.value[0] = 7.0                          # writing one parameter must not change the other
    np.testing.assert_array_equal(b.value, np.ones(3))
    out[...] = 0.0
    np.testing.assert_array_equal(a.value[1:], np.ones(2))


# ------------------------------------------------------------------ new parameter values take workspace buffers
def _sgd(rng):
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3, 2)), name="W")
    b = sg.parameter(rng.normal(size=2), name="b")
    loss = sg.mean(sg.tanh(x @ W + b) ** 2)
    gW, gb = sg.grad(loss, [W, b])
    fn = sg.compile(loss, inputs=[x], updates=[(W, W - 0.5 * gW), (b, b - 0.5 * gb)])
    return x, W, b, fn


def test_new_parameter_values_are_written_over_a_dying_buffer_then_handed_over(rng):
    _, W, b, fn = _sgd(np.random.default_rng(1))
    x2, W2, b2, fresh = _sgd(np.random.default_rng(1))
    held, seen, fresh_seen = [], set(), set()
    for k in range(6):
        X = rng.normal(size=(5 if k % 2 else 4, 3))        # two plans, each with its own workspace
        fn(X)
        held += [W2.value, b2.value]      # holding every old value: ``fresh`` must allocate each time
        fresh({x2: X})                    # (and by dict: the other calling path)
        seen.add(id(W.value))
        fresh_seen.add(id(W2.value))
        np.testing.assert_array_equal(W.value, W2.value)     # the same bits either way
        np.testing.assert_array_equal(b.value, b2.value)
    assert len(seen) <= 4                                     # two arrays per plan take turns
    assert len(fresh_seen) == 6
    assert re.search(r"= sub_\d+\(p_W, v\d+, (w\d+)\)  # sub \[update\] .*; \1 becomes W's array", fn.source)


def test_a_step_whose_updates_all_stay_in_their_buffers_skips_the_general_checks(rng, monkeypatch):
    # The checks a training step needs no more of: its new values are the plan's own buffers.
    x, W, b, fn = _sgd(rng)
    X = rng.normal(size=(4, 3))
    fn(X)
    monkeypatch.setattr(type(fn), "_assign_checked", lambda *args: pytest.fail("took the general path"))
    W_before = W.value.copy()
    fn(X)
    assert not np.array_equal(W.value, W_before)
    # an update no buffer holds (a parameter set to a feed) takes the general path, and its copy
    y = sg.placeholder((3, 2), name="y")
    W3 = sg.parameter(np.zeros((3, 2)), name="W3")
    set_to = sg.compile([], inputs=[y], updates=[(W3, y)])
    with pytest.raises(pytest.fail.Exception):
        set_to(np.ones((3, 2)))


def _tracer(frame, event, arg):
    _ = frame.f_locals           # as a debugger does: local variables copied into a dict on every line
    return _tracer


@pytest.mark.parametrize("traced", [False, True])
def test_an_old_value_someone_still_holds_is_never_written(rng, traced):
    X = rng.normal(size=(5, 3))
    _, W, b, fn = _sgd(rng)
    fn(X)
    kept = W.value                     # the caller keeps the value of one step...
    row = b.value[:1]                  # ...and a view of another
    kept_copy, row_copy = kept.copy(), row.copy()
    if traced:
        sys.settrace(_tracer)          # reference counts seen under a debugger must not fool the check
    try:
        for _ in range(4):
            fn(X)
            assert W.value is not kept
    finally:
        sys.settrace(None)
    np.testing.assert_array_equal(kept, kept_copy)
    np.testing.assert_array_equal(row, row_copy)


def test_a_failed_call_after_a_handover_still_changes_nothing(rng, boom):
    x, t, W, b, outputs, updates = _training_step(rng, boom)
    fn = sg.compile(outputs, inputs=[x, t], updates=updates)
    for _ in range(3):                 # buffers have changed hands a few times
        fn(np.ones((4, 3)), np.zeros(4))
    assert "becomes W's array" in fn.source
    W_before, b_before = W.value.copy(), b.value.copy()
    with pytest.raises(ValueError):
        fn(np.full((4, 3), 50.0), np.zeros(4))     # fails after the new W was written into the buffer
    np.testing.assert_array_equal(W.value, W_before)
    np.testing.assert_array_equal(b.value, b_before)
    fn(np.ones((4, 3)), np.zeros(4))
    assert not np.array_equal(W.value, W_before)


def test_scalar_plan_falling_back_to_numpy_hands_buffers_over_safely():
    x = sg.placeholder((2,), name="x")
    w = sg.parameter(np.array([1.0, 2.0]), name="w")
    fn = sg.compile(sg.sum(sg.sqrt(x) * w), inputs=[x], updates=[(w, w - 0.5 * x)])
    expected = np.array([1.0, 2.0])
    with np.errstate(invalid="ignore"):
        for X in ([1.0, 4.0], [-1.0, 4.0], [1.0, 4.0], [-1.0, 9.0], [-4.0, 1.0]):
            fn(np.array(X))          # sqrt(-1): the scalar code gives up and the numpy plan runs
            expected = expected - 0.5 * np.array(X)
            np.testing.assert_array_equal(w.value, expected)
            program = fn.program
            assert all(w.value is not v for v in program.namespace.values())
    assert fn.report().summary["program"] == "scalar" and program.handoff


def test_feeds_whose_sizes_disagree_name_the_op_and_the_placeholders():
    x = sg.placeholder((None, 2), name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    W = sg.parameter(np.ones((2, 3)), name="W")
    loss = sg.softmax_cross_entropy(x @ W, t)          # the loss is 0-d: its static shape is exact
    (gW,) = sg.grad(loss, [W])
    step = sg.compile(loss, inputs=[x, t], updates=[(W, W - 0.1 * gW)])
    line = loss.source
    with pytest.raises(sg.ShapeError, match=rf"softmax_cross_entropy \(built at {line}\).*'x' \(3, 2\), 't' \(4,\)"):
        step(np.ones((3, 2)), np.zeros(4, dtype=np.int64))
    np.testing.assert_array_equal(W.value, np.ones((2, 3)))
    step(np.ones((4, 2)), np.zeros(4, dtype=np.int64))   # consistent sizes still run


@pytest.mark.parametrize("update", ["x", "x * 1.0", "stop_gradient(x)", "gradient"])
def test_a_parameter_updated_to_a_feed_owns_its_array(update):
    W = sg.parameter(np.zeros(100), name="W")
    x = sg.placeholder((100,), name="x")
    new = {"x": lambda: x, "x * 1.0": lambda: x * 1.0, "stop_gradient(x)": lambda: sg.stop_gradient(x),
           "gradient": lambda: sg.grad(sg.sum(x * W), [W])[0]}[update]()
    fn = sg.compile(sg.sum(W * x), inputs=[x], updates=[(W, new)])
    fn(np.zeros(100))                        # the first call builds the plan; later ones take the fast path
    X = np.ones(100)
    fn(X)
    X[:] = 7.0                               # the caller reuses its array
    np.testing.assert_array_equal(W.value, np.ones(100))
    assert not np.shares_memory(W.value, X)


def test_source_before_any_call_is_the_plan_for_static_shapes():
    # issue 3's memory planning is visible at once: buffers reused through out=, and no plan is cached by
    # looking (the first call still picks its own kind of plan)
    x = sg.placeholder((4, 3), name="x")
    W = sg.parameter(np.ones((3, 2)), name="W")
    loss = sg.sum(sg.tanh(x @ W))
    fn = sg.compile([loss, *sg.grad(loss, [W])], inputs=[x])
    assert re.search(r"= matmul_\d+\(x, p_W, (out=)?w2\)", fn.source)     # the product written into workspace buffer w2
    assert fn.report()["plans"] == 0
    fn(np.ones((4, 3)))
    assert fn.report()["plans"] == 1
    y = sg.placeholder((None, 3), name="y")
    assert "def run(" in sg.compile(sg.sum(y * 2.0), inputs=[y]).source      # unknown size: generic code


def test_report_answers_in_and_get_from_its_summary():
    x = sg.placeholder((None,), name="x")
    fn = sg.compile(x * 2.0, inputs=[x])
    for n in (3, 4, 3, 4):
        fn(np.ones(n))
    report = fn.report()
    assert "plans" in report and report.get("plans") == 2 and report["plans"] == 2
    assert "no such key" not in report and report.get("no such key", 7) == 7


def test_plans_built_counts_every_plan_including_those_rebuilt_after_the_cache_dropped_them(monkeypatch):
    x = sg.placeholder((None,), name="x")
    fn = sg.compile(x * 2.0, inputs=[x])
    monkeypatch.setattr(fn, "MAX_PLANS", 2)
    for n in (3, 4, 3, 5, 3):           # 5 drops the plan for 3 (the oldest), so the last 3 builds it again
        fn(np.ones(n))
    assert fn.plans_built == 4 and fn.report()["plans"] == 2


def test_a_dict_feed_takes_the_fast_path_and_bad_dicts_still_get_their_errors():
    x, z = sg.placeholder((None,), name="x"), sg.placeholder((), name="z")
    fn = sg.compile(x * z)                         # inputs=None: fed by dict or name only
    fn({x: np.ones(3), "z": 2.0})
    fn._call = None                                # a dict of every input, once each, never takes the slow path
    np.testing.assert_array_equal(fn({x: np.ones(3), z: 3.0}), [3.0] * 3)
    np.testing.assert_array_equal(fn(x=np.ones(3), z=4.0), [4.0] * 3)
    del fn._call
    with pytest.raises(sg.FeedError, match="fed twice"):
        fn({x: np.ones(3), "x": np.ones(3)})
    with pytest.raises(sg.FeedError, match="not an input placeholder"):
        fn({x: np.ones(3), "w": 1.0})
