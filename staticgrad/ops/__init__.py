"""The op registry and the public op functions. Importing this attaches operators to Tensor."""
from . import methods
from .elementwise import (abs, add, cast, clip, cos, div, equal, exp, expm1, greater, greater_equal, less,
                          less_equal, log, log1p, logical_and, logical_or, maximum, minimum, mul, neg,
                          not_equal, pow, power, relu, sigmoid, sign, sin, softplus, sqrt, square,
                          stop_gradient, sub, tanh, where)
from .linalg import matmul
from .nn import log_softmax, softmax, softmax_cross_entropy
from .reduce import broadcast_to, expand_dims, logsumexp, max, mean, min, squeeze, sum
from .registry import (COMMUTATIVE, ELEMENTWISE, NONDIFF, REGISTRY, SHAPE_REF, VIEW, OpDef, apply, as_tensor,
                       coerce, defop)
from .shape import concatenate, getitem, reshape, stack, transpose, zeros_like

methods.attach()

__all__ = [
    "abs", "add", "cast", "clip", "cos", "div", "equal", "exp", "expm1", "greater", "greater_equal", "less",
    "less_equal", "log", "log1p", "logical_and", "logical_or", "maximum", "minimum", "mul", "neg", "not_equal",
    "pow", "power", "relu", "sigmoid", "sign", "sin", "softplus", "sqrt", "square", "stop_gradient", "sub",
    "tanh", "where", "matmul", "log_softmax", "softmax", "softmax_cross_entropy", "broadcast_to", "expand_dims",
    "logsumexp", "max", "mean", "min", "squeeze", "sum", "COMMUTATIVE", "ELEMENTWISE", "NONDIFF", "REGISTRY",
    "SHAPE_REF", "VIEW", "OpDef", "apply", "as_tensor", "coerce", "defop", "concatenate", "getitem", "reshape",
    "stack", "transpose", "zeros_like",
]
