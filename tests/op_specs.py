"""One spec per op variant: how to build it, what to feed it, and what numpy says it computes.

tests/test_ops.py drives every check (forward value, static shape/dtype, first and second order
gradients, float32, dynamic batch) from OP_SPECS; tests/test_ops_torch.py compares with torch.
Inputs are sampled away from kinks (abs, relu, ties of max/maximum, clip bounds, integer steps) so that
central finite differences are valid, and shapes are small because finite differences cost O(size).
"""
from __future__ import annotations

import importlib
import pkgutil
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import staticgrad as sg
from staticgrad.ops import (
    broadcast_to,
    cast,
    equal,
    expand_dims,
    greater,
    greater_equal,
    less,
    less_equal,
    logical_and,
    logical_or,
    not_equal,
    sign,
    squeeze,
)
from staticgrad.ops.index import normalize_index
from staticgrad.ops.registry import apply
from tests import specs as specs_package


@dataclass(frozen=True)
class OpSpec:
    op: str                        # the REGISTRY name this spec covers
    build: Callable                # staticgrad tensors -> tensor
    sample: Callable               # rng -> list of numpy inputs (float64, or int/bool data)
    ref: Callable | None = None    # numpy inputs -> expected value; None: ``build`` itself works on numpy
    tag: str = ""                  # which variant (shapes, axis, ...) this is
    grad: bool = True              # differentiable: gradients must match finite differences
    order: int = 2                 # highest derivative order checked
    tol: dict = field(default_factory=dict)   # check_grads overrides for ops computed in lower precision
    keeps_float: bool = True       # float32 inputs give a float32 result
    dynamic: bool = True           # the build still works when every batch (first) dim is None
    torch: Callable | None = None  # (torch, *tensors) -> tensor, the same computation in torch

    @property
    def id(self) -> str:
        return f"{self.op}-{self.tag}" if self.tag else self.op

    def reference(self, *arrays):
        return (self.ref or self.build)(*arrays)

    def draw(self):
        """The spec's inputs from a generator seeded by its id: every run (and every test) sees the same."""
        return self.sample(np.random.default_rng(zlib.crc32(self.id.encode())))


# ------------------------------------------------------------------ samplers: rng -> array
def normal(*shape):
    return lambda rng: rng.standard_normal(shape)


def uniform(lo, hi, *shape):
    return lambda rng: rng.uniform(lo, hi, shape)


def nonzero(*shape, gap=0.2):
    """Values with |x| >= gap: safe for abs, relu, sign (kinks at 0)."""
    return lambda rng: rng.choice([-1.0, 1.0], size=shape) * rng.uniform(gap, 1.5, shape)


def distinct(*shape):
    """All values at least 0.25 apart: max/min have no ties to split."""
    def draw(rng):
        n = int(np.prod(shape, dtype=np.int64))
        return ((rng.permutation(n) - n / 2) * 0.25 + rng.uniform(-0.05, 0.05, n)).reshape(shape)
    return draw


def ints(lo, hi, *shape):
    return lambda rng: rng.integers(lo, hi, shape)


def bools(*shape):
    return lambda rng: rng.random(shape) < 0.5


def avoiding(*shape, points=(0.0,), gap=0.1):
    """Normal values at least ``gap`` away from each of ``points`` (kinks such as clip bounds)."""
    def draw(rng):
        x = rng.standard_normal(shape)
        for _ in range(100):
            near = np.zeros(shape, bool)
            for p in points:
                near |= np.abs(x - p) < gap
            if not near.any():
                return x
            x = np.where(near, rng.standard_normal(shape), x)
        raise RuntimeError("could not sample away from the kinks")
    return draw


def inputs(*samplers):
    return lambda rng: [s(rng) for s in samplers]


def apart(x_shape, y_shape):
    """A pair (x, y) with |x - y| >= 0.2 everywhere after broadcasting (no ties for maximum/minimum)."""
    def draw(rng):
        x = rng.standard_normal(x_shape)
        y = rng.standard_normal(y_shape)
        full = np.broadcast_shapes(x_shape, y_shape)
        for _ in range(100):
            gap = np.abs(np.broadcast_to(x, full) - np.broadcast_to(y, full))
            if gap.min() >= 0.2:
                return [x, y]
            y = rng.standard_normal(y_shape)
        raise RuntimeError("could not sample a tie-free pair")
    return draw


def ties(*shape):
    """A pair with some equal entries, for the equality comparisons."""
    def draw(rng):
        x = np.round(rng.standard_normal(shape), 1)
        y = np.where(rng.random(shape) < 0.5, x, np.round(rng.standard_normal(shape), 1))
        return [x, y]
    return draw


def scatter_ref(g, index, shape):
    out = np.zeros(shape)
    np.add.at(out, index, g)
    return out


SPECS: list[OpSpec] = []


def spec(op, build, sample, ref=None, **kw):
    SPECS.append(OpSpec(op, build, sample, ref, **kw))


