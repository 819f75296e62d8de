"""The shared-patches ops' kernels against their torch twins (which the study's torch programs use), and
their bits against the plain convolution kernels they stand in for."""
import numpy as np
import pytest

from staticgrad.ops import REGISTRY
from staticgrad.ops.im2col import conv2d_kernel, conv2d_weight_kernel

RNG = np.random.default_rng(3)
PAD, DIL = (1, 1, 1, 1), (1, 1)


def _patches(x):
    return REGISTRY["conv2d_patches"].kernel(x, (3, 3), PAD, DIL)


def test_the_same_bits_as_conv2d_and_conv2d_weight():
    x, w = RNG.normal(size=(3, 8, 6, 7)).astype("float32"), RNG.normal(size=(4, 8, 3, 3)).astype("float32")
    b, g = RNG.normal(size=(4, 1, 1)).astype("float32"), RNG.normal(size=(3, 4, 6, 7)).astype("float32")
    cols = _patches(x)
    y = REGISTRY["conv2d_from_patches+add+relu"].kernel(cols, w, b, groups=1, width=7)
    assert np.array_equal(y, conv2d_kernel(x, w, (1, 1), PAD, DIL, 1, bias=b, relu=True))
    dw = REGISTRY["conv2d_weight_from_patches"].kernel(cols, g, groups=1)
    assert np.array_equal(dw, conv2d_weight_kernel(x, g, stride=(1, 1), padding=PAD, dilation=DIL, groups=1,
                                                   kernel=(3, 3)))


def test_the_torch_twins():
    torch = pytest.importorskip("torch")
    x, w = RNG.normal(size=(2, 4, 5, 6)), RNG.normal(size=(4, 2, 3, 3))
    b, g = RNG.normal(size=(4, 1, 1)), RNG.normal(size=(2, 4, 5, 6))
    cols = _patches(x)
    T = [torch.tensor(a) for a in (x, w, b, g, cols)]
    twin = REGISTRY["conv2d_patches"].torch(torch, kernel=(3, 3), padding=PAD, dilation=DIL)
    np.testing.assert_allclose(twin(T[0]).numpy(), cols)
    for op in ("conv2d_from_patches", "conv2d_from_patches+add", "conv2d_from_patches+add+relu"):
        args = (cols, w, b) if "+add" in op else (cols, w)
        twin = REGISTRY[op].torch(torch, groups=2, width=6)
        want = REGISTRY[op].kernel(*args, groups=2, width=6)
        np.testing.assert_allclose(twin(*[torch.tensor(a) for a in args]).numpy(), want, rtol=1e-12)
    twin = REGISTRY["conv2d_weight_from_patches"].torch(torch, groups=2)
    want = REGISTRY["conv2d_weight_from_patches"].kernel(cols, g, groups=2)
    np.testing.assert_allclose(twin(T[4], T[3]).numpy(), want, rtol=1e-12)
