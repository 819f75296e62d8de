"""Tensor and the leaves: static shapes and dtypes, operators, Python scalars, errors, name scopes."""
import os
import sys

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import tensor


def run(y, feeds=None):
    """Value of ``y`` (placeholders fed by dict)."""
    return sg.compile(y)(feeds or {})


# ------------------------------------------------------------------ leaves
def test_placeholder_defaults():
    x = sg.placeholder((None, 3))
    assert x.shape == (None, 3) and x.dtype == np.float64
    assert x.requires_grad is False and x.name is None
    assert x.value is None


def test_placeholder_normalizes_shape_and_dtype():
    x = sg.placeholder([np.int64(2), None], dtype=np.int32, name="idx")
    assert x.shape == (2, None) and isinstance(x.shape[0], int)
    assert x.dtype == np.dtype("int32") and x.name == "idx"


def test_placeholder_errors():
    with pytest.raises(ValueError):
        sg.placeholder((-1, 3))
    with pytest.raises(ValueError):
        sg.placeholder((3,), dtype="int64", requires_grad=True)    # integers have no gradient
    for dtype in (object, "str", "datetime64[s]"):                 # refused here, not at the first op
        with pytest.raises(TypeError, match=r"placeholder 'p': expected a numeric dtype.*test_tensor.py:\d+"):
            sg.placeholder((2,), dtype=dtype, name="p")
    with pytest.raises(TypeError, match="placeholder 'q': sizes must be integers"):
        sg.placeholder((2.5,), name="q")
    with pytest.raises(TypeError, match="placeholder 'q': sizes must be integers"):
        sg.placeholder((True, 3), name="q")


def test_parameter_copies_its_value_and_requires_grad():
    init = np.array([1.0, 2.0])
    W = sg.parameter(init, name="W")
    init[0] = 100.0
    assert W.requires_grad is True and W.shape == (2,) and W.dtype == np.float64
    np.testing.assert_array_equal(W.value, [1.0, 2.0])


def test_parameter_dtypes():
    assert sg.parameter(np.ones(2, dtype=np.float32)).dtype == np.float32
    assert sg.parameter(3).dtype.kind == "f"               # integers become floating
    assert sg.parameter(0.5).shape == ()
    with pytest.raises(TypeError):
        sg.parameter(np.array(["a"]))


def test_constant_is_fixed():
    c = sg.constant([1, 2, 3], name="c")
    assert c.requires_grad is False and c.shape == (3,) and c.dtype.kind == "i"
    np.testing.assert_array_equal(c.value, [1, 2, 3])
    with pytest.raises(TypeError):
        c.value = np.zeros(3)
    with pytest.raises(TypeError):
        sg.constant("text")


def test_setting_a_parameter_value_checks_shape_and_dtype():
    W = sg.parameter(np.zeros((2, 2)), name="W")
    W.value = np.ones((2, 2), dtype=np.float32)               # cast to the parameter's dtype
    assert W.value.dtype == np.float64 and W.value.sum() == 4.0
    new = np.full((2, 2), 3.0)
    W.value = new
    new[0, 0] = -1.0                                          # the parameter keeps its own copy
    assert W.value[0, 0] == 3.0
    with pytest.raises(sg.ShapeError, match="W"):
        W.value = np.ones(3)
    with pytest.raises(TypeError):
        W.value = np.array([["a", "b"], ["c", "d"]])
    with pytest.raises(TypeError):
        sg.placeholder((2,)).value = np.ones(2)


def test_error_classes_derive_from_value_error():
    for cls in (sg.StaticgradError, sg.ShapeError, sg.FeedError, sg.GradError, sg.ExecutionError):
        assert issubclass(cls, ValueError)


def test_symbolic_tensors_have_no_truth_value_and_no_iteration():
    x = sg.placeholder((3,), name="x")
    with pytest.raises(TypeError):
        bool(x)
    with pytest.raises(TypeError):
        if x > 0:
            pass
    with pytest.raises(TypeError):
        list(x)


def test_tensors_are_hashable_by_identity():
    a, b = sg.placeholder((2,), name="a"), sg.placeholder((2,), name="a")
    assert len({a: 1, b: 2}) == 2


def test_source_is_the_users_line():
    x = sg.placeholder((2,), name="x"); line = sys._getframe().f_lineno  # noqa: E702
    y = x * 2.0 + 1.0; line_y = sys._getframe().f_lineno  # noqa: E702
    assert x.source == f"test_tensor.py:{line}"
    assert y.source == f"test_tensor.py:{line_y}"