# ------------------------------------------------------------------ binary arithmetic, with broadcasting
BINARY = [
    ("add", sg.add, np.add, lambda T, x, y: x + y),
    ("sub", sg.sub, np.subtract, lambda T, x, y: x - y),
    ("mul", sg.mul, np.multiply, lambda T, x, y: x * y),
    ("div", sg.div, np.divide, lambda T, x, y: x / y),
    ("pow", sg.pow, np.power, lambda T, x, y: T.pow(x, y)),
    ("maximum", sg.maximum, np.maximum, lambda T, x, y: T.maximum(x, y)),
    ("minimum", sg.minimum, np.minimum, lambda T, x, y: T.minimum(x, y)),
    ("arctan2", sg.arctan2, np.arctan2, lambda T, y, x: T.atan2(y, x)),
    ("hypot", sg.hypot, np.hypot, lambda T, x, y: T.hypot(x, y)),
]
SHAPE_PAIRS = [("same", (2, 3), (2, 3)), ("col-row", (3, 1), (4,)), ("scalar-matrix", (), (2, 3)),
               ("matrix-scalar", (2, 3), ()), ("0d", (), ())]
for _name, _fn, _np, _torch in BINARY:
    for _tag, _xs, _ys in SHAPE_PAIRS:
        if _name in ("maximum", "minimum"):
            _sample = apart(_xs, _ys)
        elif _name == "pow":
            _sample = inputs(uniform(0.5, 2.0, *_xs), normal(*_ys))
        elif _name == "div":
            _sample = inputs(normal(*_xs), nonzero(*_ys, gap=0.5))
        else:
            _sample = inputs(normal(*_xs), normal(*_ys))
        spec(_name, _fn, _sample, _np, tag=_tag, torch=_torch)

# Operators and Python scalars on either side (the scalar adopts the tensor's dtype).
spec("add", lambda x: x + 2.0, inputs(normal(2, 3)), tag="tensor+scalar", torch=lambda T, x: x + 2.0)
spec("add", lambda x: 1 + x, inputs(normal(3)), tag="int+tensor", torch=lambda T, x: 1 + x)
spec("sub", lambda x: 2.0 - x, inputs(normal(2, 3)), tag="scalar-tensor", torch=lambda T, x: 2.0 - x)
spec("mul", lambda x: x * x, inputs(normal(2, 3)), tag="x*x", torch=lambda T, x: x * x)
spec("mul", lambda x: 3 * x, inputs(normal(2, 3)), tag="int*tensor", torch=lambda T, x: 3 * x)
spec("div", lambda x: 1.5 / x, inputs(nonzero(2, 3, gap=0.5)), tag="scalar/tensor", torch=lambda T, x: 1.5 / x)
spec("div", lambda x, y: x / y, inputs(normal(2, 2, 3), nonzero(3, gap=0.5)), tag="operator-broadcast",
     torch=lambda T, x, y: x / y)
spec("pow", lambda x: x ** 3, inputs(normal(2, 3)), tag="int-exponent", torch=lambda T, x: x ** 3)
spec("pow", lambda x: x ** 2.5, inputs(uniform(0.5, 2.0, 2, 3)), tag="float-exponent",
     torch=lambda T, x: x ** 2.5)
spec("pow", lambda x: 2.0 ** x, inputs(normal(2, 3)), tag="scalar**tensor", torch=lambda T, x: 2.0 ** x)
spec("pow", lambda x: x ** -1, inputs(uniform(0.5, 2.0, 3)), tag="negative-exponent",
     torch=lambda T, x: x ** -1)
spec("maximum", lambda x: sg.maximum(x, 0.0), inputs(nonzero(2, 3)), lambda x: np.maximum(x, 0.0),
     tag="with-scalar", torch=lambda T, x: T.clamp(x, min=0.0))
spec("minimum", lambda x: sg.minimum(1.0, x), inputs(uniform(-1.0, 0.8, 2, 3)),
     lambda x: np.minimum(1.0, x), tag="scalar-first", torch=lambda T, x: T.clamp(x, max=1.0))
spec("neg", sg.neg, inputs(normal(2, 3)), np.negative, torch=lambda T, x: -x)
spec("neg", lambda x: -x, inputs(normal()), np.negative, tag="0d-operator", torch=lambda T, x: -x)

