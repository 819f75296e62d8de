"""Initializers, activations, the Module base class, the feed-forward layers and the losses."""
from __future__ import annotations

import contextlib
import copy

import numpy as np

from .. import eager, ops
from ..tensor import CONTEXT, ShapeError, Tensor, format_shape, name_scope, parameter, user_frame


# ------------------------------------------------------------------ initializers
def _rng(seed):
    # A Generator passed in is used as is, so one seed can drive a whole model reproducibly.
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _fans(shape):
    if len(shape) < 2:
        raise ValueError(f"fan-in/fan-out need a shape with at least 2 axes, got {shape}")
    receptive = int(np.prod(shape[2:], dtype=np.int64)) if len(shape) > 2 else 1
    return shape[0] * receptive, shape[1] * receptive


def glorot_uniform(shape, seed=None, dtype="float64"):
    """U(-a, a) with a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010); shape is (fan_in, fan_out)."""
    fan_in, fan_out = _fans(shape)
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return _rng(seed).uniform(-limit, limit, size=shape).astype(dtype)


def glorot_normal(shape, seed=None, dtype="float64"):
    """N(0, 2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(shape)
    return _rng(seed).normal(0.0, np.sqrt(2.0 / (fan_in + fan_out)), size=shape).astype(dtype)


def he_uniform(shape, seed=None, dtype="float64"):
    """U(-a, a) with a = sqrt(6 / fan_in) (He et al. 2015), for relu layers."""
    fan_in, _ = _fans(shape)
    limit = np.sqrt(6.0 / fan_in)
    return _rng(seed).uniform(-limit, limit, size=shape).astype(dtype)


def he_normal(shape, seed=None, dtype="float64"):
    """N(0, 2 / fan_in), for relu layers."""
    fan_in, _ = _fans(shape)
    return _rng(seed).normal(0.0, np.sqrt(2.0 / fan_in), size=shape).astype(dtype)


def zeros(shape, seed=None, dtype="float64"):
    return np.zeros(shape, dtype=dtype)


INITIALIZERS = {"glorot_uniform": glorot_uniform, "glorot_normal": glorot_normal, "glorot": glorot_uniform,
                "he_uniform": he_uniform, "he_normal": he_normal, "he": he_normal, "zeros": zeros}


def _initializer(init):
    if callable(init):
        return init
    try:
        return INITIALIZERS[init]
    except KeyError:
        raise ValueError(f"unknown initializer {init!r}; known: {', '.join(INITIALIZERS)}") from None


# ------------------------------------------------------------------ activations
ACTIVATIONS = {"relu": ops.relu, "tanh": ops.tanh, "sigmoid": ops.sigmoid, "softplus": ops.softplus,
               "identity": lambda x: x, None: lambda x: x}


def _activation(activation):
    if callable(activation):
        return activation
    try:
        return ACTIVATIONS[activation]
    except KeyError:
        known = ", ".join(k for k in ACTIVATIONS if k)
        raise ValueError(f"unknown activation {activation!r}; known: {known}, or any callable") from None


# ------------------------------------------------------------------ layers
def _is_state(x) -> bool:
    # a parameter, or an eager copy's leaf (see Module.to_eager)
    return isinstance(x, Tensor) and (x.op == "parameter" or (eager.is_eager(x) and x.op == eager.LEAF_OP))


def _is_parameter(x) -> bool:
    return _is_state(x) and x.requires_grad


def _is_buffer(x) -> bool:
    # state that is updated, not trained: a parameter made with requires_grad=False, or its eager copy
    return _is_state(x) and not x.requires_grad


class Module:
    """Base class: a callable that owns parameters (its own and those of sub-modules).

    ``training`` (True until ``eval()``) is read when the module is called, that is when its graph is
    built: a graph built after ``model.eval()`` computes the evaluation form, and stays so.
    """

    training = True

    def parameters(self) -> list:
        """The trained parameters (what optimizers take), each once, in the order the attributes hold them."""
        return self._collect("parameters", _is_parameter)

    def buffers(self) -> list:
        """The state that is updated but not trained (a batch norm's running statistics): left out of
        ``parameters()``, kept by ``sg.save_parameters(model, ...)`` and ``to_eager()``."""
        return self._collect("buffers", _is_buffer)

    def _collect(self, method, test):
        found, seen = [], set()
        for value in vars(self).values():
            items = value if isinstance(value, (list, tuple)) else [value]
            for item in items:
                tensors = getattr(item, method)() if isinstance(item, Module) else [item] if test(item) else []
                for p in tensors:
                    if p.id not in seen:
                        seen.add(p.id)
                        found.append(p)
        return found

    def children(self) -> list:
        """The sub-modules held in attributes (or in lists and tuples of them)."""
        found = []
        for value in vars(self).values():
            items = value if isinstance(value, (list, tuple)) else [value]
            found += [item for item in items if isinstance(item, Module)]
        return found

    def zero_grad(self):
        """Forget the gradients that eager ``loss.backward()`` left in the parameters' ``.grad`` (None, torch's
        default); the optimizer's ``zero_grad()`` does the same for the parameters it trains."""
        for p in self.parameters():
            p.grad = None

    def train(self, mode: bool = True):
        """Set ``training`` on this module and every sub-module; returns the module (as torch's)."""
        self.training = bool(mode)
        for child in self.children():
            child.train(mode)
        return self

    def eval(self):
        """``train(False)``: graphs built from now on use running statistics and no dropout."""
        return self.train(False)

    def to_eager(self, memo=None):
        """A copy of this module whose parameters are eager tensors (``requires_grad=True``) holding copies
        of the current values, so the same layer code runs define-by-run; gradients land in ``.grad``.
        Buffers become eager tensors that do not require grad (a training call changes them at once)."""
        memo = {} if memo is None else memo       # a parameter shared by two sub-modules stays shared
        twin = copy.copy(self)
        for key, value in vars(self).items():
            if isinstance(value, (list, tuple)):
                setattr(twin, key, type(value)(_eager_twin(v, memo) for v in value))
            else:
                setattr(twin, key, _eager_twin(value, memo))
        return twin

    def __call__(self, x):
        raise NotImplementedError


