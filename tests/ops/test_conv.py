"""The convolutions beyond their specs (tests/specs/conv.py): errors at the user's line, the stored form of
the attributes, "same" and output_padding sizes, both patch layouts, float32, and a LeNet-sized case
compiled, eager and in torch, with its FLOPs in the report."""
from __future__ import annotations

import re

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager
from staticgrad.ops import im2col
from staticgrad.ops.registry import apply
from staticgrad.tensor import ShapeError
from tests.op_specs import OP_SPECS
from tests.test_ops import first_grads

HERE = "test_conv.py"


def ph(*shape, dtype=np.float64):
    return sg.placeholder(shape, dtype=dtype)


def _raises(kind, pattern, build, op="conv2d"):
    """``build()`` raises ``kind`` naming ``op`` and this file's line, with ``pattern`` in its message."""
    with pytest.raises(kind) as info:
        build()
    message = str(info.value)
    assert message.startswith(f"{op}: "), message
    assert re.search(rf"\(at {HERE}:\d+\)", message), message
    assert re.search(pattern, message), message


# ------------------------------------------------------------------ errors when the expression is built
BUILD_ERRORS = [
    ("input rank", ShapeError, r"input must be \(N, C, H, W\), got shape \(3, 5, 5\)",
     lambda: sg.conv2d(ph(3, 5, 5), ph(2, 3, 3, 3))),
    ("weight rank", ShapeError, r"weight must be \(out, in/groups, kh, kw\)",
     lambda: sg.conv2d(ph(1, 3, 5, 5), ph(2, 3, 3))),
    ("channels", ShapeError, r"the input has 4 channels but the weight \(2, 3, 3, 3\) with groups=1 takes 3",
     lambda: sg.conv2d(ph(1, 4, 5, 5), ph(2, 3, 3, 3))),
    ("groups do not divide the input", ShapeError, r"groups=2 does not divide the 3 input channels",
     lambda: sg.conv2d(ph(1, 3, 5, 5), ph(2, 1, 3, 3), groups=2)),
    ("groups do not divide the output", ShapeError, r"groups=2 does not divide the 3 output channels",
     lambda: sg.conv2d(ph(1, 4, 5, 5), ph(3, 2, 3, 3), groups=2)),
    ("kernel too large", ShapeError, r"kernel \(4, 4\) .*larger than the input \(3, 3\) padded by \(0, 0, 0, 0\)",
     lambda: sg.conv2d(ph(1, 1, 3, 3), ph(1, 1, 4, 4))),
    ("dilated kernel too large", ShapeError, r"dilation \(2, 2\)",
     lambda: sg.conv2d(ph(1, 1, 4, 4), ph(1, 1, 3, 3), dilation=2)),
    ("float stride", TypeError, r"stride must be integers, got \(1\.5, 1\.5\)",
     lambda: sg.conv2d(ph(1, 1, 5, 5), ph(1, 1, 3, 3), stride=1.5)),
    ("zero stride", ValueError, r"stride must be >= 1, got 0",
     lambda: sg.conv2d(ph(1, 1, 5, 5), ph(1, 1, 3, 3), stride=0)),
    ("three strides", TypeError, r"stride must be an int or 2 ints",
     lambda: sg.conv2d(ph(1, 1, 5, 5), ph(1, 1, 3, 3), stride=(1, 1, 1))),
    ("negative padding", ValueError, r"padding must be >= 0",
     lambda: sg.conv2d(ph(1, 1, 5, 5), ph(1, 1, 3, 3), padding=-1)),
    ("unknown padding word", ValueError, r"'valid' or 'same', got 'full'",
     lambda: sg.conv2d(ph(1, 1, 5, 5), ph(1, 1, 3, 3), padding="full")),
    ("same with a stride", ValueError, r"padding='same' is not supported for strided convolutions",
     lambda: sg.conv2d(ph(1, 1, 5, 5), ph(1, 1, 3, 3), stride=2, padding="same")),
    ("bool groups", TypeError, r"groups must be integers",
     lambda: sg.conv2d(ph(1, 1, 5, 5), ph(1, 1, 3, 3), groups=True)),
    ("integer data", TypeError, r"takes real floating-point tensors, got int64 and float64",
     lambda: sg.conv2d(ph(1, 1, 5, 5, dtype=np.int64), ph(1, 1, 3, 3))),
    ("a bias where the stride goes", TypeError, r"the third argument is the stride.*bias=",
     lambda: sg.conv2d(ph(1, 1, 5, 5), ph(2, 1, 3, 3), ph(2))),
    ("bias shape", ShapeError, r"the bias must be \(2,\), one per output channel, got shape \(3,\)",
     lambda: sg.conv2d(ph(1, 1, 5, 5), ph(2, 1, 3, 3), bias=ph(3))),
]