# ------------------------------------------------------------------ unary math
UNARY = [
    ("exp", sg.exp, np.exp, normal, "exp"),
    ("log", sg.log, np.log, lambda *s: uniform(0.3, 3.0, *s), "log"),
    ("log1p", sg.log1p, np.log1p, lambda *s: uniform(-0.5, 2.0, *s), "log1p"),
    ("expm1", sg.expm1, np.expm1, normal, "expm1"),
    ("sqrt", sg.sqrt, np.sqrt, lambda *s: uniform(0.3, 3.0, *s), "sqrt"),
    ("sin", sg.sin, np.sin, normal, "sin"),
    ("cos", sg.cos, np.cos, normal, "cos"),
    ("tanh", sg.tanh, np.tanh, normal, "tanh"),
    ("sigmoid", sg.sigmoid, lambda x: 1 / (1 + np.exp(-x)), normal, "sigmoid"),
    ("relu", sg.relu, lambda x: np.maximum(x, 0), nonzero, "relu"),
    ("abs", sg.abs, np.abs, nonzero, "abs"),
    ("square", sg.square, np.square, normal, "square"),
    ("softplus", sg.softplus, lambda x: np.log1p(np.exp(x)), normal, "nn.functional.softplus"),
    ("tan", sg.tan, np.tan, lambda *s: uniform(-1.2, 1.2, *s), "tan"),
    ("arcsin", sg.arcsin, np.arcsin, lambda *s: uniform(-0.9, 0.9, *s), "asin"),
    ("arccos", sg.arccos, np.arccos, lambda *s: uniform(-0.9, 0.9, *s), "acos"),
    ("arctan", sg.arctan, np.arctan, normal, "atan"),
    ("sinh", sg.sinh, np.sinh, normal, "sinh"),
    ("cosh", sg.cosh, np.cosh, normal, "cosh"),
    ("arcsinh", sg.arcsinh, np.arcsinh, normal, "asinh"),
    ("arccosh", sg.arccosh, np.arccosh, lambda *s: uniform(1.2, 3.0, *s), "acosh"),
    ("arctanh", sg.arctanh, np.arctanh, lambda *s: uniform(-0.9, 0.9, *s), "atanh"),
    ("exp2", sg.exp2, np.exp2, normal, "exp2"),
    ("log2", sg.log2, np.log2, lambda *s: uniform(0.3, 3.0, *s), "log2"),
    ("log10", sg.log10, np.log10, lambda *s: uniform(0.3, 3.0, *s), "log10"),
    ("reciprocal", sg.reciprocal, np.reciprocal, lambda *s: nonzero(*s, gap=0.5), "reciprocal"),
]


def _torch_fn(path):
    def run(T, x):
        obj = T
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj(x)
    return run


for _name, _fn, _np, _draw, _tpath in UNARY:
    spec(_name, _fn, inputs(_draw(2, 3)), _np, torch=_torch_fn(_tpath))
    spec(_name, _fn, inputs(_draw()), _np, tag="0d", torch=_torch_fn(_tpath))

spec("abs", abs, inputs(nonzero(4)), np.abs, tag="builtin-abs", torch=lambda T, x: abs(x))
spec("sigmoid", sg.sigmoid, inputs(lambda rng: np.array([-40.0, -12.0, 0.5, 12.0, 40.0])),
     lambda x: 1 / (1 + np.exp(-x)), tag="tails", torch=lambda T, x: T.sigmoid(x))
spec("softplus", sg.softplus, inputs(lambda rng: np.array([-40.0, -12.0, 0.5, 12.0, 40.0])),
     lambda x: np.logaddexp(0, x), tag="tails", torch=lambda T, x: T.nn.functional.softplus(x))
spec("sign", sign, inputs(nonzero(2, 3)), np.sign)     # differentiable a.e.: zero gradient

# ------------------------------------------------------------------ selection
spec("where", sg.where, inputs(bools(2, 3), normal(2, 3), normal(2, 3)), np.where,
     torch=lambda T, c, x, y: T.where(c, x, y))
spec("where", sg.where, inputs(bools(3, 1), normal(4), normal(3, 4)), np.where, tag="broadcast",
     torch=lambda T, c, x, y: T.where(c, x, y))
spec("where", lambda c, x: sg.where(c, x, 0.0), inputs(bools(2, 3), normal(2, 3)),
     lambda c, x: np.where(c, x, 0.0), tag="scalar-branch", torch=lambda T, c, x: T.where(c, x, 0.0))
spec("where", lambda x: sg.where(x > 0, x, 0.1 * x), inputs(nonzero(2, 3)),
     lambda x: np.where(x > 0, x, 0.1 * x), tag="leaky", torch=lambda T, x: T.where(x > 0, x, 0.1 * x))
spec("clip", lambda x: sg.clip(x, -0.5, 0.5), inputs(avoiding(2, 3, points=(-0.5, 0.5))),
     lambda x: np.clip(x, -0.5, 0.5), tag="scalar-bounds", torch=lambda T, x: T.clamp(x, -0.5, 0.5))
spec("clip", lambda x: sg.clip(x, None, 0.5), inputs(avoiding(2, 3, points=(0.5,))),
     lambda x: np.clip(x, None, 0.5), tag="no-lower-bound", torch=lambda T, x: T.clamp(x, max=0.5))
spec("clip", lambda x: sg.clip(x, -0.5, None), inputs(avoiding(2, 3, points=(-0.5,))),
     lambda x: np.clip(x, -0.5, None), tag="no-upper-bound", torch=lambda T, x: T.clamp(x, min=-0.5))
spec("clip", sg.clip,
     inputs(lambda rng: np.array([[-2.0, -0.7, 0.1], [0.45, 1.2, 3.0]]), lambda rng: np.array([-1.0, -0.3, 0.0]),
            lambda rng: np.array([1.0])),
     np.clip, tag="tensor-bounds", torch=lambda T, x, lo, hi: T.clamp(x, lo, hi))

