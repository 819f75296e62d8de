"""The convolutions on the scalar path (tiny float64 plans as Python code): sums of products.

All three ops are read off one enumeration, that of conv2d(x, w) -> y: every (x index, w index, y index)
whose product enters y. conv2d sums them per y element; conv_transpose2d, conv2d's adjoint in its input,
per x element (its own input plays y); conv2d_weight, the adjoint in the weight, per w element. The terms
of one element come in the order (channel, kernel row, kernel column) that the im2col products use; BLAS
may still add them in another order than Python does (the last bit: the plan is checked against numpy
before it is used, as for matmul).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .im2col import out_hw


def products(x_shape, w_shape, stride, padding, dilation, groups):
    """Yield (x index, w index, y index) for each product of conv2d(x, w), padding skipped."""
    n_in, _, height, width = x_shape
    n_out, cg, kh, kw = w_shape
    (sh, sw), (dh, dw), og = stride, dilation, n_out // groups
    oh, ow = out_hw(x_shape, (kh, kw), stride, padding, dilation)
    for n, o, y, x, c, i, j in itertools.product(*map(range, (n_in, n_out, oh, ow, cg, kh, kw))):
        row, col = y * sh + i * dh - padding[0], x * sw + j * dw - padding[2]
        if 0 <= row < height and 0 <= col < width:
            yield (n, o // og * cg + c, row, col), (o, c, i, j), (n, o, y, x)


def _sums(em, shape, terms):
    """One statement per element of ``shape``: the sum of its ``terms`` (index -> products), from 0.0."""
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        found = terms.get(idx)
        out[idx] = em.assign("0.0 + " + " + ".join(found) if found else "0.0")
    return out


def _geometry(node):
    return {key: node.attrs[key] for key in ("stride", "padding", "dilation", "groups")}


def conv2d_scalar(em, node, ins, shape):
    x, w = ins
    terms = {}
    for a, b, c in products(x.shape, w.shape, **_geometry(node)):
        terms.setdefault(c, []).append(f"{x[a]} * {w[b]}")
    return _sums(em, shape, terms)


def transpose_scalar(em, node, ins, shape):
    # The result is conv2d's input, this op's input its output (rows past x's, output_padding's beyond the
    # stride, are read by no window of x: they stay 0.0).
    x, w = ins[:2]
    terms = {}
    for a, b, c in products(shape, w.shape, **_geometry(node)):
        if c[2] < x.shape[2] and c[3] < x.shape[3]:
            terms.setdefault(a, []).append(f"{x[c]} * {w[b]}")
    return _sums(em, shape, terms)


def weight_scalar(em, node, ins, shape):
    x, g = ins[:2]
    terms = {}
    for a, b, c in products(x.shape, shape, **_geometry(node)):
        terms.setdefault(b, []).append(f"{x[a]} * {g[c]}")
    return _sums(em, shape, terms)


def conv2d_work(node, shapes):
    """The scalar statements: at most one product per output element and kernel element of its group."""
    return math.prod(shapes[node.id]) * math.prod(shapes[node.inputs[1]][1:])


def transpose_work(node, shapes):
    return math.prod(shapes[node.inputs[0]]) * math.prod(shapes[node.inputs[1]][1:])


def weight_work(node, shapes):
    return math.prod(shapes[node.inputs[1]]) * math.prod(shapes[node.id][1:])
