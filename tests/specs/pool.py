"""Specs of max_pool2d, avg_pool2d and their gradient ops, with references written window by window.

Max pool's inputs are ``distinct`` (no ties: finite differences are not valid there); the tie rule is
checked against torch in tests/ops/test_pool.py.
"""
from __future__ import annotations

import itertools

import numpy as np

import staticgrad as sg
from tests.op_specs import distinct, inputs, normal, spec

MAX_KEYS = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
AVG_KEYS = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")


def _full(kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, count_include_pad=True,
          divisor_override=None):
    """Every attribute, as pairs where torch takes pairs."""
    def pair(v):
        return tuple(v) if isinstance(v, tuple) else (v, v)
    return {"kernel_size": pair(kernel_size), "stride": pair(kernel_size if stride is None else stride),
            "padding": pair(padding), "dilation": pair(dilation), "ceil_mode": ceil_mode,
            "count_include_pad": count_include_pad, "divisor_override": divisor_override}


def _axis_windows(n, k, s, p, d, ceil_mode):
    """Per output position along one axis: (its valid input positions in order, its size counting the
    padding but nothing past it) (torch's documented output size and ceil-mode rule)."""
    span = (n + 2 * p - d * (k - 1) - 1) / s
    out = int(np.ceil(span) if ceil_mode else np.floor(span)) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    windows = []
    for o in range(out):
        start = o * s - p
        taps = [start + i * d for i in range(k)]
        windows.append(([t for t in taps if 0 <= t < n], min(start + k, n + p) - start))
    return windows


def _windows(shape, a):
    """([(output index (oh, ow), valid (h, w) positions in window order, padded size, valid size)], out)."""
    k, st, p, dil, ceil = a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["ceil_mode"]
    rows = _axis_windows(shape[-2], k[0], st[0], p[0], dil[0], ceil)
    cols = _axis_windows(shape[-1], k[1], st[1], p[1], dil[1], ceil)
    wins = [((i, j), [(h, w) for h in hs for w in ws], hn * wn, len(hs) * len(ws))
            for (i, (hs, hn)), (j, (ws, wn)) in itertools.product(enumerate(rows), enumerate(cols))]
    return wins, (len(rows), len(cols))


def max_ref(x, a):
    wins, out = _windows(x.shape, a)
    result = np.empty(x.shape[:-2] + out)
    for at, taps, _, _ in wins:
        result[(...,) + at] = np.max(np.stack([x[..., h, w] for h, w in taps]), axis=0)
    return result


def picks_ref(x, a):
    """Per window, the input position of its maximum (distinct inputs: one)."""
    wins, out = _windows(x.shape, a)
    picks = {}
    for at, taps, _, _ in wins:
        values = np.stack([x[..., h, w] for h, w in taps])
        picks[at] = (np.argmax(values, axis=0), taps)
    return picks, out


def max_grad_ref(x, g, a):
    picks, _ = picks_ref(x, a)
    result = np.zeros(x.shape)
    for at, (best, taps) in picks.items():
        for idx in np.ndindex(x.shape[:-2]):
            h, w = taps[best[idx]]
            result[idx + (h, w)] += g[idx + at]
    return result


def gather_ref(x, h, a):
    picks, out = picks_ref(x, a)
    result = np.empty(x.shape[:-2] + out)
    for at, (best, taps) in picks.items():
        for idx in np.ndindex(x.shape[:-2]):
            result[idx + at] = h[idx + taps[best[idx]]]
    return result


def avg_ref(x, a):
    wins, out = _windows(x.shape, a)
    result = np.empty(x.shape[:-2] + out)
    for at, taps, padded, valid in wins:
        total = np.sum(np.stack([x[..., h, w] for h, w in taps]), axis=0)
        divisor = a["divisor_override"] or (padded if a["count_include_pad"] else valid)
        result[(...,) + at] = total / divisor
    return result


def avg_grad_ref(g, x, a):
    """The adjoint of avg_ref, column by column: <avg(e_i), g> for each basis input e_i."""
    result = np.zeros(x.shape)
    for i in range(x.size):
        e = np.zeros(x.shape)
        e.flat[i] = 1.0
        result.flat[i] = np.sum(avg_ref(e, a) * g)
    return result


def _args(a, keys):
    return [a[k] for k in keys]


