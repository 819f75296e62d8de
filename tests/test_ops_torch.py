"""Forward values, gradients and Hessian-vector products of every op spec with a torch twin, in float64."""
from __future__ import annotations

import numpy as np
import pytest

import staticgrad as sg
from tests.op_specs import OP_SPECS

torch = pytest.importorskip("torch")

TORCH_SPECS = [s for s in OP_SPECS if s.torch is not None]


def _float(arrays):
    return [k for k, a in enumerate(arrays) if a.dtype.kind == "f"]


def _directions(spec, arrays):
    """Fixed weights for the output (turning it into a scalar) and one direction per float input."""
    rng = np.random.default_rng(7)
    weights = rng.uniform(0.5, 1.5, np.shape(spec.reference(*arrays)))
    return weights, [rng.uniform(-1.0, 1.0, arrays[k].shape) for k in _float(arrays)]


def staticgrad_side(spec, arrays, weights, directions, order):
    phs = [sg.placeholder(a.shape, dtype=a.dtype, name=f"in{k}", requires_grad=a.dtype.kind == "f")
           for k, a in enumerate(arrays)]
    wrt = [phs[k] for k in _float(arrays)]
    y = spec.build(*phs)
    grads = sg.grad(sg.sum(y * sg.constant(weights.astype(y.dtype))), wrt)
    outputs = [y] + grads
    if order >= 2:
        z = sg.sum(sg.stack([sg.sum(g * sg.constant(v)) for g, v in zip(grads, directions)]))
        outputs += sg.grad(z, wrt)
    values = sg.compile(outputs, inputs=phs)(*arrays)
    n = len(wrt)
    return values[0], values[1:1 + n], values[1 + n:]


def torch_side(spec, arrays, weights, directions, order):
    ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    wrt = [ts[k] for k in _float(arrays)]
    y = spec.torch(torch, *ts)
    loss = (y * torch.tensor(weights, dtype=y.dtype)).sum()

    def grads_of(scalar):
        if not scalar.requires_grad:
            return [torch.zeros_like(w) for w in wrt]
        found = torch.autograd.grad(scalar, wrt, create_graph=True, allow_unused=True)
        return [torch.zeros_like(w) if g is None else g for g, w in zip(found, wrt)]

    grads = grads_of(loss)
    hvp = []
    if order >= 2:
        z = sum((g * torch.tensor(v, dtype=g.dtype)).sum() for g, v in zip(grads, directions))
        hvp = grads_of(z)
    def as_np(tensors):
        return [t.detach().numpy(force=True) for t in tensors]   # force: torch's lazy ZeroTensor
    return y.detach().numpy(), as_np(grads), as_np(hvp)


@pytest.mark.parametrize("spec", TORCH_SPECS, ids=lambda s: s.id)
def test_matches_torch(spec):
    arrays = spec.draw()
    weights, directions = _directions(spec, arrays)
    order = min(spec.order, 2) if spec.grad else 1
    ours = staticgrad_side(spec, arrays, weights, directions, order)
    theirs = torch_side(spec, arrays, weights, directions, order)
    low = any(np.asarray(v).dtype == np.float32 for v in (ours[0], theirs[0]))
    tol = dict(rtol=1e-5, atol=1e-6) if low else dict(rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(ours[0], theirs[0], **tol, err_msg="forward")
    assert np.shape(ours[0]) == np.shape(theirs[0])
    for what, mine, ref in (("gradient", ours[1], theirs[1]), ("Hessian-vector product", ours[2], theirs[2])):
        for k, (a, b) in enumerate(zip(mine, ref)):
            np.testing.assert_allclose(a, b, **tol, err_msg=f"{what} of float input {k}")


def test_every_differentiable_public_op_is_compared():
    public = {"add", "sub", "mul", "div", "neg", "pow", "matmul", "exp", "log", "log1p", "expm1", "sqrt", "sin",
              "cos", "tanh", "sigmoid", "relu", "abs", "square", "maximum", "minimum", "where", "clip", "sum", "mean",
              "max", "min", "reshape", "transpose", "concatenate", "stack", "softplus", "softmax", "log_softmax",
              "logsumexp", "softmax_cross_entropy"}
    assert public <= {s.op for s in TORCH_SPECS}
