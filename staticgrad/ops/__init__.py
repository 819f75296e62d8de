"""The op registry and the public op functions. Importing this attaches operators to Tensor."""
from . import methods
from .elementwise import (abs, add, cast, clip, cos, div, equal, exp, expm1, greater, greater_equal, less,
                          less_equal, log, log1p, logical_and, logical_or, maximum, minimum, mul, neg,
                          not_equal, pow, power, relu, sigmoid, sign, sin, softplus, sqrt, square,
                          stop_gradient, sub, tanh, where)
from .linalg import matmul
from .nn import log_softmax, one_hot, softmax, softmax_cross_entropy, softmax_cross_entropy_grad
from .reduce import (broadcast_like, broadcast_to, expand_dims, logsumexp, max, mean, min, size, squeeze, sum,
                     sum_like)
from .registry import (COMMUTATIVE, ELEMENTWISE, NONDIFF, REGISTRY, SHAPE_REF, VIEW, OpDef, apply, as_tensor,
                       coerce, defop)
from .shape import concatenate, getitem, getitem_grad, reshape, reshape_like, split, stack, transpose, zeros_like

methods.attach()

__all__ = [
    "abs", "add", "cast", "clip", "cos", "div", "equal", "exp", "expm1", "greater", "greater_equal", "less",
    "less_equal", "log", "log1p", "logical_and", "logical_or", "maximum", "minimum", "mul", "neg", "not_equal",
    "pow", "power", "relu", "sigmoid", "sign", "sin", "softplus", "sqrt", "square", "stop_gradient", "sub",
    "tanh", "where", "matmul", "log_softmax", "softmax", "softmax_cross_entropy", "broadcast_to", "expand_dims",
    "logsumexp", "max", "mean", "min", "squeeze", "sum", "COMMUTATIVE", "ELEMENTWISE", "NONDIFF", "REGISTRY",
    "SHAPE_REF", "VIEW", "OpDef", "apply", "as_tensor", "coerce", "defop", "concatenate", "getitem", "reshape",
    "stack", "transpose", "zeros_like",
    "one_hot", "softmax_cross_entropy_grad", "broadcast_like", "size", "sum_like", "getitem_grad", "reshape_like",
    "split",
]
