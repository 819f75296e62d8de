"""The fold pass: a convolution's bias add and ReLU folded into its kernel, with the same bits."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.passes import fold

from . import graph_of

RNG = np.random.default_rng(0)


def _params(dtype="float32", channels=(8, 16)):
    c, o = channels
    w = sg.parameter(RNG.normal(size=(o, c, 3, 3)).astype(dtype), name="w")
    b = sg.parameter(RNG.normal(size=(o,)).astype(dtype), name="b")
    return w, b


def _compare(outputs, x, X):
    f = sg.compile(outputs, [x])
    g = sg.compile(outputs, [x], optimize=False)
    for got, want in zip(f(X), g(X)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    return f


@pytest.mark.parametrize("channels", [(1, 8), (8, 16)])    # patches cropped from rows, or written straight
def test_a_training_step_folds_bias_and_relu_with_the_same_bits(channels):
    x = sg.placeholder((None, channels[0], 14, 14), dtype="float32", name="x")
    w, b = _params(channels=channels)
    loss = sg.sum(sg.square(sg.relu(sg.conv2d(x, w, padding=1) + sg.reshape(b, (1, -1, 1, 1)))))
    f = _compare([loss] + sg.grad(loss, [w, b]), x, RNG.normal(size=(3, channels[0], 14, 14)).astype("float32"))
    ops = f.report()["ops"]
    assert "conv2d" not in ops and "relu" not in ops
    # (8 -> 16 channels: the patches are taken along the rows, and shared with the weight gradient)
    shared = channels == (8, 16)
    assert ("conv2d_weight" in ops) != shared
    assert ops.get("conv2d_from_patches+add+relu" if shared else "conv2d+add+relu") == 1
    expected = {"conv2d+add+relu": 1, "patches shared": 1} if shared else {"conv2d+add+relu": 1}
    assert [r["details"] for r in f.report() if r["pass"] == "fold"] == [expected]


def test_without_a_relu_the_bias_alone_is_folded():
    x = sg.placeholder((None, 8, 9, 9), dtype="float64", name="x")
    w, b = _params("float64")
    y = sg.tanh(sg.conv2d(x, w, stride=2, bias=b))
    f = _compare([y], x, RNG.normal(size=(2, 8, 9, 9)))
    assert f.report()["ops"].get("conv2d+add") == 1


def test_a_conv_read_twice_or_returned_is_not_folded():
    x = sg.placeholder((2, 8, 6, 6), dtype="float64", name="x")
    w, b = _params("float64")
    c = sg.conv2d(x, w, padding=1)
    y = sg.relu(c + sg.reshape(b, (-1, 1, 1)))
    f = _compare([y, c], x, RNG.normal(size=(2, 8, 6, 6)))
    assert "conv2d+add+relu" not in f.report()["ops"]
    f = _compare([y, sg.sum(c)], x, RNG.normal(size=(2, 8, 6, 6)))
    assert "conv2d+add+relu" not in f.report()["ops"]


def test_a_bias_that_is_not_per_channel_is_not_folded():
    x = sg.placeholder((2, 8, 6, 6), dtype="float64", name="x")
    w, _ = _params("float64")
    full = sg.parameter(RNG.normal(size=(16, 6, 6)), name="full")
    f = _compare([sg.relu(sg.conv2d(x, w, padding=1) + full)], x, RNG.normal(size=(2, 8, 6, 6)))
    assert "conv2d+add" not in f.report()["ops"] and "conv2d+add+relu" not in f.report()["ops"]


def test_the_relu_of_a_returned_add_is_not_folded_into_it():
    x = sg.placeholder((2, 8, 6, 6), dtype="float64", name="x")
    w, b = _params("float64")
    a = sg.conv2d(x, w, padding=1, bias=b)
    f = _compare([sg.relu(a), a], x, RNG.normal(size=(2, 8, 6, 6)))
    ops = f.report()["ops"]
    assert ops.get("conv2d+add") == 1 and ops.get("relu") == 1


def test_the_pass_alone_reports_nothing_on_a_graph_without_convolutions():
    x = sg.placeholder((3,), name="x")
    graph = graph_of([sg.relu(x + 1.0)], [x])
    assert fold.run(graph) == (graph, fold.PassStats("fold", changed=0))


@pytest.mark.parametrize("pool", [dict(kernel_size=2), dict(kernel_size=3, stride=1, padding=1)])
def test_a_relus_gradient_after_max_pooling_is_masked_per_window(pool):
    x = sg.placeholder((None, 2, 6, 6), dtype="float64", name="x", requires_grad=True)
    w = sg.parameter(RNG.normal(size=(2, 2, 3, 3)), name="w")
    h = sg.relu(sg.conv2d(x, w, padding=1))
    loss = sg.sum(sg.square(sg.max_pool2d(h, **pool) - 0.5))
    X = RNG.normal(size=(3, 2, 6, 6))
    X[0, 0] = 0.0                # (windows of zeros: ties, and a ReLU mask of zeros)
    f = _compare([loss] + sg.grad(loss, [w, x]), x, X)
    assert [r["details"] for r in f.report() if r["pass"] == "fold"] == [{"max_pool2d_grad masked": 1,
                                                                          "patches shared": 1}]
    (step,) = [n for n in f.ir.nodes.values() if n.op == "where"]
    assert tuple(step.shape) == (None, 2) + tuple(sg.max_pool2d(h, **pool).shape[2:])


def test_a_mask_of_another_array_is_left_alone():
    x = sg.placeholder((2, 2, 4, 4), dtype="float64", name="x")
    h = sg.relu(x)
    g = sg.placeholder((2, 2, 2, 2), dtype="float64", name="g")
    grad = sg.ops.max_pool2d_grad(h, g, 2, pooled=sg.max_pool2d(h, 2))
    graph = graph_of([sg.where(x > 0, grad, 0.0), sg.where(h > 1.0, grad, 0.0)], [x, g])
    assert fold.run(graph)[1].changed == 0


def test_a_convolution_and_its_weight_gradient_share_their_patches():
    x = sg.placeholder((None, 8, 9, 9), dtype="float64", name="x", requires_grad=True)
    w, b = _params("float64")
    y = sg.conv2d(x, w, padding=1, bias=b)
    loss = sg.sum(y * y)
    f = _compare([loss] + sg.grad(loss, [w, b, x]), x, RNG.normal(size=(2, 8, 9, 9)))
    ops = f.report()["ops"]
    assert ops.get("conv2d_patches") == 1 and ops.get("conv2d_from_patches+add") == 1
    assert ops.get("conv2d_weight_from_patches") == 1 and "conv2d_weight" not in ops


def test_patches_are_not_shared_with_a_stride_or_few_input_channels():
    for shape, stride, channels in (((None, 8, 9, 9), 2, (8, 16)), ((None, 2, 9, 9), 1, (2, 16))):
        x = sg.placeholder(shape, dtype="float64", name="x")
        w, _ = _params("float64", channels)
        y = sg.conv2d(x, w, stride=stride, padding=1)
        loss = sg.sum(y * y)
        f = _compare([loss] + sg.grad(loss, [w]), x, RNG.normal(size=(2,) + shape[1:]))
        assert "conv2d_patches" not in f.report()["ops"] and f.report()["ops"].get("conv2d_weight") == 1


def test_an_infinite_input_gives_the_weight_gradient_of_the_plain_kernels():
    x = sg.placeholder((None, 8, 5, 5), dtype="float64", name="x")
    w, _ = _params("float64")
    loss = sg.sum(sg.conv2d(x, w, padding=1))
    X = RNG.normal(size=(2, 8, 5, 5))
    X[1, 3, 4, 4] = np.inf        # (its row's extra columns must not meet g's zeros: inf * 0 is nan)
    f = sg.compile(sg.grad(loss, [w]), [x])
    (got,), (want,) = f(X), sg.compile(sg.grad(loss, [w]), [x], optimize=False)(X)
    assert np.isinf(got).any() and not np.isnan(got).any() and np.array_equal(got, want)
    assert f.report()["ops"].get("conv2d_weight_from_patches") == 1


@pytest.mark.parametrize("size, dilation", [(3, 1), (7, 3)])
def test_an_image_the_corner_patches_do_not_cover_keeps_its_own_patches(size, dilation):
    # (3 rows and a 3x3 kernel: one output row; the two corner offsets' patches miss the middle row, so an
    # inf there would meet g's zero columns unseen)
    x = sg.placeholder((None, 8, size, 9), dtype="float64", name="x")
    w, _ = _params("float64")
    y = sg.conv2d(x, w, dilation=dilation)
    loss = sg.sum(y * y)
    X = RNG.normal(size=(2, 8, size, 9))
    X[1, 3, size // 2, 8] = np.inf
    with np.errstate(all="ignore"):
        f = _compare(sg.grad(loss, [w]), x, X)
    assert "conv2d_patches" not in f.report()["ops"]