# ------------------------------------------------------------------ comparisons and logic (no gradient)
for _name, _fn, _np in [("less", less, np.less), ("less_equal", less_equal, np.less_equal),
                        ("greater", greater, np.greater), ("greater_equal", greater_equal, np.greater_equal),
                        ("equal", equal, np.equal), ("not_equal", not_equal, np.not_equal)]:
    spec(_name, _fn, ties(2, 3), _np, grad=False, keeps_float=False)
    spec(_name, _fn, inputs(normal(3, 1), normal(4)), _np, tag="broadcast", grad=False, keeps_float=False)
spec("less", lambda x, y: x < y, ties(2, 3), tag="operator", grad=False, keeps_float=False)
spec("less_equal", lambda x, y: x <= y, ties(2, 3), tag="operator", grad=False, keeps_float=False)
spec("greater", lambda x: x > 0.5, inputs(normal(2, 3)), tag="scalar", grad=False, keeps_float=False)
spec("greater_equal", lambda x, y: x >= y, ties(2, 3), tag="operator", grad=False, keeps_float=False)
spec("logical_and", logical_and, inputs(bools(2, 3), bools(3)), np.logical_and, grad=False, keeps_float=False)
spec("logical_or", logical_or, inputs(bools(2, 3), bools(3)), np.logical_or, grad=False, keeps_float=False)
spec("logical_and", logical_and, inputs(bools(2, 3), bools(2, 3)), np.logical_and, tag="same-shape", grad=False,
     keeps_float=False)
spec("logical_or", logical_or, inputs(bools(3), bools(3)), np.logical_or, tag="same-shape", grad=False,
     keeps_float=False)
spec("stop_gradient", sg.stop_gradient, inputs(normal(2, 3)), lambda x: x, grad=False)

# ------------------------------------------------------------------ dtype conversion
spec("cast", lambda x: cast(x, np.float32), inputs(normal(2, 3)), lambda x: x.astype(np.float32),
     tag="to-float32", tol=dict(eps=1e-2, rtol=1e-4, atol=1e-4), keeps_float=False,
     torch=lambda T, x: x.to(T.float32))
spec("cast", lambda x, n: x * cast(n, np.float64), inputs(normal(2, 3), ints(-3, 4, 2, 3)),
     lambda x, n: x * n.astype(np.float64), tag="int-to-float", keeps_float=False)
spec("cast", lambda x: cast(x > 0.0, np.float64) * x, inputs(nonzero(2, 3)), lambda x: (x > 0) * x, tag="bool-to-float",
     keeps_float=False,
     torch=lambda T, x: (x > 0).to(T.float64) * x)
spec("cast", lambda x: x.astype(np.int64) * 1.5, inputs(lambda rng: rng.integers(-3, 3, (2, 3)) + 0.5
                                                        + rng.uniform(-0.3, 0.3, (2, 3))),
     lambda x: x.astype(np.int64) * 1.5, tag="to-int-stops-gradient", keeps_float=False)

# ------------------------------------------------------------------ reductions
for _name, _np, _draw, _tname in [("sum", np.sum, normal, "sum"), ("mean", np.mean, normal, "mean"),
                                  ("max", np.max, distinct, "amax"), ("min", np.min, distinct, "amin")]:
    _fn = getattr(sg, _name)
    for _shape, _axis, _keep in [((2, 3), None, False), ((2, 3), 0, False), ((2, 3), -1, True),
                                 ((2, 3, 2), (0, 2), False), ((2, 3, 2), (-1, 1), True), ((), None, False),
                                 ((4,), 0, True)]:
        _tag = f"{len(_shape)}d-axis={_axis}-keepdims={_keep}"
        spec(_name, (lambda f, a, k: lambda x: f(x, axis=a, keepdims=k))(_fn, _axis, _keep), inputs(_draw(*_shape)),
             (lambda f, a, k: lambda x: f(x, axis=a, keepdims=k))(_np, _axis, _keep), tag=_tag,
             torch=(lambda t, a, k: lambda T, x: getattr(T, t)(x, dim=tuple(range(x.dim())) if a is None else a,
                                                               keepdim=k))(_tname, _axis, _keep))
spec("sum", lambda x: x.sum(axis=1), inputs(normal(2, 3)), tag="method", torch=lambda T, x: x.sum(dim=1))
spec("argmax", lambda x: sg.argmax(x, axis=1), inputs(distinct(3, 4)), lambda x: np.argmax(x, axis=1), grad=False,
     keeps_float=False)
spec("argmin", sg.argmin, inputs(distinct(3, 4)), np.argmin, grad=False, keeps_float=False, dynamic=False)
spec("mean", lambda x: x.mean(), inputs(normal(2, 3)), tag="method", torch=lambda T, x: x.mean())
spec("max", lambda x: x.max(axis=0), inputs(distinct(3, 2)), tag="method", torch=lambda T, x: x.amax(dim=0))
spec("min", lambda x: x.min(axis=-1, keepdims=True), inputs(distinct(3, 2)), tag="method",
     torch=lambda T, x: x.amin(dim=-1, keepdim=True))
