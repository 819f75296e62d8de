"""Layers of convolutional nets, laid out as torch.nn's: Conv1d, Conv2d, MaxPool2d, AvgPool2d and Flatten.

Each call builds in the layer's name scope (one box per layer in ``sg.to_dot(..., collapse=True)``) and
calls the op of the same name (sg.conv2d, sg.max_pool2d ...), so the same layer builds a graph from a
placeholder and computes at once on an eager tensor.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..ops.registry import as_tensor
from ..tensor import ShapeError, format_shape, parameter, user_frame
from .layers import Module, _rng, layer_scope
from .sequence import _load


def _tuple(value, n, what):
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    if len(values) != n:
        raise ValueError(f"{what} must be an int or {n} ints, got {value!r}")
    return tuple(int(v) for v in values)


class _Conv(Module):
    """What Conv1d and Conv2d share; a subclass gives ``rank`` (spatial axes), ``kind`` and ``op``."""

    rank, kind = 0, ""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 seed=None, dtype="float64", name=None):
        self.in_channels, self.out_channels, self.groups = int(in_channels), int(out_channels), int(groups)
        if self.groups < 1 or self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"{self.kind}: groups={groups} must divide in_channels ({in_channels}) and "
                             f"out_channels ({out_channels})")
        n = self.rank
        self.kernel_size = _tuple(kernel_size, n, "kernel_size")
        self.stride, self.dilation = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n, "padding")
        self.name = name or self.kind.lower()
        # torch's default: kaiming_uniform(a=sqrt(5)) for the weight, i.e. U(-b, b) with b = 1/sqrt(fan_in),
        # and the same bound for the bias
        shape = (self.out_channels, self.in_channels // self.groups) + self.kernel_size
        bound = 1.0 / math.sqrt(math.prod(shape[1:]))
        rng = _rng(seed)
        self.weight = parameter(rng.uniform(-bound, bound, size=shape).astype(dtype), name=f"{self.name}.weight")
        self.bias = parameter(rng.uniform(-bound, bound, size=self.out_channels).astype(dtype),
                              name=f"{self.name}.bias") if bias else None
        self._names = ["weight", "bias"] if bias else ["weight"]

    def __call__(self, x):
        """(N, C_in, *spatial) -> (N, C_out, *spatial'); one example without its batch axis as torch takes it."""
        x = as_tensor(x)
        if x.ndim not in (self.rank + 1, self.rank + 2):
            raise ShapeError(f"{self.kind}: expected an input of {self.rank + 2} axes (N, C, ...) or {self.rank + 1} "
                             f"(C, ...), got {format_shape(x.shape)} (at {user_frame()})")
        with layer_scope(self.name):
            single = x.ndim == self.rank + 1
            y = self.op(ops.expand_dims(x, 0) if single else x, self.weight, self.stride, self.padding,
                        self.dilation, self.groups, bias=self.bias)
            return ops.squeeze(y, 0) if single else y

    def state_dict(self) -> dict:
        return {key: np.array(getattr(self, key).value) for key in self._names}

    def load_state_dict(self, state):
        _load(self, self._names, state)

    def __repr__(self):
        text = (f"{self.kind}({self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        for key, default in (("padding", 0), ("dilation", 1)):
            value = getattr(self, key)
            if value != (default,) * self.rank:
                text += f", {key}={value}"
        text += f", groups={self.groups}" if self.groups != 1 else ""
        return text + (", bias=False)" if self.bias is None else ")")


class Conv1d(_Conv):
    """torch.nn.Conv1d: (N, C_in, L) -> (N, C_out, L'); weight (out, in/groups, k), bias (out,)."""

    rank, kind = 1, "Conv1d"
    op = staticmethod(ops.conv1d)


class Conv2d(_Conv):
    """torch.nn.Conv2d: (N, C_in, H, W) -> (N, C_out, H', W'); weight (out, in/groups, kh, kw), bias (out,)."""

    rank, kind = 2, "Conv2d"
    op = staticmethod(ops.conv2d)


class MaxPool2d(Module):
    """torch.nn.MaxPool2d: the maximum of each ``kernel_size`` window, ``stride`` apart (None: the kernel)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, name="maxpool2d"):
        self.kernel_size, self.padding, self.dilation = kernel_size, padding, dilation
        self.stride = kernel_size if stride is None else stride
        self.ceil_mode, self.name = bool(ceil_mode), name

    def __call__(self, x):
        with layer_scope(self.name):
            return ops.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def __repr__(self):
        return (f"MaxPool2d(kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode})")


class AvgPool2d(Module):
    """torch.nn.AvgPool2d: the mean of each ``kernel_size`` window, ``stride`` apart (None: the kernel),
    zero padding counted (``count_include_pad``) or not, or each sum divided by ``divisor_override``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None, name="avgpool2d"):
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = kernel_size if stride is None else stride
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)
        self.divisor_override, self.name = divisor_override, name

    def __call__(self, x):
        with layer_scope(self.name):
            return ops.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                  self.count_include_pad, self.divisor_override)

    def __repr__(self):
        return f"AvgPool2d(kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding})"


class Flatten(Module):
    """torch.nn.Flatten: axes ``start_dim`` to ``end_dim`` (inclusive) merged into one."""

    def __init__(self, start_dim=1, end_dim=-1, name="flatten"):
        self.start_dim, self.end_dim, self.name = int(start_dim), int(end_dim), name

    def __call__(self, x):
        x = as_tensor(x)
        start, end = (d + x.ndim if d < 0 else d for d in (self.start_dim, self.end_dim))
        if not 0 <= start <= end < max(x.ndim, 1):
            raise ShapeError(f"Flatten: start_dim={self.start_dim}, end_dim={self.end_dim} do not fit an input of "
                             f"shape {format_shape(x.shape)} (at {user_frame()})")
        if start == end:
            return x               # (one axis merged with nothing: torch gives the input back too)
        merged = x.shape[start:end + 1]
        size = None if None in merged else math.prod(merged)
        shape = x.shape[:start] + (size,) + x.shape[end + 1:]
        if shape.count(None) > 1:
            raise ShapeError(f"Flatten: cannot flatten {format_shape(x.shape)} to {format_shape(shape)}, which has "
                             f"more than one unknown size (at {user_frame()})")
        with layer_scope(self.name):
            return ops.reshape(x, tuple(-1 if d is None else d for d in shape))

    def __repr__(self):
        return f"Flatten(start_dim={self.start_dim}, end_dim={self.end_dim})"