def test_user_code_files_of_the_package_are_not_looked_past():
    package = os.path.dirname(tensor.__file__)
    assert tensor.library_file(os.path.join(package, "nn", "layers.py"))
    assert not tensor.library_file(os.path.join(package, "demo_model.py"))     # listed in USER_CODE
    assert not tensor.library_file(package + "-demo" + os.sep + "moons.py")    # a sibling folder is not the package
    assert not tensor.library_file(__file__)


# ------------------------------------------------------------------ names
def test_named_names_the_tensor_and_returns_it():
    x = sg.placeholder((3,), name="x")
    loss = sg.sum(x * x)
    assert loss.named("loss") is loss and loss.name == "loss" and loss.label() == "loss"
    assert "'loss'" in repr(loss)
    for bad in ("", None, 3):
        with pytest.raises(TypeError, match=r"named: expected a non-empty string, got .*\(at test_tensor.py:\d+\)"):
            loss.named(bad)


def test_errors_call_tensors_by_their_names():
    x, W = sg.placeholder((3, 4), name="x"), sg.parameter(np.zeros((5, 2)), name="W")
    with pytest.raises(sg.ShapeError, match=r"^matmul: shapes .* \(inputs x, W\) \(at test_tensor"):
        x @ W
    h = (x * 2.0).named("h")
    with pytest.raises(sg.GradError, match=r"^grad: y \('h'\) has shape \(3, 4\)"):
        sg.grad(h, [W])
    with pytest.raises(sg.ShapeError) as unnamed:
        sg.placeholder((3,)) + sg.placeholder((2,))
    assert "inputs" not in str(unnamed.value)          # nothing named: the shapes say it all


# ------------------------------------------------------------------ operators
def test_operators_compute_what_numpy_computes(rng):
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(rng.normal(size=(3,)), name="W")
    M = sg.parameter(rng.normal(size=(3, 4)), name="M")
    X = rng.uniform(0.5, 2.0, size=(2, 3))
    Wv = W.value
    cases = [
        (x + W, X + Wv), (x - W, X - Wv), (x * W, X * Wv), (x / W, X / Wv), (x ** 2, X ** 2),
        (x @ M, X @ M.value), (W @ M, Wv @ M.value), (-x, -X), (2.0 - x, 2.0 - X), (1.0 / x, 1.0 / X),
        (2.0 ** x, 2.0 ** X),
        (3 * x, 3 * X), (x.T, X.T), (x[1:, ::2], X[1:, ::2]), (x[:, 0], X[:, 0]), (x[-1], X[-1]),
        (x.sum(), X.sum()), (x.mean(axis=0), X.mean(axis=0)), (x.max(axis=1, keepdims=True),
                                                                X.max(axis=1, keepdims=True)),
        (x.reshape((-1,)), X.reshape(-1)), (x.transpose(), X.T), (x.transpose((1, 0)), X.T),
        (np.ones(3) + x, np.ones(3) + X), (np.ones((3, 3)) @ x.T, np.ones((3, 3)) @ X.T),
    ]
    fn = sg.compile([t for t, _ in cases], inputs=[x])
    for (t, want), got in zip(cases, fn(X)):
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=repr(t))
        assert got.shape == want.shape
        assert all(s is None or s == g for s, g in zip(t.shape, got.shape)) and len(t.shape) == got.ndim


def test_comparisons_give_booleans_and_no_gradient():
    x = sg.placeholder((3,), name="x")
    X = np.array([-1.0, 0.0, 2.0])
    results = [x < 0, x <= 0, x > 0, x >= 0]
    assert all(r.dtype == np.bool_ for r in results)
    got = sg.compile(results, inputs=[x])(X)
    for g, want in zip(got, [X < 0, X <= 0, X > 0, X >= 0]):
        np.testing.assert_array_equal(g, want)


def test_equality_is_elementwise_and_tensors_still_hash_by_identity():
    # As in numpy and PyTorch: x == 0 was a Python bool, so sg.where(x == 0, 1, x) silently chose x.
    x = sg.placeholder((3,), name="x")
    X = np.array([0.0, 2.0, 0.0])
    results = [x == 0.0, x != 0.0, 0.0 == x, np.zeros(3) == x, sg.equal(x, 0.0), sg.not_equal(x, x)]
    assert all(isinstance(r, sg.Tensor) and r.dtype == np.bool_ for r in results)
    got = sg.compile(results + [sg.where(x == 0.0, 1.0, x)], inputs=[x])(X)
    for g, want in zip(got, [X == 0, X != 0, X == 0, X == 0, X == 0, X != X, [1.0, 2.0, 1.0]]):
        np.testing.assert_array_equal(g, want)
    assert {x: 1}[x] == 1 and x in {x} and (x == None) is False and None not in (x, x)   # noqa: E711
    from staticgrad import eager
    np.testing.assert_array_equal((eager.tensor(X) == 0.0).value, X == 0)