for _shape, _axis, _keep in [((2, 3), None, False), ((2, 3), -1, False), ((2, 3), 0, True),
                             ((2, 3, 2), (0, 2), True), ((), None, False)]:
    spec("logsumexp", (lambda a, k: lambda x: sg.logsumexp(x, axis=a, keepdims=k))(_axis, _keep),
         inputs(normal(*_shape)),
         (lambda a, k: lambda x: np.log(np.sum(np.exp(x), axis=a, keepdims=k)))(_axis, _keep),
         tag=f"{len(_shape)}d-axis={_axis}-keepdims={_keep}",
         torch=(lambda a, k: lambda T, x: T.logsumexp(x, dim=tuple(range(x.dim())) if a is None else a,
                                                      keepdim=k))(_axis, _keep))
spec("logsumexp", lambda x: sg.logsumexp(x, axis=-1), inputs(lambda rng: np.array([[800.0, 801.0], [-900.0, -901.0]])),
     lambda x: np.array([801 + np.log1p(np.exp(-1.0)), -900 + np.log1p(np.exp(-1.0))]), tag="no-overflow",
     order=1, torch=lambda T, x: T.logsumexp(x, dim=-1))

# ------------------------------------------------------------------ matmul
for _tag, _as, _bs in [("2d@2d", (2, 3), (3, 4)), ("1d@2d", (3,), (3, 2)), ("2d@1d", (2, 3), (3,)),
                       ("1d@1d", (3,), (3,)), ("batched@2d", (2, 2, 3), (3, 2)),
                       ("batched@batched", (2, 2, 3), (2, 3, 2)), ("broadcast-batch", (2, 1, 2, 3), (3, 3, 2)),
                       ("1d@batched", (3,), (2, 3, 2)), ("batched@1d", (2, 2, 3), (3,))]:
    spec("matmul", lambda a, b: a @ b, inputs(normal(*_as), normal(*_bs)), np.matmul, tag=_tag,
         torch=lambda T, a, b: a @ b)
spec("matmul", sg.matmul, inputs(normal(2, 3), normal(3, 2)), np.matmul, tag="function",
     torch=lambda T, a, b: T.matmul(a, b))
_A = np.arange(6.0).reshape(2, 3) / 4
spec("matmul", lambda b: _A @ b, inputs(normal(3, 2)), tag="ndarray@tensor", keeps_float=False,
     torch=lambda T, b: T.as_tensor(_A) @ b)

# ------------------------------------------------------------------ shape ops
spec("reshape", lambda x: sg.reshape(x, (3, 2)), inputs(normal(2, 3)), lambda x: x.reshape(3, 2),
     torch=lambda T, x: x.reshape(3, 2))
spec("reshape", lambda x: x.reshape(-1), inputs(normal(2, 3)), tag="flatten", torch=lambda T, x: x.reshape(-1))
spec("reshape", lambda x: x.reshape(3, -1, 2), inputs(normal(2, 3, 2)), tag="infer-dim",
     torch=lambda T, x: x.reshape(3, -1, 2))
spec("reshape", lambda x: x.reshape(1, 1), inputs(normal()), tag="0d-to-2d", torch=lambda T, x: x.reshape(1, 1))
spec("reshape", lambda x: x.reshape(()), inputs(normal(1, 1)), tag="to-0d", torch=lambda T, x: x.reshape(()))
spec("transpose", sg.transpose, inputs(normal(2, 3)), np.transpose, torch=lambda T, x: x.T)
spec("transpose", lambda x: sg.transpose(x, (1, 0, 2)), inputs(normal(2, 3, 2)),
     lambda x: np.transpose(x, (1, 0, 2)), tag="axes", torch=lambda T, x: x.permute(1, 0, 2))
spec("transpose", lambda x: x.transpose(2, 0, 1), inputs(normal(2, 3, 2)), tag="method",
     torch=lambda T, x: x.permute(2, 0, 1))
spec("transpose", lambda x: x.transpose((-1, 0, 1)), inputs(normal(2, 3, 2)), tag="negative-axes",
     torch=lambda T, x: x.permute(-1, 0, 1))
spec("transpose", lambda x: x.T, inputs(normal(3, 2)), tag=".T", torch=lambda T, x: x.T)
spec("transpose", sg.transpose, inputs(normal(3)), np.transpose, tag="1d", torch=lambda T, x: x)
spec("concatenate", lambda x, y: sg.concatenate([x, y]), inputs(normal(2, 3), normal(1, 3)),
     lambda x, y: np.concatenate([x, y]), tag="axis=0", torch=lambda T, x, y: T.cat([x, y]))
