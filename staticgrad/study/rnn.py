"""The study's RNN case: one tanh RNN step function, run four ways, each a callable giving loss and gradients.

h_t = tanh(x_t @ Wx + h_{t-1} @ Wh + b) from h_0 = 0, a readout e_t = h_t @ v - y_t at every step, and the
loss 0.5 * mean over steps and sequences of e_t**2 (every state feeds the loss, so back-propagation through
time carries a gradient in at each step). The step is written once (:func:`rnn_step`) and run as:

- a static scan (:func:`rnn_loss` on placeholders): one ``sg.scan`` node; the time axis is None, so one
  compile serves every length and staticgrad builds one plan per length at its first call;
- a static graph unrolled by a Python loop (:func:`rnn_loss_unrolled`): one graph and compile per length;
- an eager loop: :func:`rnn_loss` on eager tensors, where ``sg.scan`` runs the step in a Python loop;
- PyTorch's eager loop: that eager run's tape replayed op by op with torch calls (as the study's torch
  column does), torch autograd for the gradients.

Each runner maps numpy feeds to [loss, dWx, dWh, db, dv] as numpy arrays, so their values can be compared.
"""
from __future__ import annotations

import contextlib
import signal
import threading

import numpy as np

from .. import eager, ops
from ..autodiff import grad as sg_grad
from ..compiler import compile as sg_compile
from ..loops import scan
from ..tensor import parameter, placeholder
from .modes import Clock, _peak_bytes
from .torch import replay, torch_program

INPUTS, HIDDEN, BATCH = 32, 64, 16
PARAM_NAMES = ("Wx", "Wh", "b", "v")


# ------------------------------------------------------------------ the model, written once
def rnn_params(rng, inputs=INPUTS, hidden=HIDDEN):
    """Wx, Wh, b, v scaled by 1/sqrt(fan-in), so that tanh works in its curved range."""
    return [rng.standard_normal((inputs, hidden)) / np.sqrt(inputs),
            rng.standard_normal((hidden, hidden)) / np.sqrt(hidden),
            rng.standard_normal(hidden) * 0.1, rng.standard_normal(hidden) / np.sqrt(hidden)]


def rnn_batch(rng, steps, batch=BATCH, inputs=INPUTS):
    """X (steps, batch, inputs) and targets Y (steps, batch)."""
    return rng.standard_normal((steps, batch, inputs)), 0.5 * rng.standard_normal((steps, batch))


def rnn_step(Wx, Wh, b, v):
    """The step ``(h, (x_t, y_t)) -> (h_t, e_t)``, for sg.scan and for a Python loop alike."""
    def step(h, xy):
        x, y = xy
        h = ops.tanh(x @ Wx + h @ Wh + b)
        return h, h @ v - y
    return step


def _h0(X, Wh):
    return np.zeros((X.shape[1], Wh.shape[0]), dtype=np.result_type(X.dtype, np.float64))


def rnn_errors(X, Y, Wx, Wh, b, v):
    """The readout errors of every step, stacked (steps, batch), by sg.scan."""
    _, errors = scan(rnn_step(Wx, Wh, b, v), _h0(X, Wh), xs=(X, Y))
    return errors


def rnn_loss(X, Y, Wx, Wh, b, v):
    """The loss by sg.scan: static on placeholders (the time axis may be None), a Python loop on eager tensors."""
    errors = rnn_errors(X, Y, Wx, Wh, b, v)
    return 0.5 * ops.mean(errors * errors)


def rnn_loss_unrolled(X, Y, Wx, Wh, b, v):
    """The same loss, the loop unrolled in Python: X's time axis must be known (one graph per length)."""
    step, h, errors = rnn_step(Wx, Wh, b, v), _h0(X, Wh), []
    for t in range(X.shape[0]):
        h, e = step(h, (X[t], Y[t]))
        errors.append(e)
    errors = ops.stack(errors)
    return 0.5 * ops.mean(errors * errors)


def rnn_loss_masked(X, Y, M, Wx, Wh, b, v):
    """The loss of sequences padded at the end: M (steps, batch) is 1 on real steps, 0 on padding. A padded
    step follows every real one, so it changes no real state; the mask keeps it out of the loss."""
    errors = rnn_errors(X, Y, Wx, Wh, b, v)
    return 0.5 * ops.sum(M * errors * errors) / ops.sum(M)


def pad(batch, steps):
    """(X, Y, M): ``batch`` padded with zeros at the end to ``steps`` steps, and its mask."""
    X, Y = batch
    extra = steps - X.shape[0]
    mask = np.zeros((steps, X.shape[1]))
    mask[:X.shape[0]] = 1.0
    return (np.concatenate([X, np.zeros((extra,) + X.shape[1:])]),
            np.concatenate([Y, np.zeros((extra,) + Y.shape[1:])]), mask)