def _max_specs():
    cases = [  # (tag, shape, attrs)
        ("2x2", (2, 2, 4, 4), _full(2)),
        ("3x3-stride1-overlapping", (1, 2, 5, 5), _full(3, 1)),
        ("3x3-stride2-pad1", (2, 1, 5, 5), _full(3, 2, 1)),
        ("ceil-mode", (1, 2, 5, 5), _full(2, 2, ceil_mode=True)),
        ("ceil-mode-pad-overlapping", (1, 1, 6, 6), _full(3, 2, 1, ceil_mode=True)),
        ("dilation2", (1, 1, 6, 5), _full(2, 1, 1, dilation=2)),
        ("non-square", (2, 2, 4, 6), _full((2, 3), (1, 2), (1, 0))),
        ("3d-input", (2, 5, 5), _full(2, 1)),
        ("batch1-1x1-stride2", (1, 3, 5, 5), _full(1, 2)),
    ]
    for tag, shape, a in cases:
        args = _args(a, MAX_KEYS)
        spec("max_pool2d", (lambda args: lambda x: sg.max_pool2d(x, *args))(args), inputs(distinct(*shape)),
             (lambda a: lambda x: max_ref(x, a))(a), tag=tag,
             torch=(lambda args: lambda T, x: T.nn.functional.max_pool2d(x, *args))(args))
    # (values of at most 48 elements: the fuzzer takes no larger)
    grads = [("3x3-stride1-overlapping", (1, 1, 5, 5), _full(3, 1)), cases[4], ("2x2-tiles", (1, 2, 4, 6), _full(2, 2)),
             ("non-square-3d-input", (2, 4, 5), _full((2, 3), (1, 2), (1, 0)))]
    for tag, shape, a in grads:
        out = max_ref(np.zeros(shape), a).shape
        args = _args(a, MAX_KEYS)
        spec("max_pool2d_grad", (lambda args: lambda x, g: sg.ops.max_pool2d_grad(x, g, *args))(args),
             inputs(distinct(*shape), normal(*out)), (lambda a: lambda x, g: max_grad_ref(x, g, a))(a), tag=tag,
             torch=(lambda args: lambda T, x, g: _torch_max_grad(T, x, g, args))(args))
        spec("max_pool2d_grad", (lambda args: lambda x, g: sg.ops.max_pool2d_grad(
                 x, g, *args, pooled=sg.max_pool2d(x, *args)))(args),
             inputs(distinct(*shape), normal(*out)), (lambda a: lambda x, g: max_grad_ref(x, g, a))(a),
             tag=tag + "-pooled-given", torch=(lambda args: lambda T, x, g: _torch_max_grad(T, x, g, args))(args))
        spec("max_pool2d_gather", (lambda args: lambda x, h: sg.ops.max_pool2d_gather(x, h, *args))(args),
             inputs(distinct(*shape), normal(*shape)), (lambda a: lambda x, h: gather_ref(x, h, a))(a), tag=tag,
             torch=(lambda args: lambda T, x, h: _torch_gather(T, x, h, args))(args))


def _torch_max_grad(T, x, g, args):
    """torch's backward of its max pool, at x, for g (x detached: no gradient flows to it)."""
    xd = x.detach().requires_grad_()
    with T.enable_grad():
        return T.autograd.grad(T.nn.functional.max_pool2d(xd, *args), xd, g, create_graph=True)[0]


def _torch_gather(T, x, h, args):
    """torch's double backward of its max pool: the VJP of its backward with respect to the gradient."""
    xd = x.detach().requires_grad_()
    with T.enable_grad():
        u = T.zeros(T.nn.functional.max_pool2d(xd, *args).shape, dtype=h.dtype, requires_grad=True)
        gx = T.autograd.grad(T.nn.functional.max_pool2d(xd, *args), xd, u, create_graph=True)[0]
        return T.autograd.grad(gx, u, h, create_graph=True)[0]


def _avg_specs():
    cases = [
        ("2x2", (2, 2, 4, 4), _full(2)),
        ("3x3-stride1-overlapping", (1, 2, 5, 5), _full(3, 1)),
        ("pad1-count-pad", (2, 1, 5, 5), _full(3, 2, 1)),
        ("pad1-without-pad", (2, 1, 5, 5), _full(3, 2, 1, count_include_pad=False)),
        ("ceil-mode-past-the-padding", (1, 1, 6, 6), _full(3, 2, 1, ceil_mode=True)),
        ("ceil-mode-without-pad", (1, 2, 6, 5), _full(3, 2, 1, ceil_mode=True, count_include_pad=False)),
        ("divisor-override", (1, 2, 4, 4), _full(2, 1, divisor_override=3)),
        ("non-square-3d-input", (2, 4, 6), _full((2, 3), (2, 1), (1, 1))),
    ]
    for tag, shape, a in cases:
        args = _args(a, AVG_KEYS)
        spec("avg_pool2d", (lambda args: lambda x: sg.avg_pool2d(x, *args))(args), inputs(normal(*shape)),
             (lambda a: lambda x: avg_ref(x, a))(a), tag=tag,
             torch=(lambda args: lambda T, x: T.nn.functional.avg_pool2d(x, *args))(args))
    grads = [("3x3-stride1-overlapping", (1, 1, 5, 5), _full(3, 1)), cases[4], ("2x2-tiles", (1, 2, 4, 6), _full(2, 2)),
             ("ceil-mode-without-pad", (2, 6, 3), _full(3, 2, 1, ceil_mode=True, count_include_pad=False)), cases[6]]
    for tag, shape, a in grads:
        out = avg_ref(np.zeros(shape), a).shape
        args = _args(a, AVG_KEYS)
        spec("avg_pool2d_grad", (lambda args: lambda g, x: sg.ops.avg_pool2d_grad(g, x, *args))(args),
             inputs(normal(*out), normal(*shape)), (lambda a: lambda g, x: avg_grad_ref(g, x, a))(a), tag=tag,
             torch=(lambda args: lambda T, g, x: T.ops.aten.avg_pool2d_backward(g, x, *args))(args))


_max_specs()
_avg_specs()
