"""Layers for sequences: Embedding, and RNN, LSTM and GRU with torch.nn's equations and parameter layout.

Each recurrent layer (and direction) is one ``scan`` over the time steps whose step is written the plain
way, ``x_t @ W_ih.T + b_ih + h @ W_hh.T + b_hh``: nothing is precomputed by hand for the whole sequence,
so the same code runs traced into a graph (a sequence of unknown length gives one plan per length fed) and
eagerly, step by step, on eager tensors. Each layer builds in its name scope (its ``name``), one box in
``sg.to_dot(..., collapse=True)``.
"""
from __future__ import annotations

import numpy as np

from .. import ops
from ..loops import scan
from ..ops.registry import as_tensor
from ..tensor import ShapeError, format_shape, parameter, user_frame
from .layers import Module, _rng, layer_scope


class Embedding(Module):
    """Row ``i`` of ``weight`` (num_embeddings, embedding_dim) for each integer id in the input, which may
    have any shape; initialized N(0, 1) like torch.nn.Embedding.

    Indexing takes no tensor index, so the rows are picked by a one-hot product, ``one_hot(ids) @ weight``:
    exact (one product by 1.0 per output, the rest by 0.0), and its gradient is the output gradient's rows
    added into the rows picked. It costs num_embeddings multiply-adds per output number: fine for a
    vocabulary of hundreds or a few thousand, wasteful for a large one.
    """

    def __init__(self, num_embeddings, embedding_dim, seed=None, dtype="float64", name="embedding"):
        self.name = name
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        values = _rng(seed).standard_normal((self.num_embeddings, self.embedding_dim)).astype(dtype)
        self.weight = parameter(values, name=f"{name}.weight", dtype=dtype)

    def __call__(self, ids):
        ids = as_tensor(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"Embedding: ids must be integers, got {ids.dtype} (at {user_frame()}); make the "
                            f"placeholder with dtype='int64'")
        with layer_scope(self.name):
            return ops.one_hot(ids, self.weight[:, 0]) @ self.weight

    def state_dict(self) -> dict:
        return {"weight": np.array(self.weight.value)}

    def load_state_dict(self, state):
        _load(self, ["weight"], state)

    def __repr__(self):
        return f"Embedding({self.num_embeddings}, {self.embedding_dim})"


def _load(module, names, state):
    """Set the parameters named ``names`` from ``state`` ({name: array}, e.g. a torch state dict's values)."""
    if set(state) != set(names):
        missing, extra = sorted(set(names) - set(state)), sorted(set(state) - set(names))
        raise KeyError(f"{type(module).__name__}.load_state_dict: missing {missing}, unexpected {extra}")
    for key in names:
        getattr(module, key).value = np.asarray(state[key])


def _affine(x, weight, bias):
    y = x @ ops.transpose(weight)
    return y if bias is None else y + bias


def _chunks(gates, n):
    """The ``n`` equal parts of the last axis (torch's gate order within the stacked weights)."""
    size = gates.shape[-1] // n
    return [gates[..., k * size:(k + 1) * size] for k in range(n)]


