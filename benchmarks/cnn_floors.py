"""Where V1 stops for numpy: its matrix products alone, its layout moves alone, and the leanest whole step.

Run through ``python -m benchmarks.floors`` (benchmarks/floors.py times them beside the hand-written step
and staticgrad's). Everything here writes into arrays made once, with ``out=``: what is timed is the
arithmetic and the memory traffic, not the allocator (on the machine measured, first touching a fresh
page costs about 3 µs, and the hand-written step's fresh arrays fault some 3,000 pages per call).

- the products: the 8 matrix products of benchmarks/reference.py's step at its shapes and operand
  layouts (each convolution's forward product and weight gradient, conv2's column gradient, the linear
  layer's three), float32;
- the layout moves of that step: the two padded copies, the two im2col copies, the nine strided adds of
  col2im, the transposes between the products' (channel, batch * pixel) layout and NCHW (both
  convolutions' outputs, both incoming gradients, conv2's input gradient);
- the leanest step: the whole computation (loss and the six gradients) in as few numpy passes as it
  allows, activations kept channel-first (C, N, H, W) so that only the flattening transposes, ReLU and
  the first-maximum masks of the pooling made once in the forward pass.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .workloads import CNN_PARAM_NAMES

CORNERS = ((0, 0), (0, 1), (1, 0), (1, 1))


def _sizes(data):
    n, c0, h, _ = data["X"].shape
    c1, c2 = data["w1"].shape[0], data["w2"].shape[0]
    return n, c0, c1, c2, h


def matmuls_of_v1(data):
    """The 8 products, on operands of the reference's shapes and layouts, into arrays made once."""
    rng = np.random.default_rng(0)
    n, c0, c1, c2, h = _sizes(data)
    q = h // 2
    f32 = np.float32

    def rand(*shape):
        return rng.standard_normal(shape).astype(f32)
    w1m, w2m, w3 = data["w1"].reshape(c1, -1), data["w2"].reshape(c2, -1), data["w3"]
    cols1, cols2 = rand(c0 * 9, n * h * h), rand(c1 * 9, n * q * q)
    d1, d2 = rand(c1, n * h * h), rand(c2, n * q * q)
    flat, dz3 = rand(n, w3.shape[0]), rand(n, w3.shape[1])
    outs = [np.empty(s, f32) for s in ((c1, n * h * h), (c1, c0 * 9), (c2, n * q * q), (c2, c1 * 9),
                                       (c1 * 9, n * q * q), (n, w3.shape[1]), w3.shape, (n, w3.shape[0]))]
    pairs = [(w1m, cols1), (d1, cols1.T), (w2m, cols2), (d2, cols2.T), (w2m.T, d2), (flat, w3), (flat.T, dz3),
             (dz3, w3.T)]

    def products():
        for (a, b), out in zip(pairs, outs):
            np.matmul(a, b, out=out)
    return products


def _windows(xp, channel_axis):
    """The (C, 3, 3, N, H, W) view of the 3x3 windows of a padded (N, C, H+2, W+2) array (``channel_axis``
    1) or (C, N, H+2, W+2) array (0): im2col's columns before their copy."""
    s = xp.strides
    c, n = xp.shape[channel_axis], xp.shape[1 - channel_axis]
    h, w = xp.shape[2] - 2, xp.shape[3] - 2
    return as_strided(xp, (c, 3, 3, n, h, w), (s[channel_axis], s[2], s[3], s[1 - channel_axis], s[2], s[3]),
                      writeable=False)


def _random_like_step(data, seed=0):
    """Arrays of the shapes the reference's step moves, filled with normal numbers (values do not matter)."""
    rng = np.random.default_rng(seed)
    n, c0, c1, c2, h = _sizes(data)
    q = h // 2
    shapes = {"p1": (n, c1, q, q), "z1": (c1, n * h * h), "z2": (c2, n * q * q), "dz1": (n, c1, h, h),
              "dz2": (n, c2, q, q), "dcols2": (c1 * 9, n * q * q)}
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def im2col_moves_of_v1(data):
    """The reference's two padded copies and two im2col copies, into arrays made once."""
    n, c0, c1, c2, h = _sizes(data)
    q = h // 2
    X, p1 = data["X"], _random_like_step(data)["p1"]
    xp1, xp2 = np.zeros((n, c0, h + 2, h + 2), np.float32), np.zeros((n, c1, q + 2, q + 2), np.float32)
    cols1, cols2 = np.empty((c0 * 9, n * h * h), np.float32), np.empty((c1 * 9, n * q * q), np.float32)

    def moves():
        xp1[:, :, 1:-1, 1:-1] = X
        np.copyto(cols1.reshape(c0, 3, 3, n, h, h), _windows(xp1, 1))
        xp2[:, :, 1:-1, 1:-1] = p1
        np.copyto(cols2.reshape(c1, 3, 3, n, q, q), _windows(xp2, 1))
    return moves