spec("concatenate", lambda x, y, z: sg.concatenate([x, y, z], axis=-1),
     inputs(normal(2, 1), normal(2, 3), normal(2, 2)),
     lambda x, y, z: np.concatenate([x, y, z], axis=-1), tag="axis=-1-three",
     torch=lambda T, x, y, z: T.cat([x, y, z], dim=-1))
spec("concatenate", lambda x: sg.concatenate([x, x * 2.0]), inputs(normal(3)),
     lambda x: np.concatenate([x, x * 2.0]), tag="same-input", torch=lambda T, x: T.cat([x, x * 2.0]))
spec("stack", lambda x, y: sg.stack([x, y]), inputs(normal(2, 3), normal(2, 3)), lambda x, y: np.stack([x, y]),
     tag="axis=0", torch=lambda T, x, y: T.stack([x, y]))
spec("stack", lambda x, y, z: sg.stack([x, y, z], axis=-1), inputs(normal(2), normal(2), normal(2)),
     lambda x, y, z: np.stack([x, y, z], axis=-1), tag="axis=-1-three", torch=lambda T, x, y, z: T.stack([x, y, z], -1))
spec("stack", lambda x, y: sg.stack([x, y]), inputs(normal(), normal()), lambda x, y: np.stack([x, y]),
     tag="0d", torch=lambda T, x, y: T.stack([x, y]))

# ------------------------------------------------------------------ indexing
_REPEAT = np.array([2, 0, 2, 2])
_MASK = np.array([True, False, True])
INDEX_CASES = [
    ("int", (3, 4), lambda x: x[1], lambda x: x[1]),
    ("negative-int", (3, 4), lambda x: x[-1, -2], lambda x: x[-1, -2]),
    ("slices", (3, 4), lambda x: x[1:, ::2], lambda x: x[1:, ::2]),
    ("negative-step", (3, 4), lambda x: x[::-1, 1:3], lambda x: x.flip(0)[:, 1:3]),
    ("none", (3, 4), lambda x: x[None, :, None, 1], lambda x: x[None, :, None, 1]),
    ("ellipsis", (2, 3, 2), lambda x: x[..., 1], lambda x: x[..., 1]),
    ("ellipsis-middle", (2, 3, 2), lambda x: x[0, ..., None], lambda x: x[0, ..., None]),
    ("int-array-repeats", (3, 2), lambda x: x[_REPEAT], None),
    ("list-repeats", (3, 2), lambda x: x[[1, 1, 0]], lambda x: x[[1, 1, 0]]),
    ("int-arrays-2d", (3, 4), lambda x: x[_REPEAT, np.array([0, 1, 0, 3])], None),
    ("array-and-slice", (3, 4), lambda x: x[1:, _REPEAT[:2]], None),
    ("bool-mask", (3, 2), lambda x: x[_MASK], None),
    ("bool-mask-last", (2, 3), lambda x: x[:, _MASK], None),
    ("full-bool-mask", (2, 3), lambda x: x[np.array([[True, False, True], [False, True, True]])], None),
    ("0d-result", (3,), lambda x: x[2], lambda x: x[2]),
]
for _tag, _shape, _build, _torch in INDEX_CASES:
    spec("getitem", _build, inputs(normal(*_shape)), tag=_tag,
         torch=(lambda t: None if t is None else (lambda T, x: t(x)))(_torch))

# ------------------------------------------------------------------ internal ops (what gradients are made of)
_IDX = normalize_index((slice(1, None), np.array([0, 0, 2])))
spec("getitem_grad", lambda g: apply("getitem_grad", (g,), {"index": _IDX, "shape": (3, 4)}),
     inputs(normal(2, 3)), lambda g: scatter_ref(g, _IDX, (3, 4)), tag="static-shape")
spec("getitem_grad", lambda g, x: apply("getitem_grad", (g, x), {"index": _IDX, "shape": None}),
     inputs(normal(2, 3), normal(3, 4)), lambda g, x: scatter_ref(g, _IDX, x.shape), tag="shape-of-ref")
_BASIC = normalize_index((slice(None), 1))
spec("getitem_grad", lambda g: apply("getitem_grad", (g,), {"index": _BASIC, "shape": (2, 3)}),
     inputs(normal(2)), lambda g: scatter_ref(g, _BASIC, (2, 3)), tag="basic-index")
spec("broadcast_to", lambda x: broadcast_to(x, (2, 3)), inputs(normal(3)), lambda x: np.broadcast_to(x, (2, 3)),
     torch=lambda T, x: x.expand(2, 3))
spec("broadcast_to", lambda x: broadcast_to(x, (2, 3, 4)), inputs(normal(3, 1)),
     lambda x: np.broadcast_to(x, (2, 3, 4)), tag="new-and-stretched-axes", torch=lambda T, x: x.expand(2, 3, 4))
spec("broadcast_to", lambda x: broadcast_to(x, (2, 2)), inputs(normal()), lambda x: np.broadcast_to(x, (2, 2)),
     tag="0d", torch=lambda T, x: x.expand(2, 2))
spec("broadcast_like", lambda x, r: apply("broadcast_like", (x, r)), inputs(normal(3, 1), normal(3, 4)),
     lambda x, r: np.broadcast_to(x, r.shape))
