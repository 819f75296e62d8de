"""staticgrad: define-and-run automatic differentiation for numpy.

Describe a computation once over placeholders and parameters, get its gradients as more graph with
``grad``, and ``compile`` forward, backward and parameter updates into one callable.
"""
from . import ops
from .autodiff import grad
from .compiler import compile
from .explain import diff_dot
from .explain import GraphvizNotFound, save_dot, to_dot
from .function import ExecutionError, Function, Report
from .io import LoadError, load, load_parameters, save, save_parameters
from .ops import (abs, add, clip, concatenate, cos, div, equal, exp, expm1, greater, greater_equal, less,
                  less_equal, log, log1p, log_softmax, logsumexp, matmul, max, maximum, mean, min, minimum, mul,
                  neg, not_equal, pow, relu, reshape, sigmoid, sin, softmax, softmax_cross_entropy, softplus, sqrt,
                  square, stack, stop_gradient, sub, sum, tanh, transpose, where)
# The other ops a graph may show: fn.graph's "op" names are these functions' names too (all but "split",
# concatenate's gradient, which would read as numpy.split here: it stays sg.ops.split)
from .ops import (broadcast_like, broadcast_to, cast, expand_dims, getitem, getitem_grad, logical_and, logical_or,
                  one_hot, reshape_like, sign, size, softmax_cross_entropy_grad, squeeze, sum_like, zeros_like)
from .tensor import (FeedError, GradError, ShapeError, StaticgradError, Tensor, constant, name_scope, parameter,
                     placeholder)
from .explain import Trace, trace
from . import data, eager, nn, optim, passes, study

__version__ = "0.1.0"

__all__ = [
    "ops", "Tensor", "placeholder", "parameter", "constant", "name_scope", "grad", "compile", "Function", "Report",
    "StaticgradError", "ShapeError", "FeedError", "GradError", "ExecutionError",
    "add", "sub", "mul", "div", "neg", "pow", "matmul", "exp", "log", "log1p", "expm1", "sqrt", "sin", "cos",
    "tanh", "sigmoid", "relu", "abs", "square", "maximum", "minimum", "where", "clip", "sum", "mean", "max",
    "min", "reshape", "transpose", "concatenate", "stack", "softplus", "softmax", "log_softmax", "logsumexp",
    "softmax_cross_entropy", "stop_gradient",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal",
    "broadcast_like", "broadcast_to", "cast", "expand_dims", "getitem", "getitem_grad", "logical_and",
    "logical_or", "one_hot", "reshape_like", "sign", "size", "softmax_cross_entropy_grad", "squeeze",
    "sum_like", "zeros_like",
    "save", "load", "save_parameters", "load_parameters", "LoadError", "nn", "optim", "data", "eager", "passes",
    "study",
    "to_dot", "save_dot", "diff_dot", "trace", "Trace", "GraphvizNotFound",
]
