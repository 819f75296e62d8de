"""The styles of the static vs dynamic study as timed steps: compiled and eager SGD, and what they share.

A :class:`Mode` holds one style's one-off costs (build, compile), its ``step(batch) -> loss`` and a
``measure()`` for what is not timing; :func:`static_mode` and :func:`eager_mode` make the two staticgrad
styles (the PyTorch one is in :mod:`staticgrad.study.torch`), :func:`interleaved` times them side by side.
"""
from __future__ import annotations

import gc
import statistics
import time
import tracemalloc

import numpy as np

from .. import eager
from ..autodiff import grad as sg_grad
from ..compiler import compile as sg_compile
from ..tensor import LEAVES, parameter, placeholder

LEAF_OPS = LEAVES + (eager.LEAF_OP,)


def _placeholder_shapes(batches):
    """Each input's shape, with None where batches disagree (a last, smaller batch)."""
    shapes = []
    for k, first in enumerate(batches[0]):
        dims = list(first.shape)
        for b in batches[1:]:
            if b[k].ndim != first.ndim:
                raise ValueError(f"compare: input {k} changes rank between batches")
            dims = [d if d == e else None for d, e in zip(dims, b[k].shape)]
        shapes.append(tuple(dims))
    return shapes


def _peak_bytes(fn, collect=True):
    """Peak bytes allocated (and traced by tracemalloc, which sees numpy's buffers) while ``fn`` runs; first a
    collection, unless the caller did one (it takes a good part of a second in a process that loaded torch)."""
    if collect:
        gc.collect()
    tracemalloc.start()
    try:
        fn()
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


# Times are CPU seconds of this process (time.process_time), wall-clock seconds beside them: on a shared
# machine a long step is often preempted and waits for a core, which would inflate the slower style's
# wall-clock median far more than the faster one's. Kernels run on one thread (see the example), so CPU
# time is the work done.
CLOCK = "process_time"


class Clock:
    """Measures CPU and wall-clock seconds of a block: ``with Clock() as c: ...; c.cpu, c.wall``."""

    def __enter__(self):
        self._cpu, self._wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu, self.wall = time.process_time() - self._cpu, time.perf_counter() - self._wall


class Mode:
    """One style under study: its one-off costs, its SGD ``step(batch) -> loss``, and ``measure()``,
    which returns what is not timing (nodes per step, peak memory) from extra, untimed steps."""

    def __init__(self, build, compile_, step, measure):
        self.build, self.compile, self.step, self.measure = build, compile_, step, measure
        self.times, self.wall_times, self.losses = [], [], []

    def summary(self):
        def spent(clock, kind):
            return getattr(clock, kind) if clock else 0.0
        out = {"build_s": spent(self.build, "cpu"), "compile_s": spent(self.compile, "cpu"),
               "step_s": statistics.median(self.times), "first_step_s": self.times[0], "step_times_s": self.times,
               "loss_first": self.losses[0], "loss_last": self.losses[-1], "clock": CLOCK,
               "wall": {"build_s": spent(self.build, "wall"), "compile_s": spent(self.compile, "wall"),
                        "step_s": statistics.median(self.wall_times)}}
        out.update(self.measure())
        out["nodes_executed"] = sum(out["nodes_by_role"].values())
        return out


def interleaved(modes, batches):
    """Time every mode on every batch, alternating modes batch by batch (and rotating who goes first), so
    that load from other processes on a shared machine falls on all of them alike."""
    names = list(modes)
    for k, batch in enumerate(batches):
        for name in names[k % len(names):] + names[:k % len(names)]:
            mode = modes[name]
            with Clock() as clock:
                loss = mode.step(batch)
            mode.times.append(clock.cpu)
            mode.wall_times.append(clock.wall)
            mode.losses.append(float(loss))


def build_static(model_fn, params, shapes, dtypes, lr):
    """Placeholders, parameters, the loss and SGD updates for ``model_fn``."""
    xs = [placeholder(s, dtype=d, name=f"in{k}") for k, (s, d) in enumerate(zip(shapes, dtypes))]
    ps = [parameter(p, name=f"p{k}") for k, p in enumerate(params)]
    loss = model_fn(*xs, *ps)
    grads = sg_grad(loss, ps)
    return xs, ps, loss, [(p, p - lr * g) for p, g in zip(ps, grads)]


def static_mode(model_fn, params, batches, lr) -> Mode:
    shapes, dtypes = _placeholder_shapes(batches), [a.dtype for a in batches[0]]
    with Clock() as build:
        xs, ps, loss, updates = build_static(model_fn, params, shapes, dtypes, lr)
    with Clock() as compiling:
        fn = sg_compile(loss, inputs=xs, updates=updates)

    def measure():
        roles = {}
        for node in fn.ir.nodes.values():
            if node.op not in LEAF_OPS:
                roles[node.role] = roles.get(node.role, 0) + 1
        per_call = _peak_bytes(lambda: fn(*batches[0]))
        # The plan's workspace was allocated before this call (once per plan) and stays: it counts too.
        memory = getattr(fn.program, "memory", None)
        held = memory.workspace_bytes if memory is not None else 0
        return {"nodes_by_role": roles, "peak_bytes": per_call + held}
    return Mode(build, compiling, lambda batch: fn(*batch), measure)


def eager_step(model_fn, ps, batch, lr):
    """One define-by-run SGD step: forward (taping), backward, then in-place numpy updates (as
    ``p -= lr * p.grad`` under torch.no_grad)."""
    loss = model_fn(*[eager.tensor(a, copy=False) for a in batch], *ps)
    loss.backward()
    for p in ps:
        p._value -= lr * p.grad
        p.grad = None
    return loss.item()


def eager_mode(model_fn, params, batches, lr) -> Mode:
    ps = [eager.tensor(p, requires_grad=True) for p in params]

    def measure():
        # The ops of one more step, traced (a trace keeps every result alive, so it is not timed).
        xs = [eager.tensor(a, copy=False) for a in batches[0]]
        with eager.trace() as forward:
            loss = model_fn(*xs, *ps)
        with eager.trace() as backward:
            loss.backward()
        eager.zero_grad(ps)
        # The updates are numpy (p - lr * g: two ops per parameter), as the compiled step computes them.
        roles = {"forward": len(forward), "backward": len(backward), "update": 2 * len(ps)}
        del loss, forward, backward
        return {"nodes_by_role": roles, "peak_bytes": _peak_bytes(lambda: eager_step(model_fn, ps, batches[0], 0.0))}
    return Mode(None, None, lambda batch: eager_step(model_fn, ps, batch, lr), measure)


def cumulative(mode):
    """Seconds spent after each batch: one-off costs plus the running sum of step times (a Mode summary)."""
    return mode["build_s"] + mode["compile_s"] + np.cumsum(mode["step_times_s"])
