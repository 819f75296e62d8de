"""pad beyond its specs: numpy's forms of pad_width and constant_values, dtypes, unknown sizes, the errors."""
from __future__ import annotations

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.ops.registry import apply
from tests.ops.errors import assert_refused


def _run(x, *args, **kw):
    xs = sg.placeholder(x.shape, dtype=x.dtype)
    return sg.compile(sg.pad(xs, *args, **kw), inputs=[xs])(x)


@pytest.mark.parametrize("width", [2, (2,), (1, 3), ((1, 3),), ((1, 0), (2, 1), (0, 2)), np.array([[1], [2], [0]]),
                                   [[1, 2]], np.int64(1)], ids=str)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
def test_every_form_of_pad_width_means_what_it_means_to_numpy(width, mode):
    x = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(_run(x, width, mode), np.pad(x, width, mode=mode))


@pytest.mark.parametrize("values", [7, (1.5,), (-1, 2), ((1, 2),), ((1, 2), (3, 4)), np.array([[0.5], [-0.5]])],
                         ids=str)
def test_every_form_of_constant_values_means_what_it_means_to_numpy(values):
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(_run(x, ((1, 2), (2, 1)), constant_values=values),
                                  np.pad(x, ((1, 2), (2, 1)), constant_values=values))


def test_integer_and_bool_tensors_keep_their_dtype_and_constants_are_cast_to_it():
    n = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = _run(n, 1, constant_values=2.7)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.pad(n, 1, constant_values=2.7))
    b = np.array([True, False])
    np.testing.assert_array_equal(_run(b, (1, 2), "wrap"), np.pad(b, (1, 2), mode="wrap"))


def test_unknown_sizes_stay_unknown_and_the_gradient_folds_at_run_time():
    x = sg.placeholder((None, 3), requires_grad=True)
    y = sg.pad(x, ((2, 1), (1, 3)), "reflect")
    assert y.shape == (None, 7)
    (dx,) = sg.grad(sg.sum(y * y), [x])
    assert dx.shape == (None, 3)
    value = np.arange(12.0).reshape(4, 3)
    padded = np.pad(value, ((2, 1), (1, 3)), mode="reflect")
    want = np.zeros_like(value)
    rows, cols = (np.pad(np.arange(n), w, mode="reflect") for n, w in ((4, (2, 1)), (3, (1, 3))))
    np.add.at(want, (rows[:, None], cols[None, :]), 2 * padded)
    np.testing.assert_allclose(sg.compile(dx, inputs=[x])(value), want)


def _x(*shape, dtype="float64"):
    return sg.placeholder(shape, dtype=dtype)


BAD = [  # (error, op, words in the message, the expression)
    (ValueError, "pad", ["negative"], lambda: sg.pad(_x(2, 3), ((1, -1), (0, 0)))),
    (ValueError, "pad", ["'mean'", "'constant', 'edge', 'reflect', 'symmetric', 'wrap'"],
     lambda: sg.pad(_x(2, 3), 1, mode="mean")),
    (ValueError, "pad", ["constant_values", "'edge'"], lambda: sg.pad(_x(2, 3), 1, mode="edge", constant_values=1)),
    (TypeError, "pad", ["pad_width", "1.5"], lambda: sg.pad(_x(2, 3), 1.5)),
    (TypeError, "pad", ["constant_values"], lambda: sg.pad(_x(2, 3), 1, constant_values="a")),
    (sg.ShapeError, "pad", ["shape (3, 2)", "2 axes"], lambda: sg.pad(_x(2, 3), ((1, 1), (1, 1), (1, 1)))),
    (sg.ShapeError, "pad", ["empty axis", "'reflect'"], lambda: sg.pad(_x(0, 3), 1, mode="reflect")),
    (sg.ShapeError, "pad_grad", ["(2, 3)", "narrower"], lambda: sg.ops.pad_grad(_x(2, 3), 2)),
]


@pytest.mark.parametrize("error, op, words, make", BAD, ids=[f"{c[1]}-{k}" for k, c in enumerate(BAD)])
def test_bad_arguments_name_the_op_and_the_line(error, op, words, make):
    assert_refused(error, op, words, make)


@pytest.mark.parametrize("attrs", [
    {"pad_width": 1, "mode": "constant", "constant_values": ((0, 0), (0, 0))},
    {"pad_width": ((1, 1),), "mode": "constant", "constant_values": ((0, 0), (0, 0))},
    {"pad_width": ((1, 1), (1, 1)), "mode": "constant", "constant_values": None},
    {"pad_width": ((1, 1), (1, 1)), "mode": "edge", "constant_values": ((0, 0), (0, 0))},
    {"pad_width": ((1, 1), (1, 1)), "mode": "mean", "constant_values": None},
    {"pad_width": ((1, np.int64(1)), (1, 1)), "mode": "edge", "constant_values": None},
], ids=["int-width", "one-pair", "constant-without-values", "edge-with-values", "unknown-mode", "numpy-int"])
def test_a_node_in_another_form_than_building_makes_is_refused(attrs):
    with pytest.raises((TypeError, sg.ShapeError), match="^pad: "):
        apply("pad", (_x(2, 3),), attrs)
