"""Optimizers as graph updates.

``opt.updates(loss)`` differentiates ``loss`` and returns (parameter, new value expression) pairs for
``sg.compile(..., updates=...)``. The optimizer's state (momentum buffers, Adam's moments, the step
count) lives in parameters of the graph, so one compiled call does the whole step, ``sg.save`` keeps
it and ``sg.save_parameters(step_fn, ...)`` checkpoints it. The learning rate is a parameter too: set
``opt.lr = 0.01`` between calls to schedule it without recompiling.

The arithmetic follows torch.optim's single-tensor implementations term by term, so the two agree to
rounding (tests check 100 steps at rtol 1e-9).
"""
from __future__ import annotations

import numpy as np

from . import ops
from .autodiff import grad
from .tensor import Tensor, name_scope, parameter


def _param_list(params):
    if hasattr(params, "parameters") and callable(params.parameters):
        params = params.parameters()
    params = [params] if isinstance(params, Tensor) else list(params)
    if not params:
        raise ValueError("optimizer: got an empty parameter list")
    for p in params:
        if not isinstance(p, Tensor) or p.op != "parameter":
            raise TypeError(f"optimizer: expected parameter tensors, got {p!r}")
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
        if not isinstance(loss, Tensor) or loss.shape != ():
            raise ValueError(f"{type(self).__name__}.updates: loss must be a scalar tensor, got {loss!r}")
        grads = grad(loss, self.params)
        return self.step_updates(grads)

    def step_updates(self, grads) -> list:
        """The update pairs given gradient tensors (one per parameter), for custom gradient pipelines."""
        raise NotImplementedError

    def _lr_as(self, p):
        return self._lr if self._lr.dtype == p.dtype else ops.cast(self._lr, p.dtype)

    def _scope(self, state):
        """The name scope the new values of one kind of state are built in ("adam.m"): a collapsed picture
        draws each as one box, while a parameter's own update draws in the box of the layer it belongs to."""
        return name_scope(f"{type(self).__name__.lower()}.{state}")


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