def test_array_on_the_left_gives_a_tensor():
    x = sg.placeholder((3,), name="x")
    y = np.arange(3.0) * x
    assert isinstance(y, sg.Tensor) and y.shape == (3,)


def test_python_scalars_adopt_the_tensor_dtype():
    x32 = sg.placeholder((2,), dtype="float32", name="x32")
    i64 = sg.placeholder((2,), dtype="int64", name="i64")
    assert (x32 * 2.0).dtype == np.float32
    assert (2.5 - x32).dtype == np.float32
    assert (x32 ** 2).dtype == np.float32
    assert (i64 + 1).dtype == np.int64
    assert (i64 * 1.5).dtype.kind == "f"                     # a fraction cannot become an integer
    out = sg.compile(x32 * 0.1 + 1, inputs=[x32])(np.ones(2, dtype=np.float32))
    assert out.dtype == np.float32


def test_float32_stays_float32_through_ops():
    x = sg.placeholder((None, 2), dtype="float32", name="x")
    W = sg.parameter(np.ones((2, 2), dtype=np.float32))
    y = sg.softmax(sg.tanh(x @ W) + 1.0, axis=-1).sum(axis=0) / 3
    assert y.dtype == np.float32


def test_static_shapes_with_unknown_sizes():
    x = sg.placeholder((None, 4), name="x")
    assert (x + sg.constant(np.ones((1, 4)))).shape == (None, 4)
    assert sg.reshape(x, (-1, 2, 2)).shape == (None, 2, 2)
    assert sg.sum(x, axis=(0, 1)).shape == ()
    assert sg.stack([x, x], axis=1).shape == (None, 2, 4)


@pytest.mark.parametrize("index, static", [
    (np.s_[:64], (None, 3)), (np.s_[-5::2], (None, 3)), (np.s_[1:2], (None, 3)), (np.s_[0:1], (None, 3)),
    (np.s_[5:2], (0, 3)), (np.s_[:0], (0, 3)), (np.s_[:, 1:], (None, 2)), (np.s_[0], (3,)),
    (np.s_[np.array([0, 1])], (2, 3)), (np.s_[..., 0], (None,)), (np.s_[None, :2], (1, None, 3)),
    # bounds of both signs: empty at many rows, not at few (x[-1:5] of 3 rows has 1)
    (np.s_[-1:5], (None, 3)), (np.s_[2:-3:-1], (None, 3)), (np.s_[-10:2], (None, 3)), (np.s_[-1:-3], (0, 3)),
])
def test_a_slice_of_an_unknown_size_is_unknown(index, static):
    # a slice clips to the axis it cuts: x[:64] of 3 rows has 3 rows, however large 64 looks
    x = sg.placeholder((None, 3), name="x")
    assert x[index].shape == static
    fn = sg.compile(x[index] * 2.0, inputs=[x])
    for rows in (0, 1, 2, 3, 4, 70):
        if rows < 2 and isinstance(index, (int, np.ndarray)):
            continue                                  # an integer or index array needs rows it can read
        value = np.arange(rows * 3.0).reshape(rows, 3)
        np.testing.assert_array_equal(fn(value), value[index] * 2.0)


def test_len_of_a_known_leading_size():
    assert len(sg.placeholder((5, 2))) == 5
    with pytest.raises(TypeError):
        len(sg.placeholder((None, 2)))


# ------------------------------------------------------------------ name scopes
def test_name_scopes_nest_and_are_recorded():
    with sg.name_scope("model"):
        with sg.name_scope("layer1") as scope:
            a = sg.placeholder((2,), name="a") * 2.0
        b = sg.placeholder((2,), name="b") + 1.0
    c = sg.placeholder((2,), name="c")
    assert scope == "model/layer1"
    assert a.scope == "model/layer1" and b.scope == "model" and c.scope == ""


def test_name_scope_is_restored_after_an_error():
    with pytest.raises(RuntimeError):
        with sg.name_scope("broken"):
            raise RuntimeError("inside")
    assert sg.placeholder((1,)).scope == ""


def test_bad_scope_names():
    for bad in ("", "a/b", None):
        with pytest.raises(ValueError):
            with sg.name_scope(bad):
                pass
