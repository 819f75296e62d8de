"""Optimizers as graph updates.

``opt.updates(loss)`` differentiates ``loss`` and returns (parameter, new value expression) pairs for
``sg.compile(..., updates=...)``. The optimizer's state (momentum buffers, Adam's moments, the step
count) lives in parameters of the graph, so one compiled call does the whole step, ``sg.save`` keeps
it and ``sg.save_parameters(step_fn, ...)`` checkpoints it. The learning rate is a parameter too: set
``opt.lr = 0.01`` between calls to schedule it without recompiling.

Define-by-run, the same optimizer object works as torch.optim's: ``loss.backward()`` fills the parameters'
``.grad``, ``opt.step()`` applies the same update arithmetic at once, ``opt.zero_grad()`` clears them.

The arithmetic follows torch.optim's single-tensor implementations term by term, so the two agree to
rounding (tests check 100 steps at rtol 1e-9).
"""
from __future__ import annotations

from collections import deque
from itertools import repeat

import numpy as np

from . import eager, ops
from .autodiff import grad
from .tensor import ShapeError, Tensor, format_shape, name_scope, parameter


def _describe(p) -> str:
    # a short description for errors: never the array itself
    if isinstance(p, Tensor):
        what = "eager tensor" if eager.is_eager(p) else p.op
        return f"{what} {p.label()!r} of shape {format_shape(p.shape)}"
    shape = f" of shape {format_shape(np.shape(p))}" if hasattr(p, "shape") else ""
    return f"a {type(p).__name__}{shape}"


def _trainable(p) -> bool:
    # a graph parameter, or an eager leaf (eager.tensor(..., requires_grad=True)): both keep their value
    return isinstance(p, Tensor) and (p.op == "parameter" or (eager.is_eager(p) and not p.inputs))


def _param_list(params):
    if hasattr(params, "parameters") and callable(params.parameters):
        params = params.parameters()
    params = [params] if isinstance(params, Tensor) else list(params)
    if not params:
        raise ValueError("optimizer: got an empty parameter list")
    for p in params:
        if not _trainable(p):
            raise TypeError(f"optimizer: expected parameters (sg.parameter, a module's .parameters(), or eager "
                            f"leaves made with requires_grad=True), got {_describe(p)}")
        if not p.requires_grad:
            raise ValueError(f"optimizer: {_describe(p)} does not require grad, so it cannot be trained")
    if len({p.id for p in params}) != len(params):
        raise ValueError("optimizer: a parameter appears twice in the list")
    return params


class Optimizer:
    """Holds the parameters, the hyperparameters and the state parameters of one optimizer."""

    def __init__(self, params, lr):
        self.params = _param_list(params)
        self._lr = parameter(np.float64(lr), name="lr")
        self._state = [self._lr]

    @property
    def lr(self) -> float:
        return float(self._lr.value)

    @lr.setter
    def lr(self, value):
        self._lr.value = np.float64(value)

    def _slot(self, p, kind):
        """A state parameter of ``p``'s shape and dtype, starting at zero."""
        slot = parameter(np.zeros(p.shape, p.dtype), name=f"{p.label()}.{kind}", dtype=p.dtype)
        self._state.append(slot)
        return slot

    def _scalar(self, name):
        slot = parameter(np.float64(0.0), name=name)
        self._state.append(slot)
        return slot

    def state(self) -> list:
        """The optimizer's own parameters (learning rate, step count, buffers)."""
        return list(self._state)

    def parameters(self) -> list:
        """The trained parameters followed by the optimizer's state: everything a checkpoint needs."""
        return self.params + self.state()

    def updates(self, loss) -> list:
        """(parameter, new value) pairs for one step on ``loss``, state included."""
        name = type(self).__name__
        if eager.is_eager(loss):
            raise TypeError(f"{name}.updates builds the step as graph, for sg.compile; with an eager loss call "
                            f"loss.backward() and then opt.step()")
        if not isinstance(loss, Tensor) or loss.shape != ():
            raise ValueError(f"{name}.updates: loss must be a scalar tensor, got {_describe(loss)}")
        grads = grad(loss, self.params)
        return self.step_updates(grads)

    def step_updates(self, grads) -> list:
        """The update pairs given gradient tensors (one per parameter, None: leave that parameter and its
        state alone), for custom gradient pipelines."""
        raise NotImplementedError

    # ----------------------------------------------------------------- define-by-run, as torch.optim
    def zero_grad(self):
        """Forget the parameters' gradients (``.grad`` becomes None, torch's default), before the next backward."""
        for p in self.params:
            p.grad = None

    def step(self):
        """One update from the gradients that ``loss.backward()`` left in the parameters' ``.grad``, computed at
        once by the same arithmetic ``updates`` builds as graph (the state, hyperparameters and learning rate
        are shared: both ways may be mixed). A parameter without a gradient is left alone. Every new value
        is computed and checked before any is assigned, so a failing step changes nothing."""
        grads = [None if p.grad is None else eager.tensor(_grad_value(p), copy=False) for p in self.params]
        if all(g is None for g in grads):
            return
        held = {id(t._value) for t in self.parameters()} | {id(g._value) for g in grads if g is not None}
        with eager.no_grad():
            pairs = self.step_updates(grads)
            new = [_new_value(p, value, held) for p, value in pairs]
        # (one C call assigns them all: no Python line, so no exception, runs between two assignments)
        deque(map(setattr, [p for p, _ in pairs], repeat("_value"), new), 0)

    def _lr_as(self, p):
        return self._lr if self._lr.dtype == p.dtype else ops.cast(self._lr, p.dtype)

    def _scope(self, state):
        """The name scope the new values of one kind of state are built in ("adam.m"): a collapsed picture
        draws each as one box, while a parameter's own update draws in the box of the layer it belongs to."""
        return name_scope(f"{type(self).__name__.lower()}.{state}")