@pytest.mark.parametrize("what, kind, pattern, build", BUILD_ERRORS, ids=[c[0] for c in BUILD_ERRORS])
def test_conv2d_errors_name_the_op_and_line(what, kind, pattern, build):
    _raises(kind, pattern, build)


TRANSPOSE_ERRORS = [
    ("channels", ShapeError, r"the input has 3 channels but the weight \(2, 2, 3, 3\) takes 2",
     lambda: sg.conv_transpose2d(ph(1, 3, 4, 4), ph(2, 2, 3, 3))),
    ("output_padding not under stride or dilation", ShapeError,
     r"output_padding \(1, 1\) must be smaller than either the stride \(1, 1\) or the dilation \(1, 1\)",
     lambda: sg.conv_transpose2d(ph(1, 2, 4, 4), ph(2, 2, 3, 3), output_padding=1)),
    ("output_padding equal to the stride", ShapeError, r"output_padding \(0, 2\)",
     lambda: sg.conv_transpose2d(ph(1, 2, 4, 4), ph(2, 2, 3, 3), stride=2, output_padding=(0, 2))),
    ("padding leaves nothing", ShapeError, r"leaves no output",
     lambda: sg.conv_transpose2d(ph(1, 2, 1, 1), ph(2, 2, 2, 2), padding=1)),
    ("a string padding", TypeError, r"padding must be an int or a pair, got 'same'",
     lambda: sg.conv_transpose2d(ph(1, 2, 4, 4), ph(2, 2, 3, 3), padding="same")),
    ("groups", ShapeError, r"groups=2 does not divide the 3 input channels",
     lambda: sg.conv_transpose2d(ph(1, 3, 4, 4), ph(3, 2, 3, 3), groups=2)),
    ("a bias where the stride goes", TypeError, r"bias=",
     lambda: sg.conv_transpose2d(ph(1, 2, 4, 4), ph(2, 2, 3, 3), np.zeros(2))),
]


@pytest.mark.parametrize("what, kind, pattern, build", TRANSPOSE_ERRORS, ids=[c[0] for c in TRANSPOSE_ERRORS])
def test_conv_transpose2d_errors_name_the_op_and_line(what, kind, pattern, build):
    _raises(kind, pattern, build, op="conv_transpose2d")


def test_conv1d_errors_name_conv1d_and_its_axes():
    _raises(ShapeError, r"input must be \(N, C, L\)", lambda: sg.conv1d(ph(1, 2, 5, 5), ph(2, 2, 3)), op="conv1d")
    _raises(ShapeError, r"weight must be \(out, in/groups, kl\)", lambda: sg.conv1d(ph(1, 2, 5), ph(2, 2, 3, 3)),
            op="conv1d")
    _raises(ShapeError, r"the input has 2 channels", lambda: sg.conv1d(ph(1, 2, 5), ph(2, 3, 3)), op="conv1d")
    _raises(ValueError, r"strided", lambda: sg.conv1d(ph(1, 2, 5), ph(2, 2, 3), stride=2, padding="same"),
            op="conv1d")
    _raises(TypeError, r"bias=", lambda: sg.conv1d(ph(1, 2, 5), ph(2, 2, 3), ph(2)), op="conv1d")