def layer_scope(name):
    """The name scope a layer's call builds in, so a collapsed picture draws the layer as one box: ``name``,
    unless the innermost scope already names the layer (Sequential opens "k.name" for its k-th layer).
    A '/' in the name (which would nest scopes) becomes '.'; a layer without a name opens none."""
    name = str(name or "").replace("/", ".")
    inner = CONTEXT.scopes[-1] if CONTEXT.scopes else ""
    if not name or inner == name or inner.endswith("." + name):
        return contextlib.nullcontext()
    return name_scope(name)


def _eager_twin(value, memo):
    if isinstance(value, Module):
        return value.to_eager(memo)
    if isinstance(value, Tensor) and value.op == "parameter":
        if value.id not in memo:
            # (state that is not trained, a random key or a running mean, stays so)
            memo[value.id] = eager.tensor(value.value, requires_grad=value.requires_grad, name=value.name)
        return memo[value.id]
    return value


class Linear(Module):
    """``x @ weight + bias`` with ``weight`` of shape (in_features, out_features).

    ``init`` is an initializer name (glorot, he, ...) or a function ``(shape, seed, dtype) -> array``;
    ``seed`` is an int or a numpy Generator. A call builds in the name scope ``name``, the prefix of its
    parameters' names (one box in ``sg.to_dot(..., collapse=True)``).
    """

    def __init__(self, in_features, out_features, bias=True, init="glorot_uniform", seed=None,
                 dtype="float64", name="linear"):
        self.name = name
        self.in_features, self.out_features = int(in_features), int(out_features)
        values = _initializer(init)((self.in_features, self.out_features), seed=_rng(seed), dtype=dtype)
        self.weight = parameter(values, name=f"{name}.weight", dtype=dtype)
        self.bias = parameter(np.zeros(self.out_features, dtype), name=f"{name}.bias", dtype=dtype) if bias else None

    def __call__(self, x):
        with layer_scope(self.name):
            y = x @ self.weight
            return y + self.bias if self.bias is not None else y

    def __repr__(self):
        return f"Linear({self.in_features}, {self.out_features}, bias={self.bias is not None})"


class MLP(Module):
    """Linear layers of the given ``sizes`` with ``activation`` between them (none after the last,
    unless ``output_activation`` is given). ``init=None`` picks He for relu and Glorot otherwise. The k-th
    layer, its activation included, builds in the name scope "name.k" (the prefix of its parameters)."""

    def __init__(self, sizes, activation="relu", output_activation=None, init=None, seed=0, dtype="float64",
                 name="mlp"):
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2:
            raise ValueError(f"MLP needs at least an input and an output size, got {sizes}")
        if init is None:
            init = "he_normal" if activation == "relu" else "glorot_uniform"
        rng = _rng(seed)
        self.sizes = sizes
        self.activation = _activation(activation)
        self.output_activation = _activation(output_activation)
        self.layers = [Linear(m, n, init=init, seed=rng, dtype=dtype, name=f"{name}.{k}")
                       for k, (m, n) in enumerate(zip(sizes[:-1], sizes[1:]))]

    def __call__(self, x):
        # Each layer's scope ("mlp.0", named as its parameters) holds its activation too, and no "mlp" scope
        # wraps them: collapse=True folds a picture into top-level scopes, one box per layer this way.
        for k, layer in enumerate(self.layers):
            with layer_scope(layer.name):
                x = (self.activation if k < len(self.layers) - 1 else self.output_activation)(layer(x))
        return x

    def __repr__(self):
        return f"MLP({self.sizes})"


