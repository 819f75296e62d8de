"""staticgrad: define-and-run automatic differentiation for numpy.

Describe a computation once over placeholders and parameters, get its gradients as more graph with
``grad``, and ``compile`` forward, backward and parameter updates into one callable.

Layers: a module imports only from its own layer or the layers listed above it (tests/test_package.py
checks this against every import in the package, and that no imports go round in a circle).

    tensor                                   the node type; errors; name scopes
    effects                                  state a graph updates by itself (batch norm, random)
    ops                                      the op registry: every fact about each op
    graph                                    walks and the compiler's IR
    rewrite stable                           the rule engine; numerically stable forms
    autodiff                                 the one reverse sweep: sg.grad
    eager                                    define-by-run over the same registry and sweep
    random                                   random streams whose state lives in the graph; dropout
    loops                                    scan, cond, while_loop: control flow traced into bodies
    lower                                    optimized graph -> runnable program, per call shape
    passes                                   the optimization passes and their ledger
    data feeds report encoding               batches, fit and its bar; what calls and reports show; values <-> JSON
    graphdoc                                 a graph and its loops' bodies <-> JSON, checked as it loads
    function                                 the compiled Function: feeds, plans, call, updates
    compiler                                 sg.compile: passes, then a Function
    explain io testing nn optim              seeing inside; files; gradient checks; the training kit
    study distributed                        the static vs dynamic study; training on Dask (both on demand)
    staticgrad                               this file: the public API
    cli demo demo_model __main__             the staticgrad command; the demo's model (user code)
"""
from __future__ import annotations

import importlib

from . import data, eager, explain, loops, nn, ops, optim, passes, random
from .autodiff import grad
from .compiler import compile
from .explain import GraphvizNotFound, Trace, diff_dot, save_dot, summary, to_dot, trace
from .function import ExecutionError, Function
from .io import LoadError, LoadLimitError, load, load_parameters, save, save_parameters
from .loops import cond, fori_loop, scan, while_loop
from .nn.functional import batch_norm, layer_norm
from .ops import global_avg_pool2d
from .random import dropout
from .report import Report
from .tensor import (
    FeedError,
    GradError,
    NumericsError,
    ShapeError,
    StaticgradError,
    Tensor,
    constant,
    name_scope,
    parameter,
    placeholder,
)

__version__ = "0.1.0"

# Every op whose registration says it is public is sg.<name> (concatenate's gradient, split, is sg.ops only).
_OPS = {name: opdef.function for name, opdef in ops.REGISTRY.items() if opdef.public}
globals().update(_OPS)
conv1d = ops.conv1d         # (conv2d over an added axis: a function, not an op of its own)

__all__ = [
    "Tensor", "placeholder", "parameter", "constant", "name_scope", "grad", "compile", "Function", "Report",
    "StaticgradError", "ShapeError", "FeedError", "GradError", "NumericsError", "ExecutionError", "LoadError",
    "LoadLimitError", "GraphvizNotFound",
    "save", "load", "save_parameters", "load_parameters", "to_dot", "save_dot", "diff_dot", "trace", "Trace", "summary",
    "scan", "cond", "while_loop", "fori_loop", "batch_norm", "layer_norm", "global_avg_pool2d", "dropout",
    "ops", "passes", "eager", "loops", "nn", "optim", "data", "explain", "study", "distributed", "conv1d", "random",
]
__all__ += sorted(set(_OPS) - set(__all__))      # (scan, cond and while_loop are ops too: named once)

# The study imports the timing and comparison code, distributed is for a Dask cluster: only when asked for.
_ON_DEMAND = ("study", "distributed")


def __getattr__(name):
    if name in _ON_DEMAND:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'staticgrad' has no attribute {name!r}")


def __dir__():
    return sorted(__all__ + ["__version__"])
