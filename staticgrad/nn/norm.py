"""Normalization layers, laid out as torch.nn's: BatchNorm1d, BatchNorm2d and LayerNorm; and Dropout.

A batch norm and a dropout read ``training`` when called: a graph built in training normalizes by the
batch and moves the running statistics each time a compiled function computes it; one built after
``model.eval()`` reads them (a dropout built for evaluation is the identity). Both share the same
parameters and buffers, so ``model.train(); step = sg.compile(...)`` and ``model.eval(); predict =
sg.compile(...)`` are two functions of one model.
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import eager, effects, random
from ..ops.registry import as_tensor
from ..tensor import ShapeError, format_shape, parameter, user_frame
from .functional import batch_norm, layer_norm
from .layers import Module, layer_scope
from .sequence import _load


class _BatchNorm(Module):
    """What BatchNorm1d and BatchNorm2d share; a subclass gives ``ranks`` (the input ranks it takes)."""

    ranks, kind = (), ""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, bias=True,
                 dtype="float64", name=None):
        if momentum is None:
            raise ValueError(f"{self.kind}: momentum=None (a cumulative average of every batch) is not supported; "
                             f"give a number such as 0.1")
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), float(momentum)
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        self.name = name or self.kind.lower()
        C, name = self.num_features, self.name
        self.weight = parameter(np.ones(C, dtype), name=f"{name}.weight") if affine else None
        self.bias = parameter(np.zeros(C, dtype), name=f"{name}.bias") if affine and bias else None
        self._names = [k for k in ("weight", "bias") if getattr(self, k) is not None]
        self.running_mean = self.running_var = self.num_batches_tracked = None
        if self.track_running_stats:
            self.running_mean = parameter(np.zeros(C, dtype), name=f"{name}.running_mean", requires_grad=False)
            self.running_var = parameter(np.ones(C, dtype), name=f"{name}.running_var", requires_grad=False)
            # (torch's state holds it; counted as a float: a parameter's value is real)
            self.num_batches_tracked = parameter(np.float64(0), name=f"{name}.num_batches_tracked",
                                                 requires_grad=False)
            self._names += ["running_mean", "running_var", "num_batches_tracked"]

    def __call__(self, x):
        x = as_tensor(x)
        if x.ndim not in self.ranks:
            wanted = " or ".join(f"{r}D" for r in self.ranks)
            raise ShapeError(f"{self.kind}: expected {wanted} input (N, C, ...), got {format_shape(x.shape)} "
                             f"(at {user_frame()})")
        with layer_scope(self.name):
            # without running statistics the batch's are used in evaluation too (torch's rule)
            batch_stats = self.training or not self.track_running_stats
            y = batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=batch_stats,
                           momentum=self.momentum, eps=self.eps)
            if self.training and self.track_running_stats:
                self._count(y, x)
        return y

    def _count(self, y, x):
        counter = self.num_batches_tracked
        if eager.is_eager(x):
            counter.value = counter.value + 1
        else:
            effects.add_update(y, counter, lambda v: v + 1.0, f"{self.kind}'s batch count")

    def state_dict(self) -> dict:
        """{torch's name: a copy of its value}: weight, bias, running_mean, running_var, num_batches_tracked
        (an int64 count, as torch's), those the layer has."""
        state = {key: np.array(getattr(self, key).value) for key in self._names}
        if "num_batches_tracked" in state:
            state["num_batches_tracked"] = state["num_batches_tracked"].astype(np.int64)
        return state

    def load_state_dict(self, state):
        _load(self, self._names, state)

    def __repr__(self):
        return (f"{self.kind}({self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats})")


class BatchNorm1d(_BatchNorm):
    """torch.nn.BatchNorm1d: input (N, C) or (N, C, L), normalized per channel C."""

    ranks, kind = (2, 3), "BatchNorm1d"


class BatchNorm2d(_BatchNorm):
    """torch.nn.BatchNorm2d: input (N, C, H, W), normalized per channel C."""

    ranks, kind = (4,), "BatchNorm2d"


class LayerNorm(Module):
    """torch.nn.LayerNorm: each example normalized over its last axes, ``normalized_shape``."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, dtype="float64",
                 name="layernorm"):
        shape = (normalized_shape,) if np.ndim(normalized_shape) == 0 else tuple(normalized_shape)
        self.normalized_shape = tuple(int(n) for n in shape)
        self.eps, self.elementwise_affine, self.name = float(eps), bool(elementwise_affine), name
        affine = self.elementwise_affine
        self.weight = parameter(np.ones(self.normalized_shape, dtype), name=f"{name}.weight") if affine else None
        self.bias = parameter(np.zeros(self.normalized_shape, dtype), name=f"{name}.bias") if affine and bias else None
        self._names = [k for k in ("weight", "bias") if getattr(self, k) is not None]

    def __call__(self, x):
        with layer_scope(self.name):
            return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def state_dict(self) -> dict:
        return {key: np.array(getattr(self, key).value) for key in self._names}

    def load_state_dict(self, state):
        _load(self, self._names, state)

    def __repr__(self):
        return (f"LayerNorm({self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None})")


class Dropout(Module):
    """torch.nn.Dropout: in training each element is zeroed with probability ``p`` and the others scaled by
    1 / (1 - p); in evaluation the input is passed on. ``key``: None draws from the default key
    (``sg.random.seed`` resets it), an int gives the layer a key of its own seeded so (a buffer: checkpoints
    keep where its stream stands), or a key (``sg.random.key(seed)``) to share."""

    def __init__(self, p=0.5, key=None, name="dropout"):
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be a probability between 0 and 1, got {p!r}")
        self.p, self.name = float(p), name
        self.key = random.key(key, name=f"{name}.key") if isinstance(key, numbers.Integral) else key

    def __call__(self, x):
        with layer_scope(self.name):
            return random.dropout(x, self.p, training=self.training, key=self.key)

    def __repr__(self):
        return f"Dropout(p={self.p}, inplace=False)"