def test_unknown_sizes_are_checked_when_known_and_same_needs_the_kernel():
    y = sg.conv2d(ph(None, 3, None, 7), ph(4, 3, 3, 3), padding=1)
    assert y.shape == (None, 4, None, 7)
    y = sg.conv_transpose2d(ph(None, 4, 5, None), ph(4, 3, 3, 3), stride=2)
    assert y.shape == (None, 3, 11, None)
    _raises(ValueError, r"padding='same' needs the kernel size", lambda: sg.conv2d(ph(1, 3, 5, 5), ph(4, 3, None, 3),
                                                                                   padding="same"))


# ------------------------------------------------------------------ the stored form
_GOOD = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}


@pytest.mark.parametrize("key, value, pattern", [
    ("stride", 1, r"stride must be a tuple of 2 ints, got 1"),
    ("stride", (1, 1.0), r"stride must be a tuple of 2 ints"),
    ("stride", (np.int64(1), 1), r"stride must be a tuple of 2 ints"),
    ("stride", (0, 1), r"stride must be >= 1"),
    ("padding", (1, 1), r"padding \(top, bottom, left, right\) must be a tuple of 4 ints, got \(1, 1\)"),
    ("padding", (0, 0, 0, -1), r"must be >= 0"),
    ("padding", "same", r"must be a tuple of 4 ints"),
    ("dilation", [1, 1], r"dilation must be a tuple of 2 ints"),
    ("groups", 0, r"groups must be an int >= 1"),
    ("groups", 1.0, r"groups must be an int >= 1"),
])
def test_the_shape_rule_refuses_any_other_stored_form(key, value, pattern):
    with pytest.raises((TypeError, ShapeError), match=pattern):
        apply("conv2d", (ph(1, 1, 4, 4), ph(1, 1, 2, 2)), dict(_GOOD, **{key: value}))


def test_internal_forms_refuse_mixed_size_sources():
    x, w = ph(1, 2, 3, 3), ph(2, 1, 2, 2)
    with pytest.raises(TypeError, match="output_padding must be None when a third input gives the size"):
        apply("conv_transpose2d", (x, w, ph(1, 1, 4, 4)), dict(_GOOD, output_padding=(0, 0)))
    with pytest.raises(ShapeError, match="length 6 along axis 2 is not one a convolution could have taken"):
        apply("conv_transpose2d", (x, w, ph(1, 1, 6, 4)), dict(_GOOD, output_padding=None))
    with pytest.raises(TypeError, match="kernel must be None when a third input gives the size"):
        apply("conv2d_weight", (ph(1, 2, 4, 4), ph(1, 3, 3, 3), ph(3, 2, 2, 2)), dict(_GOOD, kernel=(2, 2)))
    with pytest.raises(ShapeError, match=r"output gradient \(1, 3, 2, 2\) does not fit the input \(1, 2, 4, 4\)"):
        apply("conv2d_weight", (ph(1, 2, 4, 4), ph(1, 3, 2, 2)), dict(_GOOD, kernel=(2, 2)))


def test_public_arguments_are_stored_normalized():
    y = sg.conv2d(ph(1, 2, 6, 6), ph(4, 1, 3, 3), stride=np.int64(2), padding=(1, 0), dilation=[1, 2], groups=2)
    assert y.attrs == {"stride": (2, 2), "padding": (1, 1, 0, 0), "dilation": (1, 2), "groups": 2}
    assert all(type(v) is int for v in y.attrs["stride"] + y.attrs["padding"] + y.attrs["dilation"])
    t = sg.conv_transpose2d(ph(1, 2, 3, 3), ph(2, 1, 3, 3), stride=2, padding=1, output_padding=1)
    assert t.attrs["output_padding"] == (1, 1) and t.attrs["padding"] == (1, 1, 1, 1)


