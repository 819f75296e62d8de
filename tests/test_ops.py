"""Every op, checked from its spec in tests/op_specs.py: forward value, static shape/dtype, gradients."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager
from staticgrad.ops import REGISTRY, broadcast_to, expand_dims, squeeze
from staticgrad.testing import check_grads
from tests.op_specs import OP_SPECS

THIS_FILE = os.path.basename(__file__)
GRAD_SPECS = [s for s in OP_SPECS if s.grad]
NONDIFF_SPECS = [s for s in OP_SPECS if not s.grad]


def by_id(specs):
    return pytest.mark.parametrize("spec", specs, ids=lambda s: s.id)


def sample(spec):
    return spec.draw()


def placeholders(arrays, batch_none=False, requires_grad=False):
    """One placeholder per array; ``batch_none`` leaves its first dim unknown, "all" every dim."""
    out = []
    for k, a in enumerate(arrays):
        # A size-1 dim left unknown cannot be told from a broadcast one, so gradients keep it static.
        unknown = [bool(batch_none) and (batch_none == "all" or i == 0) and not (requires_grad and n == 1)
                   for i, n in enumerate(a.shape)]
        shape = tuple(None if u else n for u, n in zip(unknown, a.shape))
        grad = requires_grad and a.dtype.kind == "f"
        out.append(sg.placeholder(shape, dtype=a.dtype, name=f"in{k}", requires_grad=grad))
    return out


def evaluate(spec, arrays, batch_none=False, optimize=True):
    phs = placeholders(arrays, batch_none)
    y = spec.build(*phs)
    return y, sg.compile(y, inputs=phs, optimize=optimize)(*arrays)


def assert_static_matches(y, value):
    assert y.ndim == value.ndim, f"static shape {y.shape}, runtime {value.shape}"
    for static, actual in zip(y.shape, value.shape):
        assert static is None or static == actual, f"static shape {y.shape}, runtime {value.shape}"
    assert y.dtype == value.dtype, f"static dtype {y.dtype}, runtime {value.dtype}"


def as_float32(arrays):
    return [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays]


# ------------------------------------------------------------------ coverage
def test_every_op_has_a_spec():
    assert set(REGISTRY) <= {s.op for s in OP_SPECS}


def test_spec_ids_are_unique():
    ids = [s.id for s in OP_SPECS]
    assert len(ids) == len(set(ids))


# ------------------------------------------------------------------ forward values, shapes and dtypes
@by_id(OP_SPECS)
@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
def test_forward_matches_numpy(spec, optimize):
    arrays = sample(spec)
    y, value = evaluate(spec, arrays, optimize=optimize)
    expected = np.asarray(spec.reference(*arrays))
    assert value.shape == expected.shape
    assert value.dtype == expected.dtype
    np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-12)
    assert y.shape == value.shape and y.dtype == value.dtype


@by_id([s for s in OP_SPECS if s.dynamic])
@pytest.mark.parametrize("unknown", [True, "all"], ids=["batch", "all-dims"])
def test_static_shape_with_unknown_dims(spec, unknown):
    arrays = sample(spec)
    y, value = evaluate(spec, arrays, batch_none=unknown)
    assert_static_matches(y, value)
    np.testing.assert_allclose(value, spec.reference(*arrays), rtol=1e-12, atol=1e-12)


@by_id(OP_SPECS)
def test_float32_stays_float32(spec):
    arrays = sample(spec)
    small = as_float32(arrays)
    y, value = evaluate(spec, small)
    assert_static_matches(y, value)
    if spec.keeps_float and any(a.dtype.kind == "f" for a in arrays):
        assert value.dtype == np.float32
    np.testing.assert_allclose(value, spec.reference(*arrays), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ gradients
@by_id(GRAD_SPECS)
def test_grad(spec):
    assert check_grads(spec.build, sample(spec), order=spec.order, **spec.tol)


def first_grads(spec, arrays, batch_none=False, order=1):
    """Gradients of sum(y * w) for a fixed w with respect to every float input (with ``order=2`` followed by
    the Hessian-vector products for fixed directions), as tensors and as computed values."""
    phs = placeholders(arrays, batch_none, requires_grad=True)
    y = spec.build(*phs)
    rng = np.random.default_rng(1)
    weights = rng.uniform(0.5, 1.5, np.shape(spec.reference(*arrays)))
    loss = sg.sum(y * sg.constant(weights.astype(y.dtype)))
    wrt = [p for p in phs if p.requires_grad]
    grads = sg.grad(loss, wrt)
    if order == 2:
        directions = [rng.uniform(-1, 1, a.shape) for a in arrays if a.dtype.kind == "f"]
        z = sg.sum(sg.stack([sg.sum(g * sg.constant(v.astype(g.dtype))) for g, v in zip(grads, directions)]))
        grads = grads + sg.grad(z, wrt)
    return grads, sg.compile(grads, inputs=phs)(*arrays)


@by_id([s for s in GRAD_SPECS if s.dynamic])
@pytest.mark.parametrize("unknown", [True, "all"], ids=["batch", "all-dims"])
def test_grad_with_unknown_dims(spec, unknown):
    # The VJPs take runtime shapes (broadcast_like, reshape_like, split, size) when static ones are unknown,
    # and their own VJPs must do so too: compare gradients and Hessian-vector products with the static build.
    arrays = sample(spec)
    order = min(spec.order, 2)
    _, static_values = first_grads(spec, arrays, order=order)
    grads, values = first_grads(spec, arrays, batch_none=unknown, order=order)
    floats = [a for a in arrays if a.dtype.kind == "f"] * order
    assert len(values) == len(floats)
    for g, value, expected, a in zip(grads, values, static_values, floats):
        assert value.shape == a.shape
        assert_static_matches(g, value)
        np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-12)


@by_id(GRAD_SPECS)
def test_float32_gradients_stay_float32(spec):
    arrays = sample(spec)
    _, expected = first_grads(spec, arrays)
    grads, values = first_grads(spec, as_float32(arrays))
    for g, value, want in zip(grads, values, expected):
        assert g.dtype == np.float32 and value.dtype == np.float32
        np.testing.assert_allclose(value, want, rtol=2e-3, atol=2e-3)


@by_id([s for s in NONDIFF_SPECS if any(a.dtype.kind == "f" for a in sample(s))])
def test_nondifferentiable_ops_pass_no_gradient(spec):
    arrays = sample(spec)
    phs = placeholders(arrays, requires_grad=True)
    y = spec.build(*phs)
    loss = sg.sum(sg.ops.cast(y, np.float64) * 3.0)
    wrt = [p for p in phs if p.requires_grad]
    floats = [a for a in arrays if a.dtype.kind == "f"]
    for value, a in zip(sg.compile(sg.grad(loss, wrt), inputs=phs)(*arrays), floats):
        assert value.shape == a.shape
        assert not value.any()


# ------------------------------------------------------------------ what finite differences cannot see
def grads_at(fn, *arrays):
    phs = [sg.placeholder(a.shape, name=f"in{k}", requires_grad=True) for k, a in enumerate(arrays)]
    return sg.compile(sg.grad(fn(*phs), phs), inputs=phs)(*arrays)


def test_max_ties_share_the_gradient():
    (g,) = grads_at(lambda x: sg.max(x), np.array([1.0, 3.0, 3.0]))
    np.testing.assert_allclose(g, [0.0, 0.5, 0.5])
    (g,) = grads_at(lambda x: sg.sum(sg.min(x, axis=1)), np.array([[2.0, 2.0, 5.0], [1.0, 0.0, 0.0]]))
    np.testing.assert_allclose(g, [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])


def test_maximum_ties_split_evenly():
    gx, gy = grads_at(lambda x, y: sg.sum(sg.maximum(x, y)), np.array([1.0, 2.0, 3.0]), np.array([1.0, 5.0, 0.0]))
    np.testing.assert_allclose(gx, [0.5, 0.0, 1.0])
    np.testing.assert_allclose(gy, [0.5, 1.0, 0.0])


def test_relu_gradient_at_zero_is_zero():
    (g,) = grads_at(lambda x: sg.sum(sg.relu(x)), np.array([-1.0, 0.0, 2.0]))
    np.testing.assert_allclose(g, [0.0, 0.0, 1.0])


def test_abs_gradient_at_zero_is_zero():
    (g,) = grads_at(lambda x: sg.sum(sg.abs(x)), np.array([-1.0, 0.0, 2.0]))
    np.testing.assert_allclose(g, [-1.0, 0.0, 1.0])


def test_clip_gradient_passes_at_the_bounds():
    (g,) = grads_at(lambda x: sg.sum(sg.clip(x, -1.0, 1.0)), np.array([-2.0, -1.0, 0.0, 1.0, 2.0]))
    np.testing.assert_allclose(g, [0.0, 1.0, 1.0, 1.0, 0.0])


def test_stop_gradient_blocks_one_path_only():
    (g,) = grads_at(lambda x: sg.sum(x * sg.stop_gradient(x)), np.array([1.0, -2.0]))
    np.testing.assert_allclose(g, [1.0, -2.0])


def test_getitem_repeated_indices_accumulate():
    (g,) = grads_at(lambda x: sg.sum(x[np.array([0, 2, 2, 2])]), np.zeros(3))
    np.testing.assert_allclose(g, [1.0, 0.0, 3.0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the masked-out branch divides by zero
def test_pow_gradient_at_zero_base_is_finite():
    # d(x**y)/dy = x**y log x is 0 at x = 0 for y > 0 (the limit), as torch gives; never nan.
    gx, gy = grads_at(lambda x, y: sg.sum(x ** y), np.array([0.0, 2.0]), np.array([2.0, 3.0]))
    np.testing.assert_allclose(gx, [0.0, 12.0])
    np.testing.assert_allclose(gy, [0.0, 8.0 * np.log(2.0)])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pow_gradient_of_a_zero_exponent_is_zero():
    # d(x**0)/dx = 0 even at x = 0, where y * x**(y-1) would be 0 * inf (polynomial features hit this).
    (g,) = grads_at(lambda x: sg.sum(x ** np.arange(3)), np.zeros(3))
    np.testing.assert_allclose(g, [0.0, 1.0, 0.0])
    gx, gy = grads_at(lambda x, y: sg.sum(x ** y), np.array([0.0, 0.0]), np.array([0.0, 1.0]))
    np.testing.assert_allclose(gx, [0.0, 1.0])
    np.testing.assert_allclose(gy, [0.0, 0.0])


def test_softmax_cross_entropy_rejects_out_of_range_labels():
    logits = sg.placeholder((2, 3))
    labels = sg.placeholder((2,), dtype="int64")
    fn = sg.compile(sg.softmax_cross_entropy(logits, labels), inputs=[logits, labels])
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        fn(np.zeros((2, 3)), np.array([0, 3]))


# ------------------------------------------------------------------ principle 6: dtypes are kept
SCALAR_CASES = [
    ("tensor+float", lambda x: x + 1.5),
    ("float+tensor", lambda x: 1.5 + x),
    ("int*tensor", lambda x: 2 * x),
    ("tensor-int", lambda x: x - 1),
    ("float/tensor", lambda x: 1.0 / x),
    ("tensor**int", lambda x: x ** 2),
    ("float**tensor", lambda x: 2.0 ** x),
    ("maximum", lambda x: sg.maximum(x, 0.0)),
    ("minimum-first", lambda x: sg.minimum(0.5, x)),
    ("where", lambda x: sg.where(x > 0.0, x, 0.0)),
    ("clip", lambda x: sg.clip(x, 0, 1.5)),
    ("clip-one-sided", lambda x: sg.clip(x, None, 1)),
    ("concatenate", lambda x: sg.concatenate([x, x * 0.5])),
]


@pytest.mark.parametrize("case", SCALAR_CASES, ids=lambda c: c[0])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_python_scalars_adopt_the_tensor_dtype(case, dtype):
    x = sg.placeholder((3,), dtype=dtype, name="x")
    y = case[1](x)
    assert y.dtype == np.dtype(dtype)
    value = sg.compile(y, inputs=[x])(np.array([0.5, 1.0, 2.0], dtype=dtype))
    assert value.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_python_ints_keep_integer_tensors_integer(dtype):
    n = sg.placeholder((3,), dtype=dtype, name="n")
    y = sg.clip(n * 2 + 1, None, 6)
    assert y.dtype == np.dtype(dtype)
    value = sg.compile(y, inputs=[n])(np.array([1, 2, 3], dtype=dtype))
    assert value.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(value, [3, 5, 6])
    # A float scalar cannot be held by an integer tensor: numpy promotes, and so do we.
    assert (n * 0.5).dtype == np.float64


def test_float32_gradient_of_a_float32_loss_is_float32():
    x = sg.placeholder((2, 3), dtype="float32", requires_grad=True)
    loss = sg.mean(sg.softmax(x * 2.0) ** 2) + sg.logsumexp(x) / 3
    assert loss.dtype == np.float32
    g = sg.grad(loss, [x])[0]
    assert g.dtype == np.float32
    assert sg.compile(g, inputs=[x])(np.ones((2, 3), np.float32)).dtype == np.float32


# ------------------------------------------------------------------ build-time shape errors
def _ph(*shape, dtype="float64"):
    return sg.placeholder(shape, dtype=dtype)


SHAPE_ERRORS = [   # (op named in the message, shapes named in it, the expression that must fail)
    ("matmul", ["(3, 4)", "(5, 2)"], lambda: _ph(3, 4) @ _ph(5, 2)),
    ("matmul", ["(3,)", "(4,)"], lambda: sg.matmul(_ph(3), _ph(4))),
    ("matmul", ["(2, 2, 3)", "(3, 3, 2)"], lambda: _ph(2, 2, 3) @ _ph(3, 3, 2)),
    ("add", ["(3,)", "(4,)"], lambda: _ph(3) + _ph(4)),
    ("mul", ["(2, 3)", "(3, 2)"], lambda: sg.mul(_ph(2, 3), _ph(3, 2))),
    ("maximum", ["(None, 3)", "(2,)"], lambda: sg.maximum(_ph(None, 3), _ph(2))),
    ("where", ["(2,)", "(3,)"], lambda: sg.where(_ph(2, dtype=bool), _ph(3), 0.0)),
    ("concatenate", ["(2, 3)", "(2, 4)"], lambda: sg.concatenate([_ph(2, 3), _ph(2, 4)])),
    ("stack", ["(2, 3)", "(3, 2)"], lambda: sg.stack([_ph(2, 3), _ph(3, 2)])),
    ("reshape", ["(2, 3)", "(4,)"], lambda: _ph(2, 3).reshape(4)),
    ("softmax_cross_entropy", ["(3,)", "(4, 3)"], lambda: sg.softmax_cross_entropy(_ph(4, 3), _ph(3, dtype="int64"))),
    ("getitem", ["(3, 4)"], lambda: _ph(3, 4)[5]),
    ("getitem", ["(3, 4)"], lambda: _ph(3, 4)[0, 0, 0]),
    ("sum", [], lambda: sg.sum(_ph(2, 3), axis=2)),
    ("mean", [], lambda: _ph(2, 3).mean(axis=(0, 0))),
    ("transpose", ["(2, 3)"], lambda: sg.transpose(_ph(2, 3), (0, 0))),
    ("transpose", ["(2, 3)"], lambda: _ph(2, 3).transpose(0, 3)),
    ("softmax", [], lambda: sg.softmax(_ph(2, 3), axis=3)),
    ("log_softmax", [], lambda: sg.log_softmax(_ph(2, 3), axis=-3)),
    ("concatenate", [], lambda: sg.concatenate([_ph(2, 3), _ph(2, 3)], axis=2)),
    ("stack", [], lambda: sg.stack([_ph(2, 3), _ph(2, 3)], axis=4)),
    ("squeeze", ["(2, 3)"], lambda: squeeze(_ph(2, 3), 0)),
    ("squeeze", [], lambda: squeeze(_ph(2, 1), 2)),
    ("expand_dims", [], lambda: expand_dims(_ph(2, 3), 5)),
    ("broadcast_to", ["(2, 3)", "(3, 3)"], lambda: broadcast_to(_ph(2, 3), (3, 3))),
    ("clip", ["(2, 3)", "(4,)"], lambda: sg.clip(_ph(2, 3), _ph(4), 1.0)),
]


@pytest.mark.parametrize("op, shapes, make", SHAPE_ERRORS, ids=[f"{c[0]}-{k}" for k, c in enumerate(SHAPE_ERRORS)])
def test_shape_error_names_op_shapes_and_line(op, shapes, make):
    with pytest.raises(sg.ShapeError) as info:
        make()
    message = str(info.value)
    assert message.startswith(op + ":"), message
    for shape in shapes:
        assert shape in message, message
    # The lambda's line is where the user wrote the bad expression.
    assert f"{THIS_FILE}:{make.__code__.co_firstlineno}" in message, message


TYPE_ERRORS = [
    ("sum", lambda: sg.sum(_ph(2, 3), axis=1.5)),
    ("sum", lambda: sg.sum(_ph(2, 3), axis="0")),
    ("softmax", lambda: sg.softmax(_ph(2, 3), axis=True)),
    ("reshape", lambda: sg.reshape(_ph(2, 3), ("a", 3))),
    ("reshape", lambda: _ph(2, 3).reshape(6.0)),
    ("transpose", lambda: sg.transpose(_ph(2, 3), (1.0, 0.0))),
]


@pytest.mark.parametrize("op, make", TYPE_ERRORS, ids=[f"{c[0]}-{k}" for k, c in enumerate(TYPE_ERRORS)])
def test_arguments_numpy_refuses_are_type_errors_naming_op_and_line(op, make):
    # Like numpy, floats, strings and bools are not axes or sizes; the error names the op and the line.
    with pytest.raises(TypeError) as info:
        make()
    message = str(info.value)
    assert message.startswith(op + ":") and f"{THIS_FILE}:{make.__code__.co_firstlineno}" in message, message


def test_empty_concatenate_and_1d_matmul_messages_point_at_the_user():
    with pytest.raises(ValueError, match=rf"concatenate: need at least one tensor \(at {THIS_FILE}:\d+"):
        sg.concatenate([])
    with pytest.raises(sg.ShapeError, match=r"2 \(the only axis of the second\)"):
        _ph(3) @ _ph(2)


def test_matmul_of_a_scalar_and_indexing_with_a_tensor_are_refused_with_a_reason():
    with pytest.raises(sg.ShapeError, match=r"operands must be at least 1-D, got \(\) and \(3, 2\)"):
        sg.matmul(sg.constant(2.0), _ph(3, 2))
    with pytest.raises(sg.ShapeError, match=r"operands must be at least 1-D, got \(3,\) and \(\)"):
        sg.matmul(_ph(3), sg.constant(2.0))
    with pytest.raises(TypeError, match="indexing with a tensor is not supported; use where or a one-hot product"):
        _ph(3)[_ph(3)]


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_extrema_over_an_empty_axis_are_refused_naming_the_op(op):
    what = op.removeprefix("arg")
    with pytest.raises(sg.ShapeError, match=rf"^{op}: zero-size axis of \(0, 3\) has no {what} \(at {THIS_FILE}:"):
        getattr(sg, op)(_ph(0, 3), axis=0)


def test_stacking_tensors_of_different_shapes_names_the_shapes():
    with pytest.raises(sg.ShapeError, match=r"^stack: all inputs must have the same shape, got \(2,\), \(3,\)"):
        sg.stack([_ph(2), _ph(3)])


def test_shape_errors_are_value_errors():
    with pytest.raises(ValueError):
        _ph(3) + _ph(4)


def test_relu_kernel_has_numpys_bits_on_every_path():
    from staticgrad.ops.elementary import relu_kernel
    special = [-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45, 3.0, -3.0]
    for dtype in (np.float32, np.float64):
        for shape in [(4, 320), (640,), (3, 10), (2, 9000)]:     # zero-row path and scalar path
            x = np.resize(np.array(special, dtype), shape)
            for out in (None, np.empty(shape, dtype)):
                got = relu_kernel(x, out=out)
                want = np.maximum(x, 0)
                assert got.dtype == dtype and (out is None or got is out)
                np.testing.assert_array_equal(got.view(f"i{x.itemsize}"), want.view(f"i{x.itemsize}"))
        x = np.resize(np.array(special, dtype), (4, 320)).T          # not contiguous
        np.testing.assert_array_equal(relu_kernel(x).view(f"i{x.itemsize}"),
                                      np.maximum(x, 0).view(f"i{x.itemsize}"))


def test_softmax_cross_entropy_kernels_follow_the_textbook_order_of_operations():
    from staticgrad.ops import nn as nn_ops
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        z = (rng.standard_normal((2, 3, 6)) * 20).astype(dtype)
        t = rng.integers(0, 6, (2, 3))
        rows, labels = z.reshape(-1, 6), t.reshape(-1)
        m = rows.max(axis=1, keepdims=True)
        e = np.exp(rows - m)
        s = e.sum(axis=1, keepdims=True)
        lse = np.log(s[:, 0]) + m[:, 0] - rows[np.arange(6), labels]
        assert nn_ops._sce_kernel(z, t) == np.add.reduce(lse) / 6
        g = e / s
        g[np.arange(6), labels] -= 1
        np.testing.assert_array_equal(nn_ops._sce_grad_kernel(z, t), (g / 6).reshape(z.shape))
        for bad in (-1, 6):
            with pytest.raises(ValueError, match=r"labels must lie in \[0, 6\)"):
                nn_ops._sce_kernel(z, np.where(t == t[0, 0], bad, t))
        for label_dtype in (np.int8, np.uint8, np.int32, np.uint64):     # any integer labels, same bits
            loss, grad = nn_ops._sce_pair_kernel(z, t.astype(label_dtype))
            assert loss == nn_ops._sce_kernel(z, t)
            np.testing.assert_array_equal(grad, nn_ops._sce_grad_kernel(z, t))
        with pytest.raises(ValueError, match="got values in"):
            nn_ops._sce_kernel(z, np.where(t == t[0, 0], -1, t).astype(np.int8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_cross_entropy_of_many_short_rows_keeps_the_textbook_bits(dtype):
    # more rows than classes: the row maxima come from one reduction over the transposed rows
    from staticgrad.ops import nn as nn_ops
    rng = np.random.default_rng(4)
    z = (rng.standard_normal((40, 5)) * 30).astype(dtype)
    z[0] = -np.inf
    z[1, 2] = np.nan
    z[2] = [0.0, -0.0, -0.0, 0.0, -1.0]
    z[3, 4] = np.inf
    z[4] = [-0.0, -0.0, -0.0, -0.0, -0.0]
    t = rng.integers(0, 5, 40)
    m = z.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(all="ignore"):
        e = np.exp(z - m)
        s = e.sum(axis=1, keepdims=True)
        lse = np.log(s[:, 0]) + m[:, 0] - z[np.arange(40), t]
        g = e / s
        g[np.arange(40), t] -= 1
        loss, grad = nn_ops._sce_pair_kernel(z, t)
    np.testing.assert_array_equal(loss, np.add.reduce(lse) / 40)        # nan: row 1 has a nan
    finite = [2] + list(range(4, 40))         # (rows 0, 1 and 3 give nan or inf)
    assert nn_ops._sce_kernel(z[finite], t[finite]) == np.add.reduce(lse[finite]) / 37
    np.testing.assert_array_equal(grad, g / 40)
    assert np.signbit(grad).tolist() == np.signbit(g / 40).tolist()


def test_softmax_cross_entropy_of_complex_logits_checks_both_parts_without_warning():
    z = sg.placeholder((None, 3), dtype=np.complex128, name="z")
    t = sg.placeholder((None,), dtype=np.int64, name="t")
    fn = sg.compile(sg.softmax_cross_entropy(z, t), inputs=[z, t])
    Z = np.array([[1 + 1j, 2, 3], [0, 1j, 2]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # numpy's ComplexWarning included
        loss = fn(Z, np.array([0, 2]))
    m = Z.real.max(axis=1, keepdims=True)      # numpy orders complex numbers by their real part first
    want = np.mean(np.log(np.exp(Z - m).sum(axis=1)) + m[:, 0] - Z[[0, 1], [0, 2]])
    np.testing.assert_allclose(loss, want, rtol=1e-15)
    Z[0, 2] += np.inf * 1j                     # a row max that is not finite in its imaginary part only
    with np.errstate(all="ignore"):
        assert not np.isfinite(fn(Z, np.array([0, 2])))


def test_concatenate_with_axis_none_flattens_as_numpy_does():
    a = sg.placeholder((2, 3), name="a", requires_grad=True)
    b = sg.placeholder((4,), name="b", requires_grad=True)
    c = sg.concatenate([a, b], axis=None)
    assert c.shape == (10,)
    A, B = np.arange(6.0).reshape(2, 3), np.arange(4.0)
    got, ga, gb = sg.compile([c] + sg.grad(sg.sum(c * c), [a, b]), inputs=[a, b])(A, B)
    np.testing.assert_array_equal(got, np.concatenate([A, B], axis=None))
    np.testing.assert_array_equal(ga, 2 * A)
    np.testing.assert_array_equal(gb, 2 * B)


def test_clip_with_crossed_bounds_sends_every_gradient_to_the_upper_bound():
    # numpy's clip is minimum(maximum(x, lo), hi): with lo > hi every result is hi, whatever x and lo are
    x = sg.placeholder((3,), name="x", requires_grad=True)
    lo = sg.placeholder((), name="lo", requires_grad=True)
    hi = sg.placeholder((), name="hi", requires_grad=True)
    grads = sg.grad(sg.sum(sg.clip(x, lo, hi)), [x, lo, hi])
    feeds = (np.array([0.5, 3.0, -1.0]), 2.0, 1.0)
    for optimize in (True, False):
        gx, glo, ghi = sg.compile(grads, inputs=[x, lo, hi], optimize=optimize)(*feeds)
        np.testing.assert_array_equal(gx, [0.0, 0.0, 0.0])
        assert (glo, ghi) == (0.0, 3.0)
    ex, elo, ehi = (eager.tensor(v, requires_grad=True) for v in feeds)
    sg.sum(sg.clip(ex, elo, ehi)).backward()
    assert (elo.grad, ehi.grad) == (0.0, 3.0)
    # ordinary bounds: inside to x, below to lo, above to hi
    gx, glo, ghi = sg.compile(grads, inputs=[x, lo, hi])(np.array([0.5, 3.0, -1.0]), 0.0, 1.0)
    np.testing.assert_array_equal(gx, [1.0, 0.0, 0.0])
    assert (glo, ghi) == (1.0, 1.0)


def test_softmax_and_logsumexp_over_an_empty_axis():
    # numpy's max of nothing raises; the sum of exp of nothing is 0, whose log is -inf
    y = sg.placeholder((4, None), name="y", requires_grad=True)
    fn = sg.compile([sg.softmax(y), sg.log_softmax(y), sg.logsumexp(y, axis=1)], inputs=[y])
    s, ls, lse = fn(np.zeros((4, 0)))
    assert s.shape == ls.shape == (4, 0)
    np.testing.assert_array_equal(lse, np.full(4, -np.inf))
    (g,) = sg.grad(sg.sum(sg.softmax(y)), [y])
    assert sg.compile(g, inputs=[y])(np.zeros((4, 0))).shape == (4, 0)


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8", "bool"])
def test_ops_numpy_lacks_take_integers_as_floats_like_exp(dtype):
    # softmax, sigmoid & co. compute in the float dtype numpy's exp gives the input (uint8 -> float16):
    # they crashed on integers (max with initial=-inf), and sigmoid of uint8 wrapped -|x| to give 0.
    from staticgrad import eager
    v = np.array([[1, 2, 0], [3, 0, 1]]).astype(dtype)
    f = v.astype(np.exp(v[:1, :1]).dtype)
    p = sg.placeholder((2, 3), dtype=dtype, name="p")
    cases = {
        "softmax": (sg.softmax, lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True)),
        "log_softmax": (sg.log_softmax, lambda a: a - np.log(np.exp(a).sum(-1, keepdims=True))),
        "logsumexp": (lambda z: sg.logsumexp(z, axis=-1), lambda a: np.log(np.exp(a).sum(-1))),
        "sigmoid": (sg.sigmoid, lambda a: 1 / (1 + np.exp(-a))),
        "softplus": (sg.softplus, lambda a: np.log1p(np.exp(a))),
        "softmax_cross_entropy": (lambda z: sg.softmax_cross_entropy(z, np.array([0, 2])),
                                  lambda a: np.mean(np.log(np.exp(a).sum(-1)) - a[[0, 1], [0, 2]])),
    }
    for name, (build, want) in cases.items():
        y = build(p)
        assert y.dtype == f.dtype, name
        for optimize in (True, False):
            got = sg.compile(y, inputs=[p], optimize=optimize)(v)
            assert got.dtype == f.dtype, name
            np.testing.assert_allclose(got, want(f.astype(np.float64)), rtol=2e-3, err_msg=name)
        assert build(eager.tensor(v)).dtype == f.dtype, name


def test_mean_gradient_of_many_float16_numbers_is_not_zero():
    # 70,000 is inf in float16, so 1/count made the gradient 0; it is 1/70000 (torch: 1.4305e-05)
    x = sg.placeholder((70000,), dtype="float16", requires_grad=True)
    (g,) = sg.grad(sg.mean(x), [x])
    got = sg.compile(g, inputs=[x])(np.ones(70000, np.float16))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, np.float16(1 / 70000), rtol=1e-3)


def test_every_op_a_graph_can_show_is_a_public_function():
    # fn.graph names its nodes' ops after these functions; "split" (concatenate's gradient) would read as
    # numpy.split at the top level, so it is sg.ops.split only.
    from staticgrad.ops.registry import REGISTRY
    for op in REGISTRY:
        assert callable(getattr(sg.ops, op, None)), op
        assert (op in sg.__all__ and callable(getattr(sg, op))) or not REGISTRY[op].public, op
    assert not hasattr(sg, "split")


def test_the_gradients_building_blocks_as_functions():
    x = sg.placeholder((None, 3), name="x")
    b = sg.placeholder((3,), name="b")
    t = sg.placeholder((None,), dtype="int64", name="t")
    y = sg.placeholder((None, 3), name="y")
    outs = [sg.sum_like(x, b), sg.broadcast_like(b, x), sg.reshape_like(sg.reshape(x, (-1,)), x), sg.size(x),
            sg.size(x, axis=1, dtype="float32"), sg.getitem_grad(x[1:], x, (slice(1, None),)),
            sg.getitem_grad(b, (2, 3), (1,)), sg.one_hot(t, x), sg.softmax_cross_entropy_grad(x, t),
            sg.ops.split(sg.concatenate([x, y]), [x, y], axis=0, part=1)]
    rng = np.random.default_rng(5)
    X, B, T = rng.standard_normal((4, 3)), rng.standard_normal(3), np.array([0, 2, 1, 2])
    Y = rng.standard_normal((2, 3))
    got = sg.compile(outs, inputs=[x, b, t, y])(X, B, T, Y)
    e = np.exp(X - X.max(axis=1, keepdims=True))
    want = [X.sum(axis=0), np.broadcast_to(B, (4, 3)), X, np.int64(12), np.float32(3),
            np.concatenate([np.zeros((1, 3)), X[1:]]), np.array([np.zeros(3), B]), np.eye(3)[T],
            (e / e.sum(axis=1, keepdims=True) - np.eye(3)[T]) / 4, Y]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.asarray(w).dtype, k
        np.testing.assert_allclose(g, w, rtol=1e-15, atol=1e-17, err_msg=str(k))
    with pytest.raises(sg.ShapeError, match="sum_like"):
        sg.sum_like(b, x)                           # (None, 3) does not sum back to (3,)'s broadcast
    with pytest.raises(sg.ShapeError, match="one_hot"):
        sg.one_hot(x, x)
    with pytest.raises(sg.ShapeError, match="labels"):
        sg.softmax_cross_entropy_grad(x, b)
    with pytest.raises(ValueError, match="part 2 of 2"):
        sg.ops.split(x, [x, y], part=2)
    with pytest.raises(sg.ShapeError, match="getitem_grad"):
        sg.getitem_grad(y, x, (slice(1, None), 0))      # x[1:, 0] is (None,), not (None, 3)
    # eagerly: the same values, as eager tensors
    ex, eb = eager.tensor(X), eager.tensor(B)
    for g, w in ((sg.sum_like(ex, eb), want[0]), (sg.size(ex), want[3]), (sg.one_hot(eager.tensor(T), ex), want[7])):
        assert getattr(g, "_eager", False)
        np.testing.assert_array_equal(g.numpy(), w)


def test_split_refuses_a_gradient_that_is_not_the_concatenation_of_its_refs():
    # Found by tests/test_fuzz.py: split accepted any g, and its own VJP (a concatenate) failed later in sg.grad.
    x, y = sg.placeholder((None, 3), name="x"), sg.placeholder((2, 3), name="y")
    for g in (sg.placeholder((2, 1, 3)), sg.placeholder((None, 4)), sg.placeholder((7, 3))):
        with pytest.raises(sg.ShapeError, match=r"split: cannot cut .* as pieces joined into"):
            sg.ops.split(g, [y, y], axis=0, part=1)
    assert sg.ops.split(sg.placeholder((None, 3)), [x, y], axis=0, part=1).shape == (2, 3)


def test_sum_like_rule_itself_refuses_a_reference_that_does_not_broadcast_to_g():
    # Found by tests/test_fuzz.py: only sg.sum_like checked this, so apply("sum_like", ...) (and eager mode
    # through it) promised the reference's shape, (None, None) here, for a kernel result of shape (1,).
    from staticgrad.ops.registry import apply
    g, ref = sg.placeholder((None,), name="g"), sg.placeholder((None, None), name="ref")
    with pytest.raises(sg.ShapeError, match=r"sum_like: \(None, None\) does not broadcast to \(None,\)"):
        apply("sum_like", (g, ref))
    with pytest.raises(sg.ShapeError, match="sum_like"):
        apply("sum_like", (eager.tensor(np.ones(1)), eager.tensor(np.ones((1, 2)))))


def test_softmax_cross_entropy_grad_rule_itself_checks_the_labels():
    # Found by tests/test_fuzz.py: only the public function checked, so apply (and eager mode) took labels
    # of shape (1,) for logits of shape (1,), whose labels are 0-d (torch's twin then gives shape (1, 1)).
    from staticgrad.ops.registry import apply
    logits, labels = sg.placeholder((1,), name="z"), sg.placeholder((1,), dtype="int64", name="t")
    with pytest.raises(sg.ShapeError, match=r"softmax_cross_entropy_grad: labels of shape \(1,\) do not match"):
        apply("softmax_cross_entropy_grad", (logits, labels))
    with pytest.raises(sg.ShapeError, match="softmax_cross_entropy_grad: labels"):
        apply("softmax_cross_entropy_grad", (eager.tensor(np.zeros(1)), eager.tensor(np.zeros(1, np.int64))))


def test_getitem_grad_gradient_of_a_broadcast_g_with_an_unknown_size_sums_what_was_broadcast():
    # Found by tests/test_fuzz.py: g (None, 1) fed (1, 1) fills the (2, 3) indexed (numpy's assignment rule);
    # its gradient took the unknown axis as unstretched and came out (2, 1), where eager mode gives (1, 1).
    g = sg.placeholder((None, 1), name="g", requires_grad=True)
    x = sg.placeholder((3, 4), name="x")
    index = (slice(1, None), np.array([0, 0, 2]))
    w = np.arange(12.0).reshape(3, 4)
    d = sg.grad(sg.sum(sg.getitem_grad(g, x, index) * w), [g])[0]
    assert d.shape == (None, 1)
    picked = w[index]                      # (2, 3): what each element of g is added into
    for fed, want in ((np.ones((1, 1)), picked.sum(keepdims=True)), (np.ones((2, 1)), picked.sum(1, keepdims=True))):
        for optimize in (True, False):
            got = sg.compile(d, inputs=[g, x], optimize=optimize)(fed, np.zeros((3, 4)))
            np.testing.assert_array_equal(got, want)
        ge = eager.tensor(fed, requires_grad=True)
        np.testing.assert_array_equal(
            eager.grad(sg.sum(sg.getitem_grad(ge, eager.tensor(np.zeros((3, 4))), index) * w), [ge])[0].value, want)


def test_gradients_of_broadcasts_onto_a_reference_sum_where_an_unknown_size_turns_out_stretched():
    # Found by tests/test_fuzz.py's long profile: x (None, 3) fed (1, 3) broadcast onto a reference of
    # unknown size (broadcast_like to ref fed (4, 3), getitem_grad into ref[1:]) kept a gradient of the
    # reference's run-time shape, (4, 3) or (3, 3) -- (0, 3) for a ref fed (1, 3) -- not x's (1, 3).
    from staticgrad.ops.registry import apply
    x = sg.placeholder((None, 3), name="x", requires_grad=True)
    ref = sg.placeholder((None, 3), name="ref")
    built = {"broadcast_like": lambda v, r: apply("broadcast_like", (v, r)),
             "getitem_grad": lambda v, r: sg.getitem_grad(v, r, (slice(1, None),))}
    for name, fn in built.items():
        (d,) = sg.grad(sg.sum(fn(x, ref)), [x])
        for fed_x, fed_ref in ((np.ones((1, 3)), np.ones((4, 3))), (np.ones((1, 3)), np.ones((1, 3))),
                               (np.ones((4, 3)), np.ones((4 + (name == "getitem_grad"), 3)))):
            rows = len(fed_ref) - (name == "getitem_grad")       # of ref that x fills
            ex = eager.tensor(fed_x, requires_grad=True)
            want = eager.grad(sg.sum(fn(ex, eager.tensor(fed_ref))), [ex])[0].value
            np.testing.assert_array_equal(want, np.full(fed_x.shape, rows / len(fed_x)))
            for optimize in (True, False):
                got = sg.compile(d, inputs=[x, ref], optimize=optimize)(fed_x, fed_ref)
                np.testing.assert_array_equal(got, want, err_msg=f"{name}, optimize={optimize}")


def test_gradient_of_a_reshape_of_an_empty_tensor_with_one_unknown_size_has_its_run_time_shape():
    # Found by tests/test_fuzz.py's long profile: the gradient was reshaped back to x's (None, 0, 2) as
    # (-1, 0, 2), which neither numpy nor the shape rule can infer from zero elements.
    x = sg.placeholder((None, 0, 2), name="x", requires_grad=True)
    (d,) = sg.grad(sg.sum(sg.reshape(x, (0, 4)) * 2.0), [x])
    for optimize in (True, False):
        assert sg.compile(d, inputs=[x], optimize=optimize)(np.ones((3, 0, 2))).shape == (3, 0, 2)


def test_getitem_grad_rule_itself_refuses_a_g_that_cannot_fill_the_indexed_shape():
    # Found by tests/test_fuzz.py: only sg.getitem_grad checked, so apply took a (1, None) g for the (2,)
    # that x[:, 1] indexes (numpy's assignment drops leading 1s), and its gradient came out of rank 1.
    from staticgrad.ops.index import normalize_index
    from staticgrad.ops.registry import apply
    g = sg.placeholder((1, None), name="g")
    with pytest.raises(sg.ShapeError, match=r"getitem_grad: a gradient of shape \(1, None\) cannot fill \(2,\)"):
        apply("getitem_grad", (g,), {"index": normalize_index((slice(None), 1)), "shape": (2, 3)})


def test_arctan2_has_torchs_zero_gradient_at_the_origin():
    y, x = sg.placeholder((), name="y", requires_grad=True), sg.placeholder((), name="x", requires_grad=True)
    gy, gx = sg.compile(sg.grad(sg.arctan2(y, x), [y, x]), inputs=[y, x])(0.0, 0.0)
    assert gy == 0.0 and gx == 0.0


def test_argmax_takes_one_axis_or_none():
    x = sg.placeholder((2, 3), name="x")
    with pytest.raises(TypeError, match="argmax: axis must be one integer"):
        sg.argmax(x, axis=(0, 1))
    X = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 7.0]])
    for axis in (None, 0, 1, -1):
        for keep in (False, True):
            got = sg.compile(sg.argmin(x, axis=axis, keepdims=keep), inputs=[x])(X)
            np.testing.assert_array_equal(got, np.argmin(X, axis=axis, keepdims=keep))


def test_softmax_cross_entropy_grad_of_transposed_logits_subtracts_the_one_hot():
    """Found by the fuzzer: of logits in Fortran order (a transposed view), the kernel subtracted the one-hot
    through a flat copy and returned softmax / N."""
    from staticgrad import eager
    Z = np.array([[1.0, 0.2], [-0.5, 0.3]]).T
    labels = np.array([0, 0])
    p = np.exp(Z - Z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    want = (p - np.eye(2)[labels]) / 2
    got = sg.softmax_cross_entropy_grad(eager.tensor(Z), eager.tensor(labels)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-14)
    z = sg.placeholder((2, 2), name="z")
    y = sg.placeholder((2,), dtype=np.int64, name="y")
    fn = sg.compile(sg.softmax_cross_entropy_grad(z.T, y), inputs=[z, y])
    np.testing.assert_allclose(fn(np.ascontiguousarray(Z.T), labels), want, rtol=1e-14)