class Sequential(Module):
    """Apply modules (or plain functions of one tensor) one after another, the k-th in the name scope
    "k.name" (its ``name``, a function's own name, else its class's), so each draws as one box."""

    def __init__(self, *layers):
        self.layers = list(layers)

    def __call__(self, x):
        for k, layer in enumerate(self.layers):
            with name_scope(f"{k}.{_layer_name(layer)}"):
                x = layer(x)
        return x

    def __repr__(self):
        inner = "".join(f"\n  ({k}): {layer!r}" if isinstance(layer, Module) else f"\n  ({k}): {_layer_name(layer)}"
                        for k, layer in enumerate(self.layers))
        return f"Sequential({inner}\n)"


def _layer_name(layer) -> str:
    name = getattr(layer, "name", None) or getattr(layer, "__name__", None) or type(layer).__name__.lower()
    return str(name).replace("/", ".")


# ------------------------------------------------------------------ losses (means over the batch)
def _check_pairs(loss, what, first, second):
    # An elementwise loss must pair examples up: (N, 1) against (N,) would broadcast to N x N and
    # silently average the wrong numbers, so any difference is refused (None matches any size). A single
    # number against all of them pairs nothing wrongly (a GAN's "all real" target 1.0).
    a, b = (x.shape if isinstance(x, Tensor) else np.shape(x) for x in (first, second))
    if b == ():
        return
    if len(a) != len(b) or any(m is not None and n is not None and m != n for m, n in zip(a, b)):
        raise ShapeError(f"{loss}: {what[0]} of shape {format_shape(a)} and {what[1]} of shape {format_shape(b)} "
                         f"must have the same shape, they would broadcast instead of pairing up element by "
                         f"element (reshape one, e.g. sg.reshape(x, (-1,))) (at {user_frame()})")


def mse(prediction, target):
    """Mean of squared differences; ``target`` must have the shape of ``prediction`` or be one number."""
    _check_pairs("mse", ("prediction", "target"), prediction, target)
    with layer_scope("mse"):
        return ops.mean(ops.square(prediction - target))


def binary_cross_entropy_with_logits(logits, targets):
    """Mean of -t log sigmoid(z) - (1-t) log(1 - sigmoid(z)), written stably as softplus(z) - t*z.
    ``targets`` must have the shape of ``logits`` or be one number."""
    _check_pairs("binary_cross_entropy_with_logits", ("logits", "targets"), logits, targets)
    with layer_scope("binary_cross_entropy"):
        return ops.mean(ops.softplus(logits) - targets * logits)


def softmax_cross_entropy(logits, labels):
    """Mean of -log softmax(logits)[label] over the batch; ``labels`` are integer classes."""
    with layer_scope("softmax_cross_entropy"):
        return ops.softmax_cross_entropy(logits, labels)


def accuracy(logits, labels):
    """Fraction of examples classified right (numpy arrays in, float out; for evaluation).

    Binary, one logit per example: ``logits`` of the labels' shape, or with one more axis of size 1
    (an (N, 1) output against (N,) labels); a logit above 0 predicts label 1. Multi-class: ``logits``
    has one more axis than ``labels`` (integer classes), and the largest logit is the prediction.
    """
    logits, labels = np.asarray(logits), np.asarray(labels)
    if logits.shape[:-1] == labels.shape and logits.ndim and logits.shape[-1] == 1:
        logits = logits[..., 0]
    if logits.shape == labels.shape:
        return float(np.mean((logits > 0) == (labels > 0.5)))
    if logits.ndim and logits.shape[:-1] == labels.shape:
        return float(np.mean(np.argmax(logits, axis=-1) == labels))
    raise ValueError(f"accuracy: logits of shape {logits.shape} do not fit labels of shape {labels.shape}; "
                     f"give logits of the labels' shape (binary), with one more axis of size 1 (binary), "
                     f"or with one more axis holding the classes")