def _grad_value(p):
    g = p.grad._value if isinstance(p.grad, Tensor) else np.asarray(p.grad)
    if g.shape != p.shape:
        raise ShapeError(f"optimizer step: the gradient of {_describe(p)} has shape {format_shape(g.shape)}")
    return g


def _new_value(p, value, held):
    """``value`` (an eager result, or an expression over parameters) as an array ``p`` may own: a fresh result
    of this step's arithmetic as it is, anything another tensor holds (``held``: ids) or shows a copy."""
    arr = eager.value_of(value, "optimizer step")
    if arr.shape != p.shape:
        raise ShapeError(f"optimizer step: the new value of {_describe(p)} has shape {format_shape(arr.shape)}")
    if (type(arr) is not np.ndarray or arr.base is not None or not arr.flags.writeable or arr.dtype != p.dtype
            or id(arr) in held):
        arr = np.array(arr, dtype=p.dtype)
    held.add(id(arr))
    return arr


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum and L2 weight decay (torch.optim.SGD)."""

    def __init__(self, params, lr, momentum=0.0, nesterov=False, weight_decay=0.0):
        super().__init__(params, lr)
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: momentum and weight_decay must be >= 0, got {momentum}, {weight_decay}")
        if nesterov and momentum == 0:
            raise ValueError("SGD: nesterov momentum needs momentum > 0")
        self.momentum, self.nesterov, self.weight_decay = float(momentum), bool(nesterov), float(weight_decay)
        self.buffers = [self._slot(p, "momentum") for p in self.params] if momentum else []

    def step_updates(self, grads):
        pairs = []
        for k, (p, g) in enumerate(zip(self.params, grads)):
            if g is None:
                continue
            if self.weight_decay:
                g = g + self.weight_decay * p
            if self.momentum:
                # With a zero initial buffer, momentum * 0 + g equals torch's first-step copy of g.
                with self._scope("momentum"):
                    buf = self.buffers[k] * self.momentum + g
                pairs.append((self.buffers[k], buf))
                g = g + self.momentum * buf if self.nesterov else buf
            pairs.append((p, p - self._lr_as(p) * g))
        return pairs


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; ``weight_decay`` adds L2 to the gradient (torch.optim.Adam)."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr)
        beta1, beta2 = (float(b) for b in betas)
        if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
            raise ValueError(f"{type(self).__name__}: betas must lie in [0, 1), got {betas}")
        if eps < 0 or weight_decay < 0:
            raise ValueError(f"{type(self).__name__}: eps and weight_decay must be >= 0")
        self.betas, self.eps, self.weight_decay = (beta1, beta2), float(eps), float(weight_decay)
        self.step_count = self._scalar("step")
        self.m = [self._slot(p, "m") for p in self.params]
        self.v = [self._slot(p, "v") for p in self.params]

    def step_updates(self, grads):
        beta1, beta2 = self.betas
        with self._scope("step"):
            step = self.step_count + 1.0
            pairs = [(self.step_count, step)]
            # Bias corrections in float64 from the step count, as torch computes them in Python floats.
            bc1 = 1.0 - ops.pow(np.float64(beta1), step)
            bc2_sqrt = ops.sqrt(1.0 - ops.pow(np.float64(beta2), step))
            step_size = self._lr / bc1
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            if g is None:
                continue
            cast = (lambda t: t) if p.dtype == np.float64 else (lambda t, d=p.dtype: ops.cast(t, d))
            if self.weight_decay and not self.decoupled:
                g = g + self.weight_decay * p
            base = p * (1.0 - self._lr_as(p) * self.weight_decay) if self.weight_decay and self.decoupled else p
            with self._scope("m"):
                m_new = m + (1.0 - beta1) * (g - m)            # torch's lerp for weights below 0.5
            with self._scope("v"):
                v_new = v * beta2 + (1.0 - beta2) * (g * g)
                denom = ops.sqrt(v_new) / cast(bc2_sqrt) + self.eps
            pairs += [(m, m_new), (v, v_new), (p, base - cast(step_size) * (m_new / denom))]
        return pairs


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay each step."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)