# ------------------------------------------------------------------ sizes
@pytest.mark.parametrize("kernel, dilation, pads", [
    ((3, 3), 1, (1, 1, 1, 1)), ((2, 4), 1, (0, 1, 1, 2)), ((1, 5), 1, (0, 0, 2, 2)), ((2, 2), 3, (1, 2, 1, 2)),
    ((4, 3), 2, (3, 3, 2, 2)),
])
def test_same_padding_keeps_the_size_and_puts_the_odd_one_at_the_end(kernel, dilation, pads):
    x = ph(2, 3, 7, 6)
    y = sg.conv2d(x, ph(5, 3, *kernel), padding="same", dilation=dilation)
    assert y.shape == (2, 5, 7, 6)
    assert y.attrs["padding"] == pads


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_same_padding_matches_torch_with_even_kernels():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 2, 5, 6)), rng.standard_normal((3, 2, 2, 4))
    got = sg.compile(sg.conv2d(sg.constant(x), sg.constant(w), padding="same"))()
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding="same").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride, padding, output_padding, dilation", [
    (2, 0, 0, 1), (2, 0, 1, 1), (2, 1, 1, 1), (3, 1, 2, 1), ((2, 3), (0, 1), (1, 2), 1), (1, 0, 1, 2), (2, 1, 1, 3),
])
def test_output_padding_sizes_are_torchs(stride, padding, output_padding, dilation):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 2, 3, 4)), rng.standard_normal((2, 3, 3, 2))
    kw = dict(stride=stride, padding=padding, output_padding=output_padding, dilation=dilation)
    y = sg.conv_transpose2d(sg.constant(x), sg.constant(w), **kw)
    want = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), **kw).numpy()
    assert y.shape == want.shape
    np.testing.assert_allclose(sg.compile(y)(), want, rtol=1e-12, atol=1e-12)


def test_the_input_gradient_restores_sizes_no_window_reached():
    # 7 rows, kernel 3, stride 2: rows 0..6 are read; 8 rows: the last is not, and its gradient is 0.
    for rows in (7, 8):
        x = sg.placeholder((1, 1, rows, 5), requires_grad=True)
        y = sg.conv2d(x, sg.constant(np.ones((1, 1, 3, 3))), stride=2)
        (gx,) = sg.grad(sg.sum(y), [x])
        value = sg.compile(gx, inputs=[x])(np.ones((1, 1, rows, 5)))
        assert value.shape == (1, 1, rows, 5)
        assert (value[0, 0, -1] == 0).all() == (rows == 8)


# ------------------------------------------------------------------ graph structure
def test_bias_is_an_add_after_the_op_and_conv1d_is_conv2d_on_an_added_axis():
    y = sg.conv2d(ph(1, 2, 4, 4), ph(3, 2, 3, 3), bias=ph(3))
    assert y.op == "add" and {t.op for t in y.inputs} == {"conv2d", "reshape"}
    z = sg.conv1d(ph(1, 2, 6), ph(3, 2, 3), stride=2, padding=1)
    assert z.op == "squeeze" and z.inputs[0].op == "conv2d" and z.shape == (1, 3, 3)
    assert z.inputs[0].attrs == {"stride": (1, 2), "padding": (0, 0, 1, 1), "dilation": (1, 1), "groups": 1}


def test_gradients_use_the_internal_forms_only_when_sizes_are_unknown():
    x, w = sg.placeholder((2, 3, 6, 6), requires_grad=True), sg.placeholder((4, 3, 3, 3), requires_grad=True)
    gx, gw = sg.grad(sg.sum(sg.conv2d(x, w, stride=2)), [x, w])
    assert gx.op == "conv_transpose2d" and gx.attrs["output_padding"] == (1, 1) and len(gx.inputs) == 2
    assert gw.op == "conv2d_weight" and gw.attrs["kernel"] == (3, 3) and len(gw.inputs) == 2
    x = sg.placeholder((None, 3, None, 6), requires_grad=True)
    gx, gw = sg.grad(sg.sum(sg.conv2d(x, w, stride=2)), [x, w])
    assert gx.attrs["output_padding"] is None and gx.inputs[2] is x


def test_conv2d_weight_takes_a_kernel_size_or_a_tensor_of_the_weights_shape():
    x, g, w = ph(1, 2, 5, 5), ph(1, 3, 3, 3), ph(3, 2, 3, 3)
    sized, like = sg.ops.conv2d_weight(x, g, 3, stride=2, padding=1), sg.ops.conv2d_weight(x, g, w, stride=2, padding=1)
    assert sized.attrs["kernel"] == (3, 3) and len(sized.inputs) == 2
    assert like.attrs["kernel"] is None and like.inputs[2] is w and like.shape == sized.shape == (3, 2, 3, 3)
    rng = np.random.default_rng(3)
    feeds = [rng.standard_normal(t.shape) for t in (x, g, w)]
    a, b = sg.compile([sized, like], inputs=[x, g, w])(*feeds)
    np.testing.assert_array_equal(a, b)
    _raises(ValueError, r"kernel must be >= 1", lambda: sg.ops.conv2d_weight(x, g, 0), op="conv2d_weight")


