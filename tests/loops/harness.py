"""One model function run four ways, each checked against the others.

A model is written once as ``model(m, *inputs)`` over a namespace ``m`` (``m.scan``, ``m.tanh``, ...) and
returns a pytree of outputs. :func:`check` runs it on placeholders (compiled with the default passes and
with ``optimize=False``), on eager tensors, on numpy arrays with a plain Python loop for ``m.scan`` (the
reference), and on torch tensors where torch is installed; it compares the values, and the gradients of
a fixed weighted sum of the float outputs against central differences of the numpy reference, against
eager mode's and against torch autograd's.
"""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np

import staticgrad as sg
from staticgrad import eager
from staticgrad.testing import check_grads, numerical_grad

HAS_TORCH = importlib.util.find_spec("torch") is not None


# ------------------------------------------------------------------ pytrees, independently of sg.loops
def tree_leaves(tree):
    if tree is None:
        return []
    if isinstance(tree, (tuple, list)):
        return [leaf for x in tree for leaf in tree_leaves(x)]
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in tree_leaves(tree[k])]
    return [tree]


def tree_map(fn, *trees):
    first = trees[0]
    if first is None:
        return None
    if isinstance(first, (tuple, list)):
        mapped = [tree_map(fn, *parts) for parts in zip(*trees)]
        return type(first)(*mapped) if hasattr(type(first), "_fields") else type(first)(mapped)
    if isinstance(first, dict):
        return {k: tree_map(fn, *(t[k] for t in trees)) for k in first}
    return fn(*trees)


def reference_scan(stack, zeros):
    """jax.lax.scan's semantics as a plain Python loop (``stack`` stacks a list of arrays on a new axis 0;
    ``zeros(shape, like)`` makes the zero slice a zero-step loop traces its ``fn`` on for the ys' shapes)."""
    def scan(fn, init, xs=None, length=None, reverse=False, checkpoint=None):
        leaves = tree_leaves(xs)
        steps = length if not leaves else len(leaves[0])
        carry, ys = init, [None] * steps
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            carry, ys[t] = fn(carry, tree_map(lambda v: v[t], xs))
        if steps == 0:
            _, y = fn(init, tree_map(lambda v: zeros(v.shape[1:], v), xs))
            return carry, tree_map(lambda v: stack([v])[:0], y)
        return carry, tree_map(lambda *v: stack(list(v)), *ys)
    return scan


def _np_cast(x, dtype):
    return np.asarray(x).astype(dtype)


def python_cond(pred, true_fn, false_fn, *operands):
    return true_fn(*operands) if bool(pred) else false_fn(*operands)


NP = SimpleNamespace(
    name="numpy", cond=python_cond, scan=reference_scan(np.stack, lambda shape, like: np.zeros(shape, like.dtype)),
    tanh=np.tanh, sin=np.sin, cos=np.cos, exp=np.exp, sqrt=np.sqrt, sum=np.sum, maximum=np.maximum,
    cast=_np_cast, const=np.asarray, zeros=np.zeros, stack=np.stack, where=np.where)

SG = SimpleNamespace(
    name="staticgrad", cond=sg.cond, scan=sg.scan, tanh=sg.tanh, sin=sg.sin, cos=sg.cos, exp=sg.exp, sqrt=sg.sqrt,
    sum=sg.sum, maximum=sg.maximum, cast=sg.cast, const=sg.constant,
    zeros=lambda shape, dtype=float: sg.constant(np.zeros(shape, dtype)), stack=sg.stack, where=sg.where)

# Eager runs make their constants eager tensors (a constant in eager mode stays symbolic: its sums would too)
EAGER = SimpleNamespace(**dict(vars(SG), name="eager", const=lambda v: eager.tensor(np.asarray(v)),
                               zeros=lambda shape, dtype=float: eager.tensor(np.zeros(shape, dtype))))


def torch_namespace():
    import torch

    def tsum(x, axis=None):
        return torch.sum(x) if axis is None else torch.sum(x, dim=axis)

    def cast(x, dtype):
        return x.to(getattr(torch, np.dtype(dtype).name))

    def const(v):
        return torch.as_tensor(np.asarray(v))

    def zeros(shape, dtype=float):
        return torch.zeros(shape, dtype=getattr(torch, np.dtype(dtype).name))

    return SimpleNamespace(
        name="torch", cond=python_cond,
        scan=reference_scan(torch.stack, lambda shape, like: torch.zeros(shape, dtype=like.dtype)),
        tanh=torch.tanh, sin=torch.sin, cos=torch.cos, exp=torch.exp, sqrt=torch.sqrt, sum=tsum,
        maximum=torch.maximum, cast=cast, const=const, zeros=zeros, stack=torch.stack, where=torch.where)


# ------------------------------------------------------------------ comparing
def tolerance(dtype):
    return (1e-5, 1e-6) if np.dtype(dtype) == np.float32 else (1e-10, 1e-12)