spec("broadcast_like", lambda x, r: apply("broadcast_like", (x, r)), inputs(normal(4), normal(2, 3, 4)),
     lambda x, r: np.broadcast_to(x, r.shape), tag="new-axes")
spec("expand_dims", lambda x: expand_dims(x, 0), inputs(normal(2, 3)), lambda x: np.expand_dims(x, 0),
     torch=lambda T, x: x.unsqueeze(0))
spec("expand_dims", lambda x: expand_dims(x, (0, 2)), inputs(normal(3)), lambda x: np.expand_dims(x, (0, 2)),
     tag="two-axes")
spec("expand_dims", lambda x: expand_dims(x, -1), inputs(normal(2, 3)), lambda x: np.expand_dims(x, -1),
     tag="negative-axis", torch=lambda T, x: x.unsqueeze(-1))
spec("expand_dims", lambda x: expand_dims(x, 0), inputs(normal()), lambda x: np.expand_dims(x, 0), tag="0d")
spec("squeeze", lambda x: squeeze(x, 1), inputs(normal(2, 1, 3)), lambda x: np.squeeze(x, 1),
     torch=lambda T, x: x.squeeze(1))
spec("squeeze", lambda x: squeeze(x, (0, 2)), inputs(normal(1, 3, 1)), lambda x: np.squeeze(x, (0, 2)),
     tag="two-axes", dynamic=False)
spec("squeeze", lambda x: squeeze(x, -1), inputs(normal(3, 1)), lambda x: np.squeeze(x, -1), tag="negative-axis")
spec("reshape_like", lambda x, r: apply("reshape_like", (x, r)), inputs(normal(6), normal(2, 3)),
     lambda x, r: x.reshape(r.shape))
spec("sum_like", lambda g, r: apply("sum_like", (g, r)), inputs(normal(4, 2, 3), normal(1, 3)),
     lambda g, r: g.sum(axis=0).sum(axis=0, keepdims=True), tag="leading-and-size-1")
spec("sum_like", lambda g, r: apply("sum_like", (g, r)), inputs(normal(2, 3), normal(2, 3)),
     lambda g, r: g, tag="nothing-stretched")
spec("split", lambda g, a, b: apply("split", (g, a, b), {"axis": 0, "part": 1}),
     inputs(normal(5, 2), normal(2, 2), normal(3, 2)), lambda g, a, b: g[2:], tag="part=1")
spec("split", lambda g, a, b: apply("split", (g, a, b), {"axis": 1, "part": 0}),
     inputs(normal(2, 3), normal(2, 1), normal(2, 2)), lambda g, a, b: g[:, :1], tag="axis=1-part=0")
spec("zeros_like", lambda x: apply("zeros_like", (x,), {"dtype": np.dtype(np.float64)}), inputs(normal(2, 3)),
     np.zeros_like, grad=False, keeps_float=False)
spec("size", lambda x: apply("size", (x,), {"axis": (0, 1), "dtype": np.dtype(np.float64)}), inputs(normal(2, 3, 2)),
     lambda x: np.float64(x.shape[0] * x.shape[1]), grad=False, keeps_float=False)
spec("one_hot", lambda t, like: apply("one_hot", (t, like)), inputs(ints(0, 3, 4), normal(4, 3)),
     lambda t, like: np.eye(3)[t], grad=False)

# ------------------------------------------------------------------ normalizers and the fused loss
for _name, _np in [("softmax", lambda x, a: np.exp(x - np.log(np.sum(np.exp(x), axis=a, keepdims=True)))),
                   ("log_softmax", lambda x, a: x - np.log(np.sum(np.exp(x), axis=a, keepdims=True)))]:
    _fn = getattr(sg, _name)
    _tfn = "softmax" if _name == "softmax" else "log_softmax"
    for _shape, _axis in [((2, 3), -1), ((2, 3), 0), ((4,), -1), ((2, 2, 3), 1)]:
        spec(_name, (lambda f, a: lambda x: f(x, axis=a))(_fn, _axis), inputs(normal(*_shape)),
             (lambda f, a: lambda x: f(x, a))(_np, _axis), tag=f"{len(_shape)}d-axis={_axis}",
             torch=(lambda t, a: lambda T, x: getattr(T, t)(x, dim=a))(_tfn, _axis))
spec("softmax", sg.softmax, inputs(lambda rng: np.array([[1000.0, 999.0, -5.0]])),
     lambda x: np.exp(x - 1000 - np.log1p(np.exp(-1.0) + np.exp(-1005.0))), tag="no-overflow", order=1,
     torch=lambda T, x: T.softmax(x, -1))


def _sce_ref(logits, labels):
    lse = np.log(np.sum(np.exp(logits), axis=-1))
    picked = np.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return np.mean(lse - picked)


def _sce_torch(T, logits, labels):
    return T.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


spec("softmax_cross_entropy", sg.softmax_cross_entropy, inputs(normal(4, 3), ints(0, 3, 4)), _sce_ref,
     torch=_sce_torch)