# ------------------------------------------------------------------ run time
def test_sizes_unknown_until_run_time_are_checked_when_a_plan_is_made():
    x, g = ph(1, 2, None, 4), ph(1, 3, None, 3)
    fn = sg.compile(apply("conv2d_weight", (x, g), dict(_GOOD, kernel=(2, 2))), inputs=[x, g])
    assert fn(np.ones((1, 2, 4, 4)), np.ones((1, 3, 3, 3))).shape == (3, 2, 2, 2)
    with pytest.raises(ShapeError, match=r"conv2d_weight \(built at test_conv.py:\d+\): the output gradient "
                                         r"\(1, 3, 3, 3\) does not fit the input \(1, 2, 5, 4\)"):
        fn(np.ones((1, 2, 5, 4)), np.ones((1, 3, 3, 3)))
    x, w, like = ph(1, 2, 3, 3), ph(2, 1, 2, 2), ph(1, 1, None, 4)
    fn = sg.compile(apply("conv_transpose2d", (x, w, like), dict(_GOOD, output_padding=None)), inputs=[x, w, like])
    assert fn(np.ones((1, 2, 3, 3)), np.ones((2, 1, 2, 2)), np.ones((1, 1, 4, 4))).shape == (1, 1, 4, 4)
    with pytest.raises(ShapeError, match="length 5 along axis 2 is not one a convolution could have taken"):
        fn(np.ones((1, 2, 3, 3)), np.ones((2, 1, 2, 2)), np.ones((1, 1, 5, 4)))


def test_the_kernels_check_what_they_are_given_too():
    attrs = dict(_GOOD)
    with pytest.raises(ValueError, match="does not fit the input"):
        im2col.conv2d_weight_kernel(np.ones((1, 2, 5, 4)), np.ones((1, 3, 3, 3)), kernel=(2, 2), **attrs)
    with pytest.raises(ValueError, match=r"no convolution of an input of size \(5, 4\) gives \(3, 3\)"):
        im2col.conv_transpose2d_kernel(np.ones((1, 2, 3, 3)), np.ones((2, 1, 2, 2)), np.ones((1, 1, 5, 4)),
                                       output_padding=None, **attrs)


CONV_SPECS = [s for s in OP_SPECS if s.op in ("conv2d", "conv_transpose2d", "conv2d_weight")]


@pytest.mark.parametrize("spec", CONV_SPECS, ids=lambda s: s.id)
def test_both_patch_layouts_agree(spec, monkeypatch):
    # (the specs' shapes mostly pick the exact layout for conv2d: force the row one where it applies)
    arrays = spec.draw()
    _, exact = first_grads(spec, arrays, order=2)
    with monkeypatch.context() as m:
        m.setattr(im2col, "ROWS", False)
        _, off = first_grads(spec, arrays, order=2)
    monkeypatch.setattr(im2col, "by_rows", lambda stride, depth, channels: stride == (1, 1))
    _, rows = first_grads(spec, arrays, order=2)
    for a, b, c in zip(exact, off, rows):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)