# ------------------------------------------------------------------ the runners
class Runner:
    """One way of running a loss: ``call(*feeds)`` gives [loss, *gradients] as numpy arrays; ``peak(*feeds)``
    the peak memory of one call in bytes (the caller collects garbage first); ``build`` and ``compile`` the
    one-off costs (Clocks, or None)."""

    def __init__(self, call, peak, build=None, compile_=None, fn=None, translate=None):
        self.call, self.peak, self.build, self.compile = call, peak, build, compile_
        self.fn, self.translate = fn, translate

    def costs(self):
        return {"build_s": self.build.cpu if self.build else 0.0,
                "compile_s": self.compile.cpu if self.compile else 0.0}


def static_runner(loss_fn, params, shapes) -> Runner:
    """Placeholders of ``shapes`` (X, Y and the mask if any), parameters, loss and gradients, compiled."""
    with Clock() as build:
        xs = [placeholder(s, name=n) for s, n in zip(shapes, ("X", "Y", "M"))]
        ps = [parameter(p, name=n) for p, n in zip(params, PARAM_NAMES)]
        loss = loss_fn(*xs, *ps)
        grads = sg_grad(loss, ps)
    with Clock() as compiling:
        fn = sg_compile([loss] + grads, inputs=xs)

    def peak(*feeds):
        per_call = _peak_bytes(lambda: fn(*feeds), collect=False)
        # The plan for these shapes allocated its workspace when it was built and keeps it: it counts too.
        memory = getattr(fn.program, "memory", None)
        return per_call + (memory.workspace_bytes if memory is not None else 0)
    return Runner(fn, peak, build, compiling, fn=fn)


def eager_runner(loss_fn, params) -> Runner:
    ps = [eager.tensor(p, requires_grad=True) for p in params]

    def call(*feeds):
        loss = loss_fn(*[eager.tensor(a, copy=False) for a in feeds], *ps)
        loss.backward()
        grads = [p.grad for p in ps]
        for p in ps:
            p.grad = None
        return [np.asarray(loss.value)] + grads
    return Runner(call, lambda *feeds: _peak_bytes(lambda: call(*feeds), collect=False))


def torch_runner(loss_fn, params, feeds, torch) -> Runner:
    """PyTorch's eager loop for feeds of these shapes: the eager tape of one run, translated op by op (the
    translation is this study's way of running one model function in torch, not a cost torch users pay:
    it is reported apart, as ``translate``)."""
    with Clock() as translating:
        program, constants, loss_slot = torch_program(loss_fn, params, feeds, torch)
    ps = [torch.tensor(p, requires_grad=True) for p in params]

    def call(*feeds):
        loss = replay(program, constants, loss_slot, feeds, ps, torch)
        loss.backward()
        grads = [p.grad.numpy() for p in ps]
        for p in ps:
            p.grad = None
        return [loss.detach().numpy()] + grads

    def peak(*feeds):
        return torch_saved_bytes(lambda: replay(program, constants, loss_slot, feeds, ps, torch), torch, feeds, ps)
    return Runner(call, peak, translate=translating)


def torch_saved_bytes(forward, torch, feeds, params):
    """Bytes of the tensors torch autograd saves for the backward pass during ``forward()`` (its tape), each
    storage once, the feeds' and parameters' own left out. torch allocates in C++, out of tracemalloc's
    sight; what autograd keeps is what grows with the sequence length, and the tape a peak is made of."""
    own = {p.untyped_storage().data_ptr() for p in params}
    sizes = {}

    def pack(t):
        storage = t.untyped_storage()
        sizes[storage.data_ptr()] = storage.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    del loss
    own.update(a.__array_interface__["data"][0] for a in feeds)
    return int(sum(n for ptr, n in sizes.items() if ptr not in own))


# ------------------------------------------------------------------ a time limit for unrolled compiles
class TimedOut(BaseException):
    """A build and compile that took longer than its time limit (a BaseException, as KeyboardInterrupt is, so
    that no `except Exception` on the way swallows it)."""


@contextlib.contextmanager
def time_limit(seconds, retry=0.25):
    """Raise TimedOut in this block after ``seconds`` of wall-clock time (None: no limit). Needs SIGALRM and
    the main thread; elsewhere the block runs without a limit.

    Where Python cannot pass an exception on (a finalizer, a garbage collection callback) it only prints it,
    so each TimedOut re-arms the timer: ``retry`` seconds later the block is interrupted again."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not seconds or not usable:
        yield
        return
    active, fired = [True], [False]

    def expire(signum, frame):
        if active[0]:
            fired[0] = True
            signal.setitimer(signal.ITIMER_REAL, retry)
            raise TimedOut(f"over {seconds:g} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
        if fired[0]:        # (every raise was swallowed and the block finished before the next one)
            raise TimedOut(f"over {seconds:g} s")
    finally:
        active[0] = False           # first: from here on a late signal does nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
