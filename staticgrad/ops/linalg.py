"""Matrix product, with numpy.matmul's rules for 1-D operands and broadcast batch axes."""
from __future__ import annotations

import math

import numpy as np

from ..tensor import ShapeError, Tensor, TensorLike, format_shape
from .broadcast import expand_dims, squeeze
from .registry import C_ORDER, OUT, apply, broadcast_shapes, coerce, defop
from .shape import swap_last


def _matmul_spec(inputs):
    a, b = inputs
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"operands must be at least 1-D, got {format_shape(a.shape)} and {format_shape(b.shape)}")
    a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    k_a, k_b = a_shape[-1], b_shape[-2]
    if k_a is not None and k_b is not None and k_a != k_b:
        raise ShapeError(f"shapes {format_shape(a.shape)} and {format_shape(b.shape)} are not aligned: "
                         f"{k_a} (last axis of the first) != {k_b} "
                         f"({'the only axis' if b.ndim == 1 else 'axis -2'} of the second)")
    try:
        batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ShapeError:
        raise ShapeError(f"batch axes of {format_shape(a.shape)} and {format_shape(b.shape)} "
                         f"do not broadcast") from None
    shape = batch + (a_shape[-2],) * (a.ndim > 1) + (b_shape[-1],) * (b.ndim > 1)
    return shape, np.result_type(a.dtype, b.dtype)


def _matmul_vjp(g, out, a, b):
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    if not a_vec and not b_vec and a.ndim == 2 and b.ndim == 2:
        return matmul(g, swap_last(b)), matmul(swap_last(a), g)
    # Promote vectors to matrices as numpy does, differentiate, then drop the added axes again.
    a2 = expand_dims(a, 0) if a_vec else a
    b2 = expand_dims(b, b.ndim) if b_vec else b
    g2 = g
    if a_vec and b_vec:
        g2 = expand_dims(g, (0, 1))
    elif a_vec:
        g2 = expand_dims(g, g.ndim - 1)
    elif b_vec:
        g2 = expand_dims(g, g.ndim)
    ga = matmul(g2, swap_last(b2))
    gb = matmul(swap_last(a2), g2)
    if a_vec:
        ga = squeeze(ga, ga.ndim - 2)
    if b_vec:
        gb = squeeze(gb, gb.ndim - 1)
    return ga, gb


def matmul_kernel(a, b, out=None):
    # numpy multiplies an operand with a step of 0 (a broadcast view) in its own loop, not BLAS, which adds
    # in another order: a broadcast is a value of its shape, so such an operand is made contiguous, as the
    # fresh array a pass may fold it from was (x.T @ broadcast(-1.0) and x.T @ -ones gave other bits).
    if type(a) is np.ndarray and a.size > 1 and 0 in a.strides:
        a = np.ascontiguousarray(a)
    if type(b) is np.ndarray and b.size > 1 and 0 in b.strides:
        b = np.ascontiguousarray(b)
    return np.matmul(a, b, out=out)


def _matmul_fast(node, plan):
    """numpy's own matmul where no operand can be a broadcast view: matmul_kernel's check is not needed.
    Of two matrices with no size below 2 (both BLAS's gemm, or syrk for a @ a.T, either way), numpy.dot:
    the same bits, and a microsecond less per call than the ufunc machinery matmul runs through (a
    thousand-step loop's products: 5% of its time)."""
    if any(plan.may_broadcast(j) for j in node.inputs):
        return None
    shapes = [plan.nodes[j].shape for j in node.inputs]
    dtypes = {plan.dtype(j) for j in node.inputs} | {node.dtype}
    if all(len(s) == 2 and all(d is not None and d >= 2 for d in s) for s in shapes) and len(dtypes) == 1 \
            and dtypes.pop() in (np.float64, np.float32):
        return np.dot
    return np.matmul


def _matmul_flops(node, shapes) -> int:
    a = shapes[node.inputs[0]]
    return 2 * math.prod(shapes[node.id]) * (a[-1] if a else 1)


def _matmul_terms(node, shapes) -> int:
    """The scalar path's products: one per output element and inner index."""
    return math.prod(shapes[node.id]) * math.prod(shapes[node.inputs[0]][-1:])


def _matmul_scalar(em, node, ins, shape):
    """Sums of products, from 0.0 as BLAS accumulates (products that are all -0.0 sum to +0.0). BLAS's fused
    multiply-adds can still make the last bit differ: the first call checks the plan against numpy."""
    a, b = ins
    a2 = a.reshape((1,) + a.shape) if a.ndim == 1 else a
    b2 = b.reshape(b.shape + (1,)) if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    out = np.empty(batch + (a2.shape[-2], b2.shape[-1]), dtype=object)
    for idx in np.ndindex(out.shape):
        *bi, i, j = idx
        bi = tuple(bi)
        terms = [f"{a2[bi + (i, k)]} * {b2[bi + (k, j)]}" for k in range(a2.shape[-1])]
        out[idx] = em.assign("0.0 + " + " + ".join(terms) if terms else "0.0")
    return out.reshape(shape)


def _matmul_batch(attrs, shapes, stacked):
    """(T, ..., n) @ (n, m); (.., n) @ (T, n, m) for a matrix or vector; (T, ...) @ (T, ...) of equal ranks."""
    (ra, rb), (ta, tb) = (len(s) for s in shapes), stacked
    if ta and tb:
        ok = ra == rb >= 2
    else:
        ok = (ra >= 1 and rb == 2) if ta else (rb == 2 and ra <= 2)
    return (attrs, [0, 0]) if ok else None


_MATMUL = defop("matmul", matmul_kernel, _matmul_spec, _matmul_vjp, OUT | C_ORDER, core_axes=2, flops=_matmul_flops,
                batch=_matmul_batch,
                fast_kernel=_matmul_fast, scalar_rule=_matmul_scalar,
                scalar_work=_matmul_terms, torch=lambda T: T.matmul)


@_MATMUL.publish
def matmul(a: TensorLike, b: TensorLike) -> Tensor:
    """numpy.matmul (the ``@`` operator)."""
    a, b = coerce(a, b)
    return apply("matmul", (a, b))