spec("softmax_cross_entropy", sg.softmax_cross_entropy, inputs(normal(2, 2, 3), ints(0, 3, 2, 2)), _sce_ref,
     tag="3d", torch=_sce_torch)
spec("softmax_cross_entropy", sg.softmax_cross_entropy, inputs(normal(3), ints(0, 3)), _sce_ref, tag="1d-logits",
     dynamic=False)


def _sce_grad_ref(z, t):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return (p - np.eye(z.shape[-1])[t]) / t.size


spec("softmax_cross_entropy_grad", lambda z, t: apply("softmax_cross_entropy_grad", (z, t)),
     inputs(normal(4, 3), ints(0, 3, 4)), _sce_grad_ref)
spec("softmax_cross_entropy_grad", lambda z, t: apply("softmax_cross_entropy_grad", (z, t)),
     inputs(normal(2, 2, 3), ints(0, 3, 2, 2)), _sce_grad_ref, tag="3d")



# ------------------------------------------------------------------ loops (more in tests/loops/)
def _rnn(h0, xs, w, reverse=False):
    """A tanh RNN over xs (T, B, 3) from h0 (B, 3): (final state, the stacked squares of every state)."""
    def step(h, x):
        h = sg.tanh(h @ w + x)
        return h, h * h
    return sg.scan(step, h0, xs, reverse=reverse)


def _rnn_ref(h0, xs, w, reverse=False):
    h, ys = h0, [None] * len(xs)
    for t in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        h = np.tanh(h @ w + xs[t])
        ys[t] = h * h
    return h, np.stack(ys)


def _rnn_torch(T, h0, xs, w):
    h, ys = h0, []
    for x in xs:
        h = T.tanh(h @ w + x)
        ys.append(h * h)
    return T.stack(ys).sum(0) + h


RNN_INPUTS = inputs(normal(2, 3), normal(4, 2, 3), lambda rng: 0.5 * rng.standard_normal((3, 3)))
spec("scan", lambda h0, xs, w: _rnn(h0, xs, w)[1].sum(axis=0) + _rnn(h0, xs, w)[0], RNN_INPUTS,
     lambda h0, xs, w: _rnn_ref(h0, xs, w)[1].sum(axis=0) + _rnn_ref(h0, xs, w)[0], torch=_rnn_torch)
spec("scan", lambda h0, xs, w: _rnn(h0, xs, w, reverse=True)[1], RNN_INPUTS,
     lambda h0, xs, w: _rnn_ref(h0, xs, w, reverse=True)[1], tag="reverse")
spec("loop_output", lambda h0, xs, w: _rnn(h0, xs, w)[0], RNN_INPUTS, lambda h0, xs, w: _rnn_ref(h0, xs, w)[0])
spec("same_length", lambda x, y: sg.ops.same_length(x, y), inputs(normal(4, 3), normal(4, 2)), lambda x, y: x,
     torch=lambda T, x, y: x)



def _branchy(p, x, w):
    """sin(x) * w where p > 0, else x * x + sum(w) (both branches read an outer value)."""
    return sg.cond(p > 0, lambda a: sg.sin(a) * w, lambda a: a * a + w.sum(), x)


def _branchy_ref(p, x, w):
    return np.sin(x) * w if p > 0 else x * x + w.sum()


def _branchy_torch(T, p, x, w):
    return T.sin(x) * w if p > 0 else x * x + w.sum()


spec("cond", _branchy, inputs(lambda rng: np.array(0.7), normal(2, 3), normal(3)), _branchy_ref,
     torch=_branchy_torch, tag="true")
spec("cond", _branchy, inputs(lambda rng: np.array(-0.7), normal(2, 3), normal(3)), _branchy_ref,
     torch=_branchy_torch, tag="false")



def _repeat(x, w):
    """Three steps of h = tanh(h * w) + 0.5 from x, counted by an integer state."""
    h, _ = sg.while_loop(lambda s: s[1] < 3, lambda s: (sg.tanh(s[0] * w) + 0.5, s[1] + 1), (x, sg.constant(0)))
    return h


def _repeat_ref(x, w):
    for _ in range(3):
        x = np.tanh(x * w) + 0.5
    return x


def _repeat_torch(T, x, w):
    for _ in range(3):
        x = T.tanh(x * w) + 0.5
    return x


# (second derivatives through a while_loop are refused: its backward pass runs over a tape)
spec("while_loop", _repeat, inputs(normal(2, 3), normal(3)), _repeat_ref, torch=_repeat_torch, order=1)
spec("reverse_tape", _repeat, inputs(normal(3), normal(3)), _repeat_ref, torch=_repeat_torch, order=1)

# The op families of tests/specs/ add theirs (they import the helpers above, which exist by now).
for _module in sorted(pkgutil.iter_modules(specs_package.__path__), key=lambda m: m.name):
    importlib.import_module(f"{specs_package.__name__}.{_module.name}")

OP_SPECS: list[OpSpec] = SPECS
