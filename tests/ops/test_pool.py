"""max_pool2d and avg_pool2d beyond their specs: torch's tie and NaN rules, its output sizes, the errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.ops.registry import apply
from tests.ops.errors import assert_refused

CONFIGS = [  # (shape, kernel_size, stride, padding, dilation, ceil_mode)
    ((2, 3, 6, 6), 2, None, 0, 1, False),
    ((1, 2, 6, 7), 3, 1, 0, 1, False),          # overlapping: an element can be the max of several windows
    ((2, 2, 7, 7), 3, 2, 1, 1, False),
    ((1, 2, 7, 6), 2, 2, 1, 1, True),
    ((2, 1, 8, 8), (2, 3), (1, 2), (1, 1), 2, True),
    ((3, 6, 5), 3, 1, 1, 1, False),
]


def _values(rng, shape, kind):
    """Inputs rounded to 0.5 (many ties), with NaNs or -inf in some cases."""
    x = np.round(rng.standard_normal(shape) * 2) / 2
    if kind == "nan":
        x[rng.random(shape) < 0.15] = np.nan
    elif kind == "-inf":
        x[rng.random(shape) < 0.6] = -np.inf
    return x


def _ours(x, g, h, args):
    """max_pool2d(x), its gradient for g and the gradient of <that gradient, h> with respect to g (which is the
    second-order op, the gather), compiled."""
    xs = sg.placeholder(x.shape, dtype=x.dtype, requires_grad=True)
    gs = sg.placeholder(g.shape, dtype=g.dtype, requires_grad=True)
    hs = sg.placeholder(h.shape, dtype=h.dtype)
    y = sg.max_pool2d(xs, *args)
    (dx,) = sg.grad(sg.sum(y * gs), [xs])
    (dg,) = sg.grad(sg.sum(dx * hs), [gs])
    return sg.compile([y, dx, dg], inputs=[xs, gs, hs])(x, g, h)


def _torch(torch, x, g, h, args):
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(g, requires_grad=True)
    y = torch.nn.functional.max_pool2d(xt, *args)
    (dx,) = torch.autograd.grad(y, xt, gt, create_graph=True)
    (dg,) = torch.autograd.grad(dx, gt, torch.tensor(h))
    return [t.detach().numpy() for t in (y, dx, dg)]


@pytest.mark.parametrize("kind", ["ties", "nan", "-inf"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c[1:])))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_max_pool_picks_the_element_torch_picks(config, kind, dtype):
    # torch's CPU kernel: the first maximum in window order; a NaN wins (the last NaN); a window of -inf gives
    # its first element inside the input. Overlapping windows that pick one element add their gradients.
    torch = pytest.importorskip("torch")
    shape, *args = config
    rng = np.random.default_rng([len(shape), sum(map(ord, kind))])
    x = _values(rng, shape, kind).astype(dtype)
    out = torch.nn.functional.max_pool2d(torch.tensor(x), *args).shape
    g, h = rng.standard_normal(out).astype(dtype), rng.standard_normal(shape).astype(dtype)
    ours, theirs = _ours(x, g, h, args), _torch(torch, x, g, h, args)
    for what, a, b in zip(("value", "gradient", "gradient of the gradient"), ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=what)


def test_overlapping_windows_add_the_gradient_at_their_shared_maximum():
    x = np.array([[[[1.0, 2.0, 3.0], [4.0, 9.0, 5.0], [6.0, 7.0, 8.0]]]])
    xs = sg.placeholder(x.shape, requires_grad=True)
    (dx,) = sg.grad(sg.sum(sg.max_pool2d(xs, 2, stride=1)), [xs])
    np.testing.assert_array_equal(sg.compile(dx, inputs=[xs])(x)[0, 0], [[0, 0, 0], [0, 4, 0], [0, 0, 0]])


def test_ties_and_nans_by_hand():
    x = np.array([[[[5.0, 5.0, np.nan, 1.0], [5.0, 1.0, 2.0, np.nan]]]])
    xs = sg.placeholder(x.shape, requires_grad=True)
    y = sg.max_pool2d(xs, 2)
    (dx,) = sg.grad(sg.sum(y), [xs])
    value, grad = sg.compile([y, dx], inputs=[xs])(x)
    np.testing.assert_array_equal(value, [[[[5.0, np.nan]]]])
    np.testing.assert_array_equal(grad[0, 0], [[1, 0, 0, 0], [0, 0, 0, 1]])     # the first 5; the last NaN


def _torch_shape(torch, shape, args):
    try:
        return tuple(torch.nn.functional.max_pool2d(torch.zeros(shape), *args).shape)
    except RuntimeError:
        return None


def _our_shape(shape, args):
    try:
        return sg.max_pool2d(sg.placeholder(shape), *args).shape
    except sg.ShapeError:
        return None


def test_output_sizes_and_refusals_are_torchs():
    # Every small case of size, kernel, stride, padding, dilation and ceil mode: the same size, or both refuse
    # (padding over half the kernel; windows larger than the padded input).
    torch = pytest.importorskip("torch")
    for n, k, s, p, d, ceil in itertools.product(range(1, 8), range(1, 4), range(1, 4), range(3), (1, 2),
                                                (False, True)):
        args = ((k, 1), (s, 1), (p, 0), (d, 1), ceil)
        assert _our_shape((1, n, 2), args) == _torch_shape(torch, (1, n, 2), args), (n, k, s, p, d, ceil)


@pytest.mark.parametrize("config", [
    ((2, 3, 5, 5), 3, 2, 1, True, True, None),
    ((2, 3, 5, 5), 3, 2, 1, True, False, None),
    ((1, 2, 6, 7), (3, 2), (2, 1), (1, 1), True, False, None),
    ((3, 4, 4), 2, 1, 1, False, True, -3),
], ids=str)
def test_avg_pool_divisors_are_torchs(config):
    torch = pytest.importorskip("torch")
    shape, *args = config
    x = np.random.default_rng(0).standard_normal(shape)
    xs = sg.placeholder(shape, requires_grad=True)
    y = sg.avg_pool2d(xs, *args)
    (dx,) = sg.grad(sg.sum(y * y), [xs])
    value, grad = sg.compile([y, dx], inputs=[xs])(x)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.avg_pool2d(xt, *args)
    (gt,) = torch.autograd.grad((yt * yt).sum(), xt)
    np.testing.assert_allclose(value, yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(grad, gt.numpy(), rtol=1e-12)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 4, 5)])
def test_global_avg_pool_is_torchs_adaptive_average_to_one(shape, keepdims):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal(shape)
    xs = sg.placeholder((None,) + shape[1:], requires_grad=True)
    y = sg.global_avg_pool2d(xs, keepdims=keepdims)
    (dx,) = sg.grad(sg.sum(y * y), [xs])
    value, grad = sg.compile([y, dx], inputs=[xs])(x)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.adaptive_avg_pool2d(xt, 1)
    yt = yt if keepdims else yt.reshape(shape[:-2])
    (gt,) = torch.autograd.grad((yt * yt).sum(), xt)
    np.testing.assert_allclose(value, yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(grad, gt.numpy(), rtol=1e-12)


def _x(*shape, dtype="float64"):
    return sg.placeholder(shape, dtype=dtype)


BAD = [  # (error, op, words in the message, the expression)
    (sg.ShapeError, "max_pool2d", ["padding (2, 2)", "half the kernel size (3, 3)"],
     lambda: sg.max_pool2d(_x(1, 1, 8, 8), 3, padding=2)),
    (sg.ShapeError, "avg_pool2d", ["(1, 1, 2, 2)", "too small"], lambda: sg.avg_pool2d(_x(1, 1, 2, 2), 3)),
    (sg.ShapeError, "max_pool2d", ["(4, 4)", "(N, C, H, W)"], lambda: sg.max_pool2d(_x(4, 4), 2)),
    (sg.ShapeError, "max_pool2d", ["stride must be at least 1"], lambda: sg.max_pool2d(_x(1, 4, 4), 2, stride=0)),
    (sg.ShapeError, "avg_pool2d", ["divisor_override"], lambda: sg.avg_pool2d(_x(1, 4, 4), 2, divisor_override=0)),
    (TypeError, "max_pool2d", ["stride", "1.5"], lambda: sg.max_pool2d(_x(1, 4, 4), 2, stride=1.5)),
    (TypeError, "avg_pool2d", ["kernel_size", "(2, 2, 2)"], lambda: sg.avg_pool2d(_x(1, 4, 4), (2, 2, 2))),
    (TypeError, "max_pool2d", ["complex128"], lambda: sg.max_pool2d(_x(1, 4, 4, dtype="complex128"), 2)),
    (sg.ShapeError, "global_avg_pool2d", ["(3, 4)"], lambda: sg.global_avg_pool2d(_x(3, 4))),
    (sg.ShapeError, "max_pool2d_grad", ["(1, 2, 2)", "(1, 4, 4)"],
     lambda: sg.ops.max_pool2d_grad(_x(1, 4, 4), _x(1, 2, 3), 2)),
]


@pytest.mark.parametrize("error, op, words, make", BAD, ids=[f"{c[1]}-{k}" for k, c in enumerate(BAD)])
def test_bad_arguments_name_the_op_and_the_line(error, op, words, make):
    assert_refused(error, op, words, make)


@pytest.mark.parametrize("attrs", [
    {"kernel_size": 2, "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1), "ceil_mode": False},
    {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1), "ceil_mode": 0},
    {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, np.int64(1)), "ceil_mode": False},
    {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, -1), "dilation": (1, 1), "ceil_mode": False},
], ids=["int-kernel", "int-flag", "numpy-int", "negative-padding"])
def test_a_node_in_another_form_than_building_makes_is_refused(attrs):
    # What a file could hold: the shape rule accepts only the form max_pool2d stores.
    with pytest.raises((TypeError, sg.ShapeError), match="^max_pool2d: "):
        apply("max_pool2d", (_x(1, 1, 4, 4),), attrs)


def test_unknown_sizes_give_unknown_pooled_sizes():
    x = sg.placeholder((None, 3, None, 8))
    assert sg.max_pool2d(x, 2).shape == (None, 3, None, 4)
    assert sg.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True).shape == (None, 3, None, 5)
    value = sg.compile(sg.max_pool2d(x, 2), inputs=[x])(np.ones((2, 3, 5, 8)))
    assert value.shape == (2, 3, 2, 4)


def test_integer_inputs_pool_as_floats():
    x = sg.placeholder((1, 2, 2), dtype="int64")
    assert sg.max_pool2d(x, 2).dtype == np.float64
    np.testing.assert_array_equal(sg.compile(sg.avg_pool2d(x, 2), inputs=[x])(np.array([[[1, 2], [3, 5]]])),
                                  [[[2.75]]])