def col2im_moves_of_v1(data):
    """The reference's col2im of conv2's column gradient: zeroing, nine strided adds, the crop to NCHW."""
    n, c0, c1, c2, h = _sizes(data)
    q = h // 2
    d = _random_like_step(data)["dcols2"].reshape(c1, 3, 3, n, q, q)
    dxp, dx = np.empty((c1, n, q + 2, q + 2), np.float32), np.empty((n, c1, q, q), np.float32)

    def moves():
        dxp.fill(0)
        for i in range(3):
            for j in range(3):
                window = dxp[:, :, i:i + q, j:j + q]
                np.add(window, d[:, i, j], out=window)
        np.copyto(dx, dxp[:, :, 1:-1, 1:-1].transpose(1, 0, 2, 3))
    return moves


def transposes_of_v1(data):
    """The reference's moves between the products' (channel, batch * pixel) layout and NCHW: both
    convolutions' outputs to NCHW, both incoming NCHW gradients to the products' layout."""
    n, c0, c1, c2, h = _sizes(data)
    q = h // 2
    r = _random_like_step(data)
    z1, z2 = np.empty((n, c1, h, h), np.float32), np.empty((n, c2, q, q), np.float32)
    d1, d2 = np.empty((c1, n * h * h), np.float32), np.empty((c2, n * q * q), np.float32)

    def moves():
        np.copyto(z1, r["z1"].reshape(c1, n, h, h).transpose(1, 0, 2, 3))
        np.copyto(z2, r["z2"].reshape(c2, n, q, q).transpose(1, 0, 2, 3))
        np.copyto(d2.reshape(c2, n, q, q), r["dz2"].transpose(1, 0, 2, 3))
        np.copyto(d1.reshape(c1, n, h, h), r["dz1"].transpose(1, 0, 2, 3))
    return moves