class _Recurrent(Module):
    """What RNN, LSTM and GRU share: parameters, layers, directions, states and layouts.

    A subclass gives ``gates`` (the stacked weights hold that many H-row blocks), ``n_states`` (1: h;
    2: h and c) and ``step(weights, carry, x_t) -> (carry, h)``.
    """

    gates, n_states, kind = 1, 1, "RNN"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, bidirectional=False,
                 seed=None, dtype="float64", name=None):
        self.input_size, self.hidden_size, self.num_layers = int(input_size), int(hidden_size), int(num_layers)
        if min(self.input_size, self.hidden_size, self.num_layers) < 1:
            raise ValueError(f"{self.kind}: input_size, hidden_size and num_layers must be positive, got "
                             f"{input_size}, {hidden_size}, {num_layers}")
        self.bias, self.batch_first, self.bidirectional = bool(bias), bool(batch_first), bool(bidirectional)
        self.directions = 2 if bidirectional else 1
        self.name = name = name or self.kind.lower()
        rng, bound = _rng(seed), 1.0 / np.sqrt(self.hidden_size)
        G, H = self.gates, self.hidden_size
        self._names = []           # torch's order: per layer, per direction, w_ih, w_hh, b_ih, b_hh
        for k in range(self.num_layers):
            width = self.input_size if k == 0 else H * self.directions
            for suffix in ("", "_reverse")[:self.directions]:
                shapes = [("weight_ih", (G * H, width)), ("weight_hh", (G * H, H))]
                shapes += [("bias_ih", (G * H,)), ("bias_hh", (G * H,))] if self.bias else []
                for kind, shape in shapes:
                    key = f"{kind}_l{k}{suffix}"
                    values = rng.uniform(-bound, bound, size=shape).astype(dtype)
                    setattr(self, key, parameter(values, name=f"{name}.{key}", dtype=dtype))
                    self._names.append(key)

    def weights(self, layer, direction):
        """(weight_ih, weight_hh, bias_ih, bias_hh) of one layer and direction (biases None without bias)."""
        suffix = "_reverse" if direction else ""
        return tuple(getattr(self, f"{kind}_l{layer}{suffix}", None)
                     for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))

    def state_dict(self) -> dict:
        """{torch's parameter name: a copy of its value}; torch's ``state_dict()`` has the same keys."""
        return {key: np.array(getattr(self, key).value) for key in self._names}

    def load_state_dict(self, state):
        """Set every parameter from ``state`` ({torch's name: array}), e.g. a torch layer's weights."""
        _load(self, self._names, state)

    def __call__(self, x, state=None):
        """``(output, final state)`` for input (T, B, input_size) ((B, T, ...) if batch_first; (T, ...)
        unbatched): output (T, B, directions * H), the last layer's h at every step; the final state (h_n,
        or (h_n, c_n) for an LSTM) of shape (num_layers * directions, B, H). ``state`` is the initial one in
        that form (zeros if None). Built in the name scope ``name``, like the other layers."""
        with layer_scope(self.name):
            return self._run(as_tensor(x), state)

    def _run(self, x, state):
        x = self._check_input(x)
        unbatched = x.ndim == 2
        if unbatched:
            x = ops.expand_dims(x, 1)
            state = None if state is None else self._map(state, lambda s: ops.expand_dims(s, 1))
        elif self.batch_first:
            x = ops.transpose(x, (1, 0, 2))
        starts = self._starts(x, state)
        finals = []
        for k in range(self.num_layers):
            outputs = []
            for d in range(self.directions):
                j = k * self.directions + d
                w = self.weights(k, d)
                carry, ys = scan(lambda c, x_t, w=w: self.step(w, c, x_t), self._carry([s[j] for s in starts]),
                                 x, reverse=d == 1)
                finals.append(self._parts(carry))
                outputs.append(ys)
            x = outputs[0] if self.directions == 1 else ops.concatenate(outputs, axis=-1)
        final = self._carry([ops.stack([f[i] for f in finals]) for i in range(self.n_states)])
        if unbatched:
            return ops.squeeze(x, 1), self._map(final, lambda s: ops.squeeze(s, 1))
        return (ops.transpose(x, (1, 0, 2)) if self.batch_first else x), final

    def _check_input(self, x):
        if x.ndim not in (2, 3) or x.shape[-1] not in (None, self.input_size):
            layout = "(B, T, input_size)" if self.batch_first else "(T, B, input_size)"
            raise ShapeError(f"{self.kind}: expected input of shape {layout} or (T, input_size) with input_size "
                             f"{self.input_size}, got {format_shape(x.shape)} (at {user_frame()})")
        if x.dtype != self.weight_ih_l0.dtype:
            raise TypeError(f"{self.kind}: input of dtype {x.dtype} into a layer of dtype {self.weight_ih_l0.dtype} "
                            f"(at {user_frame()}); cast one (the state a step carries keeps one dtype)")
        return x

    def _starts(self, x, state):
        """The initial state as ``n_states`` tensors of shape (num_layers * directions, B, H)."""
        if state is None:
            # (B, H) zeros sized from x at run time: the batch size may be unknown until the call
            zero = ops.zeros_like(x[0, :, :1]) + np.zeros(self.hidden_size, x.dtype)
            return [[zero] * (self.num_layers * self.directions) for _ in range(self.n_states)]
        parts = [as_tensor(s) for s in self._parts(state)]
        want = (self.num_layers * self.directions, x.shape[1], self.hidden_size)
        for s in parts:
            if s.ndim != 3 or any(a is not None and b is not None and a != b for a, b in zip(s.shape, want)):
                raise ShapeError(f"{self.kind}: expected an initial state of shape {format_shape(want)}, got "
                                 f"{format_shape(s.shape)} (at {user_frame()})")
        return parts

    def _parts(self, carry):
        return list(carry) if self.n_states > 1 else [carry]

    def _carry(self, parts):
        return tuple(parts) if self.n_states > 1 else parts[0]

    def _map(self, state, fn):
        return self._carry([fn(s) for s in self._parts(state)])

    def __repr__(self):
        defaults = {"num_layers": 1, "nonlinearity": "tanh", "bias": True, "batch_first": False,
                    "bidirectional": False}
        extras = "".join(f", {k}={getattr(self, k)!r}" for k, v in defaults.items() if getattr(self, k, v) != v)
        return f"{self.kind}({self.input_size}, {self.hidden_size}{extras})"


class RNN(_Recurrent):
    """Elman RNN, as torch.nn.RNN: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``, act tanh or relu.
    Parameters U(-1/sqrt(H), 1/sqrt(H)), named as torch's (weight_ih_l0, ...)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 bidirectional=False, seed=None, dtype="float64", name=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, bidirectional, seed, dtype, name)

    def step(self, w, h, x):
        act = ops.tanh if self.nonlinearity == "tanh" else ops.relu
        h = act(_affine(x, w[0], w[2]) + _affine(h, w[1], w[3]))
        return h, h


class LSTM(_Recurrent):
    """Long short-term memory, as torch.nn.LSTM: gates i, f, g, o stacked in that order (4H rows),
    ``c' = f * c + i * g``, ``h' = o * tanh(c')``; the state is (h, c)."""

    gates, n_states, kind = 4, 2, "LSTM"

    def step(self, w, carry, x):
        h, c = carry
        i, f, g, o = _chunks(_affine(x, w[0], w[2]) + _affine(h, w[1], w[3]), 4)
        c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        h = ops.sigmoid(o) * ops.tanh(c)
        return (h, c), h


class GRU(_Recurrent):
    """Gated recurrent unit, as torch.nn.GRU: gates r, z, n stacked in that order (3H rows),
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``."""

    gates, kind = 3, "GRU"

    def step(self, w, h, x):
        xr, xz, xn = _chunks(_affine(x, w[0], w[2]), 3)
        hr, hz, hn = _chunks(_affine(h, w[1], w[3]), 3)
        r, z = ops.sigmoid(xr + hr), ops.sigmoid(xz + hz)
        n = ops.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        return h, h
