"""PyTorch eager as a third column of the study: one eager forward's tape replayed op by op with torch calls.

Only this module touches torch, and only when a study asks for it: torch is optional (a test-only peer).
"""
from __future__ import annotations

import contextlib

import numpy as np

from .. import eager
from ..ops.registry import REGISTRY
from .modes import Clock, Mode


class Unsupported(Exception):
    """An op the PyTorch replay has no translation for."""


def torch_program(model_fn, params, batch, torch):
    """Record one eager forward of ``model_fn`` and translate its tape op by op into torch calls.

    Returns (program, constants, loss slot): slots 0.. hold the batch arrays, then the parameters, then
    the constants, then one result per program step, which is what :func:`torch_mode` replays.
    """
    xs = [eager.tensor(a, copy=False) for a in batch]
    ps = [eager.tensor(p, requires_grad=True) for p in params]
    with eager.trace() as found:
        loss = model_fn(*xs, *ps)
    slot = {t.id: ("slot", k) for k, t in enumerate(xs + ps)}
    constants, steps = [], []
    for t in found:
        twin = REGISTRY[t.op].torch
        if twin is None:
            raise Unsupported(f"no torch translation for op {t.op!r} (made at {t.source})")
        refs = []
        for x in t.inputs:
            if x.id in slot:
                refs.append(slot[x.id])
            else:
                value = x._value if x._value is not None else eager._static_value(x, t.op)
                refs.append(("const", len(constants)))
                constants.append(torch.as_tensor(np.array(value)))
        slot[t.id] = ("step", len(steps))
        try:
            steps.append((twin(torch, **t.attrs), refs))
        except NotImplementedError as err:
            raise Unsupported(f"{t.op} (made at {t.source}): {err}") from None
    first_const = len(xs) + len(ps)
    first_step = first_const + len(constants)

    def where(ref):
        kind, k = ref
        return {"slot": k, "const": first_const + k, "step": first_step + k}[kind]

    program = [(fn, [where(r) for r in refs]) for fn, refs in steps]
    return program, constants, where(slot[loss.id])


def replay(program, constants, loss_slot, batch, params, torch):
    """Run a :func:`torch_program` on ``batch`` (numpy arrays) and ``params`` (torch tensors): the loss."""
    env = [torch.from_numpy(a) for a in batch] + params + constants
    for fn, refs in program:
        env.append(fn(*[env[i] for i in refs]))
    return env[loss_slot]


def _autograd_nodes(loss):
    """Backward functions in torch's graph of ``loss`` (AccumulateGrad excluded), counted without recursion."""
    seen, stack, count = set(), [loss.grad_fn], 0
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if type(fn).__name__ != "AccumulateGrad":
            count += 1
        stack.extend(f for f, _ in fn.next_functions)
    return count


def torch_mode(model_fn, params, batches, lr) -> Mode:
    import torch
    with Clock() as translating:
        program, constants, loss_slot = torch_program(model_fn, params, batches[0], torch)
    ps = [torch.tensor(p, requires_grad=True) for p in params]

    def forward(batch):
        return replay(program, constants, loss_slot, batch, ps, torch)

    def step(batch):
        loss = forward(batch)
        loss.backward()
        with torch.no_grad():
            for p in ps:
                p -= lr * p.grad
                p.grad = None
        return loss.item()

    try:
        forward(batches[0])      # a translation that torch cannot run is found here, before any timing
    except Exception as err:
        raise Unsupported(f"the torch replay failed: {type(err).__name__}: {err}") from err

    def measure():
        loss = forward(batches[0])
        return {"nodes_by_role": {"forward": len(program), "backward": _autograd_nodes(loss), "update": 2 * len(ps)},
                "peak_bytes": None,      # torch allocates in C++, out of tracemalloc's sight
                "translate_s": translating.cpu, "threads": torch.get_num_threads(),
                "how": "one forward's eager tape replayed op by op with torch functions; torch autograd backward"}
    return Mode(None, None, step, measure)


def torch_wanted(torch, result):
    """Whether the torch column runs: ``torch`` False never, True always (failing without torch), None when
    installed; a skip is noted in ``result``."""
    if torch is False:
        return False
    try:
        import torch as _  # noqa: F401
    except ImportError:
        if torch:
            raise
        result["torch_skipped"] = "torch is not installed"
        return False
    return True


@contextlib.contextmanager
def torch_threads(n):
    """Run torch on ``n`` threads, like the numpy kernels of the example: on a shared machine torch's
    worker threads spin against other processes and small ops slow down a hundredfold."""
    import torch
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