def _pool(a, out, masks, taken):
    """2x2 max pooling of ``a`` (C, N, H, W) into ``out``, and per window corner the mask of where the
    gradient goes: the window's first maximum, and nowhere when that maximum is not positive (ReLU's
    gradient, folded in: a window's maximum is positive exactly when its ReLU input there was)."""
    c, n, h, w = a.shape
    r = a.reshape(c, n, h // 2, 2, w // 2, 2)
    corners = [r[:, :, :, i, :, j] for i, j in CORNERS]
    np.maximum(corners[0], corners[1], out=out)
    np.maximum(out, corners[2], out=out)
    np.maximum(out, corners[3], out=out)
    np.less_equal(out, 0, out=taken)
    for corner, mask in zip(corners, masks):
        np.equal(corner, out, out=mask)
        np.greater(mask, taken, out=mask)          # and not taken by an earlier corner
        np.logical_or(taken, mask, out=taken)


def _unpool(dout, masks, dx):
    """The gradient of _pool (ReLU's included) into ``dx`` (C, N, H, W)."""
    c, n, h, w = dx.shape
    r = dx.reshape(c, n, h // 2, 2, w // 2, 2)
    for (i, j), mask in zip(CORNERS, masks):
        np.multiply(dout, mask, out=r[:, :, :, i, :, j])


def _col2im_into(dx, d):
    """The input gradient of a 3x3 padding-1 convolution from its column gradient ``d`` (C, 3, 3, N, H, W):
    offset (1, 1) copied, the other eight added where they fall inside the image (no padded buffer)."""
    h, w = dx.shape[2:]
    np.copyto(dx, d[:, 1, 1])
    for i in range(3):
        for j in range(3):
            if (i, j) != (1, 1):
                ys, yd = slice(max(0, 1 - i), h + min(0, 1 - i)), slice(max(0, i - 1), h + min(0, i - 1))
                xs, xd = slice(max(0, 1 - j), w + min(0, 1 - j)), slice(max(0, j - 1), w + min(0, j - 1))
                np.add(dx[:, :, yd, xd], d[:, i, j, :, ys, xs], out=dx[:, :, yd, xd])


class LeanStep:
    """V1's loss and gradients with the fewest numpy passes and no allocation in the step but the
    loss's scalar and a few small reductions: activations channel-first (C, N, H, W), so that the
    products read and write them without a transpose; conv1's output pooled straight into the interior
    of conv2's padded input; ReLU's gradient folded into the pooling masks; col2im without a padded
    buffer. Calling it returns [loss, gw1, gb1, gw2, gb2, gw3, gb3] (arrays it reuses)."""

    def __init__(self, data):
        n, c0, c1, c2, h = self.sizes = _sizes(data)
        q, e = h // 2, h // 4
        f32 = np.float32
        self.X, self.t = data["X"], data["t"]
        self.w1, self.b1, self.w2, self.b2, self.w3, self.b3 = (data[k] for k in CNN_PARAM_NAMES)
        k = self.w3.shape[1]
        self.xp1, self.xp2 = np.zeros((c0, n, h + 2, h + 2), f32), np.zeros((c1, n, q + 2, q + 2), f32)
        self.cols1, self.cols2 = np.empty((c0 * 9, n * h * h), f32), np.empty((c1 * 9, n * q * q), f32)
        self.a1, self.a2 = np.empty((c1, n * h * h), f32), np.empty((c2, n * q * q), f32)
        self.p2 = np.empty((c2, n, e, e), f32)
        self.masks1 = [np.empty((c1, n, q, q), bool) for _ in CORNERS]
        self.masks2 = [np.empty((c2, n, e, e), bool) for _ in CORNERS]
        self.taken1, self.taken2 = np.empty((c1, n, q, q), bool), np.empty((c2, n, e, e), bool)
        self.flat, self.dflat = np.empty((n, c2 * e * e), f32), np.empty((n, c2 * e * e), f32)
        self.z3 = np.empty((n, k), f32)
        self.dp2 = np.empty((c2, n, e, e), f32)
        self.dz2, self.dz1 = np.empty((c2, n * q * q), f32), np.empty((c1, n * h * h), f32)
        self.dcols2, self.dp1 = np.empty((c1 * 9, n * q * q), f32), np.empty((c1, n, q, q), f32)
        self.grads = [np.empty((c1, c0 * 9), f32), np.empty(c1, f32), np.empty((c2, c1 * 9), f32), np.empty(c2, f32),
                      np.empty_like(self.w3), np.empty(k, f32)]
        self.at = np.arange(n) * k + self.t

    def forward(self):
        n, c0, c1, c2, h = self.sizes
        q = h // 2
        self.xp1[:, :, 1:-1, 1:-1] = self.X.transpose(1, 0, 2, 3)
        np.copyto(self.cols1.reshape(c0, 3, 3, n, h, h), _windows(self.xp1, 0))
        for a, w, b, cols in ((self.a1, self.w1, self.b1, self.cols1), (self.a2, self.w2, self.b2, self.cols2)):
            if a is self.a2:
                np.copyto(cols.reshape(c1, 3, 3, n, q, q), _windows(self.xp2, 0))
            np.matmul(w.reshape(w.shape[0], -1), cols, out=a)
            np.add(a, b[:, None], out=a)
            np.maximum(a, 0, out=a)
            if a is self.a1:
                _pool(a.reshape(c1, n, h, h), self.xp2[:, :, 1:-1, 1:-1], self.masks1, self.taken1)
        _pool(self.a2.reshape(c2, n, q, q), self.p2, self.masks2, self.taken2)
        np.copyto(self.flat.reshape(n, c2, h // 4, h // 4), self.p2.transpose(1, 0, 2, 3))
        z3 = self.z3
        np.matmul(self.flat, self.w3, out=z3)
        np.add(z3, self.b3, out=z3)
        np.subtract(z3, z3.max(axis=1, keepdims=True), out=z3)
        shifted_at = z3.take(self.at)
        np.exp(z3, out=z3)
        total = np.add.reduce(z3, axis=1, keepdims=True)
        loss = np.add.reduce(np.log(total[:, 0]) - shifted_at) / n
        np.divide(z3, total, out=z3)
        z3.reshape(-1)[self.at] -= 1
        np.divide(z3, n, out=z3)                  # now the logits' gradient
        return loss

    def backward(self):
        n, c0, c1, c2, h = self.sizes
        q, e = h // 2, h // 4
        gw1, gb1, gw2, gb2, gw3, gb3 = self.grads
        dz3 = self.z3
        np.matmul(self.flat.T, dz3, out=gw3)
        np.add.reduce(dz3, axis=0, out=gb3)
        np.matmul(dz3, self.w3.T, out=self.dflat)
        np.copyto(self.dp2, self.dflat.reshape(n, c2, e, e).transpose(1, 0, 2, 3))
        _unpool(self.dp2, self.masks2, self.dz2.reshape(c2, n, q, q))
        np.add.reduce(self.dz2, axis=1, out=gb2)
        np.matmul(self.dz2, self.cols2.T, out=gw2)
        np.matmul(self.w2.reshape(c2, -1).T, self.dz2, out=self.dcols2)
        _col2im_into(self.dp1, self.dcols2.reshape(c1, 3, 3, n, q, q))
        _unpool(self.dp1, self.masks1, self.dz1.reshape(c1, n, h, h))
        np.add.reduce(self.dz1, axis=1, out=gb1)
        np.matmul(self.dz1, self.cols1.T, out=gw1)

    def __call__(self):
        loss = self.forward()
        self.backward()
        gw1, gb1, gw2, gb2, gw3, gb3 = self.grads
        return [loss, gw1.reshape(self.w1.shape), gb1, gw2.reshape(self.w2.shape), gb2, gw3, gb3]


FLOORS = (("8 matrix products", matmuls_of_v1), ("im2col copies", im2col_moves_of_v1),
          ("col2im adds", col2im_moves_of_v1), ("NCHW transposes", transposes_of_v1), ("leanest numpy step", LeanStep))