def test_non_finite_values_do_not_spread_through_the_extra_columns(monkeypatch):
    # The row layout reads past each row's end and cancels what it read with zeros; inf * 0 is nan, so it
    # is not used on a non-finite operand: the results are the exact layout's, nan for nan.
    attrs = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    x, g, w = np.ones((1, 2, 4, 4)), np.ones((1, 1, 4, 4)), np.ones((1, 2, 3, 3))
    x[0, 0, 1, 3] = w[0, 1, 0, 0] = np.inf

    def both():
        with np.errstate(invalid="ignore"):
            return (im2col.conv_transpose2d_kernel(g, w, output_padding=(0, 0), **attrs),
                    im2col.conv2d_weight_kernel(x, g, kernel=(3, 3), **attrs))
    found = both()
    with monkeypatch.context() as m:
        m.setattr(im2col, "ROWS", False)
        exact = both()
    for a, b in zip(found, exact):
        np.testing.assert_array_equal(a, b)
        assert np.isfinite(a).any() and not np.isfinite(a).all()
    monkeypatch.setattr(im2col, "_finite", lambda a: True)        # (what the check prevents)
    unchecked = both()
    assert all(np.isnan(u).sum() > np.isnan(e).sum() for u, e in zip(unchecked, exact))


# ------------------------------------------------------------------ float32 and a LeNet-sized case
def _lenet_parts(rng, dtype, batch):
    x = rng.standard_normal((batch, 1, 28, 28)).astype(dtype)
    w1 = (rng.standard_normal((8, 1, 3, 3)) / 3).astype(dtype)
    w2 = (rng.standard_normal((16, 8, 3, 3)) / 8).astype(dtype)
    b2 = rng.standard_normal(16).astype(dtype)
    return x, w1, w2, b2


def _lenet(x, w1, w2, b2):
    h = sg.tanh(sg.conv2d(x, w1, padding=1))[:, :, ::2, ::2]          # 8 x 14 x 14
    return sg.mean(sg.tanh(sg.conv2d(h, w2, padding=1, bias=b2)))


# (batch 64 makes the weight gradients' products long enough for OpenBLAS to thread them: seconds on a
# loaded machine, where its threads wait for each other)
@pytest.mark.parametrize("batch", [8, pytest.param(64, marks=pytest.mark.slow)])
def test_lenet_sized_convolutions_agree_compiled_eager_and_in_torch(batch):
    rng = np.random.default_rng(0)
    values = _lenet_parts(rng, np.float32, batch)
    phs = [sg.placeholder(v.shape, dtype=np.float32, requires_grad=True) for v in values]
    loss = _lenet(*phs)
    compiled = sg.compile([loss] + sg.grad(loss, phs[1:]), inputs=phs)(*values)
    leaves = [eager.tensor(v, requires_grad=True) for v in values]
    eloss = _lenet(*leaves)
    eagerly = [eloss.value] + [g.value for g in eager.grad(eloss, leaves[1:])]
    for c, e in zip(compiled, eagerly):
        assert c.dtype == np.float32 and e.dtype == np.float32
        np.testing.assert_allclose(c, e, rtol=1e-6, atol=1e-7)
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    h = torch.tanh(F.conv2d(ts[0], ts[1], padding=1))[:, :, ::2, ::2]
    tl = torch.tanh(F.conv2d(h, ts[2], ts[3], padding=1)).mean()
    theirs = [tl.detach().numpy()] + [g.numpy() for g in torch.autograd.grad(tl, ts[1:])]
    for c, t in zip(compiled, theirs):
        np.testing.assert_allclose(c, t, rtol=2e-4, atol=1e-6)


def test_the_report_counts_convolution_flops():
    x, w = ph(64, 1, 28, 28, dtype=np.float32), ph(8, 1, 3, 3, dtype=np.float32)
    fn = sg.compile(sg.conv2d(x, w, padding=1), inputs=[x, w])
    assert fn.report().rows[-1]["flops"] == 2 * 64 * 8 * 28 * 28 * 1 * 3 * 3
    x = sg.placeholder((64, 8, 14, 14), dtype=np.float32, requires_grad=True)
    w = sg.placeholder((16, 8, 3, 3), dtype=np.float32, requires_grad=True)
    forward = 2 * 64 * 16 * 14 * 14 * 8 * 3 * 3
    gx, gw = sg.grad(sg.sum(sg.conv2d(x, w, padding=1) * sg.constant(np.ones((64, 16, 14, 14), np.float32))), [x, w])
    fn = sg.compile([gx, gw], inputs=[x, w])
    # each of the two gradients costs what the forward does
    flops = fn.report().rows[-1]["flops"]
    assert 2 * forward <= flops < 2 * forward + 64 * 16 * 14 * 14 * 4