def assert_same(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    rtol, atol = tolerance(want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def weights_for(ref_leaves, seed=1):
    """A fixed random weight per float output (the gradient checked is that of sum(w * out))."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, np.shape(v)).astype(np.asarray(v).dtype) if np.asarray(v).dtype.kind == "f"
            else None for v in ref_leaves]


def weighted_sum(leaves, weights, total_sum, as_const):
    total = None
    for v, w in zip(leaves, weights):
        if w is not None:
            term = total_sum(v * as_const(w))
            total = term if total is None else total + term
    return total


def placeholders(arrays, unknown=()):
    """One placeholder per array, float ones requiring grad; ``unknown`` lists inputs whose first size
    is left unknown (fed at run time)."""
    return [sg.placeholder(((None,) + a.shape[1:]) if k in unknown else a.shape, dtype=a.dtype, name=f"a{k}",
                           requires_grad=a.dtype.kind == "f") for k, a in enumerate(arrays)]


def compiled_values(model, arrays, unknown=()):
    """{optimize: outputs} of the model compiled with and without the passes, and the optimized Function."""
    phs = placeholders(arrays, unknown)
    outs = tree_leaves(model(SG, *phs))
    result, fns = {}, {}
    for opt in (True, False):
        fns[opt] = sg.compile(outs, inputs=phs, optimize=opt)
        result[opt] = fns[opt](*arrays)
    return result, fns[True]


def check(model, *arrays, unknown=(), order=1, grads=True, torch=True, eager_mode=True, seed=1, fed_weights=False):
    """Run ``model`` every way on ``arrays`` and compare (see the module's docstring). ``order=2`` also
    runs staticgrad.testing.check_grads to second order (inputs of known shapes only). The weights of the
    outputs in the loss differentiated are constants, or with ``fed_weights`` placeholders fed them (the
    graph then holds no constant a pass could fold them into). Returns the Function compiled with the
    default passes."""
    arrays = [np.asarray(a) for a in arrays]
    ref = [np.asarray(v) for v in tree_leaves(model(NP, *arrays))]
    got, fn = compiled_values(model, arrays, unknown)
    for opt, values in got.items():
        assert len(values) == len(ref), f"optimize={opt}: {len(values)} outputs, expected {len(ref)}"
        for k, (g, r) in enumerate(zip(values, ref)):
            assert_same(g, r, f"output {k} (optimize={opt})")
    if eager_mode:
        values = eager_values(model, arrays)
        assert len(values) == len(ref), f"eager: {len(values)} outputs, expected {len(ref)}"
        for k, (g, r) in enumerate(zip(values, ref)):
            assert_same(g, r, f"output {k} (eager)")
    float_in = [k for k, a in enumerate(arrays) if a.dtype.kind == "f"]
    weights = weights_for(ref, seed)
    if not grads or not float_in or all(w is None for w in weights):
        return fn
    static = static_grads(model, arrays, weights, unknown, fed_weights)
    numeric = reference_grads(model, arrays, weights)
    for k, g in zip(float_in, static[True]):
        assert_close_grad(g, numeric[k], arrays[k].dtype, f"d/d input {k} against finite differences")
    for k, (a, b) in enumerate(zip(static[True], static[False])):
        assert_same(a, b, f"gradient {k}: optimize=True against optimize=False")
    if eager_mode:
        for k, (g, e) in enumerate(zip(static[True], eager_grads(model, arrays, weights))):
            assert_same(g, e, f"gradient of input {float_in[k]}: compiled against eager")
    if torch and HAS_TORCH:
        for k, (g, t) in enumerate(zip(static[True], torch_grads(model, arrays, weights))):
            assert_same(g, t, f"gradient of input {float_in[k]}: compiled against torch")
    if order >= 2:
        check_grads(lambda *a: weighted_sum(tree_leaves(model(SG, *a)), weights, sg.sum, sg.constant), arrays,
                    order=order)
    return fn


def assert_close_grad(got, numeric, dtype, what):
    got = np.asarray(got)
    assert got.shape == numeric.shape and got.dtype == dtype, f"{what}: {got.shape} {got.dtype}"
    if dtype == np.float32:
        np.testing.assert_allclose(got, numeric, rtol=2e-2, atol=2e-2, err_msg=what)
    else:
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-7, err_msg=what)


def eager_values(model, arrays):
    ins = [eager.tensor(a.copy(), requires_grad=a.dtype.kind == "f") for a in arrays]
    out = tree_leaves(model(EAGER, *ins))
    for k, v in enumerate(out):
        assert eager.is_eager(v), f"eager output {k} is {v!r}, not an eager tensor"
    return [v.numpy() for v in out]


def static_grads(model, arrays, weights, unknown=(), fed_weights=False):
    """{optimize: gradients of sum(w * out) with respect to each float input}, compiled."""
    phs = placeholders(arrays, unknown)
    given = [w for w in weights if w is not None]
    weight_phs = [sg.placeholder(w.shape, dtype=w.dtype, name=f"w{k}") for k, w in enumerate(given)]
    feeds = iter(weight_phs)
    as_weight = (lambda w: next(feeds)) if fed_weights else sg.constant
    loss = weighted_sum(tree_leaves(model(SG, *phs)), weights, sg.sum, as_weight)
    wrt = [p for p in phs if p.dtype.kind == "f"]
    grads = sg.grad(loss, wrt)
    inputs, values = (phs + weight_phs, arrays + given) if fed_weights else (phs, arrays)
    return {opt: sg.compile(grads, inputs=inputs, optimize=opt)(*values) for opt in (True, False)}


def reference_grads(model, arrays, weights):
    """Central differences of the numpy reference's sum(w * out), per float input (in float64)."""
    wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]

    def loss(*a):
        return weighted_sum([np.asarray(v) for v in tree_leaves(model(NP, *a))], weights, np.sum, np.asarray)

    return {k: numerical_grad(loss, wide, k, 1e-6).astype(a.dtype) for k, a in enumerate(arrays)
            if a.dtype.kind == "f"}


def eager_grads(model, arrays, weights):
    ins = [eager.tensor(a.copy(), requires_grad=a.dtype.kind == "f") for a in arrays]
    loss = weighted_sum(tree_leaves(model(EAGER, *ins)), weights, sg.sum, sg.constant)
    return [g.numpy() for g in eager.grad(loss, [x for x in ins if x.dtype.kind == "f"])]


def torch_grads(model, arrays, weights):
    import torch
    tm = torch_namespace()
    ins = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    loss = weighted_sum(tree_leaves(model(tm, *ins)), weights, torch.sum, torch.as_tensor)
    wrt = [x for x in ins if x.requires_grad]
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return [np.zeros(w.shape, a.dtype) if g is None else g.detach().numpy()
            for g, w, a in zip(grads, wrt, [a for a in arrays if a.dtype.kind == "f"])]


def check_hvp(model, *arrays, unknown=(), seed=2):
    """Hessian-vector products of sum(w * out) (weights and directions fed) compiled with and without
    the passes, against torch's double backward (skipped without torch)."""
    arrays = [np.asarray(a) for a in arrays]
    ref = [np.asarray(v) for v in tree_leaves(model(NP, *arrays))]
    weights = [w for w in weights_for(ref, seed) if w is not None]
    rng = np.random.default_rng(seed)
    float_in = [a for a in arrays if a.dtype.kind == "f"]
    dirs = [rng.uniform(-1, 1, a.shape).astype(a.dtype) for a in float_in]
    phs = placeholders(arrays, unknown)
    w_phs = [sg.placeholder(w.shape, dtype=w.dtype, name=f"w{k}") for k, w in enumerate(weights)]
    d_phs = [sg.placeholder(p.shape, dtype=p.dtype, name=f"d{k}") for k, p in enumerate(phs) if p.dtype.kind == "f"]
    feeds = iter(w_phs)
    outs = tree_leaves(model(SG, *phs))
    loss = weighted_sum(outs, weights_for(ref, seed), sg.sum, lambda w: next(feeds))
    wrt = [p for p in phs if p.dtype.kind == "f"]
    grads = sg.grad(loss, wrt)
    z = None
    for g, d in zip(grads, d_phs):
        z = sg.sum(g * d) if z is None else z + sg.sum(g * d)
    hvp = sg.grad(z, wrt)
    got = {opt: sg.compile(hvp, inputs=phs + w_phs + d_phs, optimize=opt)(*arrays, *weights, *dirs)
           for opt in (True, False)}
    for k, (a, b) in enumerate(zip(got[True], got[False])):
        assert_same(a, b, f"Hessian-vector product {k}: optimize=True against optimize=False")
    if HAS_TORCH:
        for k, (a, t) in enumerate(zip(got[True], torch_hvp(model, arrays, weights_for(ref, seed), dirs))):
            assert_same(a, t, f"Hessian-vector product {k}: compiled against torch")


def torch_hvp(model, arrays, weights, dirs):
    import torch
    ins = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    loss = weighted_sum(tree_leaves(model(torch_namespace(), *ins)), weights, torch.sum, torch.as_tensor)
    wrt = [x for x in ins if x.requires_grad]
    grads = torch.autograd.grad(loss, wrt, create_graph=True, allow_unused=True)
    z = sum(torch.sum(g * torch.as_tensor(d)) for g, d in zip(grads, dirs) if g is not None)
    if not isinstance(z, torch.Tensor) or not z.requires_grad:
        return [np.zeros(w.shape, np.float64) for w in wrt]
    hvp = torch.autograd.grad(z, wrt, allow_unused=True)
    return [np.zeros(tuple(w.shape), a.dtype) if h is None else h.detach().numpy()
            for h, w, a in zip(hvp, wrt, [a for a in arrays if a.dtype.kind == "f"])]
