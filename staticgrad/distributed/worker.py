"""What runs on a Dask worker: the shipped function loaded once per process, then shards run on it.

Every task of :mod:`staticgrad.distributed` calls a function of this module by name, and every argument it
gets is a number, a string, bytes, or numpy arrays (in lists and dicts): no staticgrad object is pickled.
The function arrives as the bytes of an ``sg.save`` file, is loaded (with every check ``sg.load`` makes on
an untrusted file) the first time a task of that model runs in the process, and is kept in ``_MODELS``
under the model's id, with the parameter values it last received.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time

import numpy as np

from ..io import load, save

_MODELS = {}                   # model id -> _Model, in this process
_LOCK = threading.Lock()       # guards _MODELS; each model has a lock of its own for its calls


def to_bytes(fn) -> bytes:
    """The ``sg.save`` file of ``fn``, as bytes."""
    with tempfile.TemporaryDirectory(prefix="staticgrad-ship-") as folder:
        path = save(fn, os.path.join(folder, "function.npz"))
        with open(path, "rb") as fh:
            return fh.read()


def from_bytes(blob: bytes):
    """The function saved in ``blob`` (an ``sg.save`` file's bytes), loaded as ``sg.load`` loads a file."""
    with tempfile.TemporaryDirectory(prefix="staticgrad-ship-") as folder:
        path = os.path.join(folder, "function.npz")
        with open(path, "wb") as fh:
            fh.write(blob)
        return load(path)


class _Model:
    def __init__(self, blob):
        self.fn = from_bytes(blob)
        self.params = self.fn.parameters()
        self.lock = threading.Lock()
        self.seq = -1          # the step whose parameter values were set last

    def set_params(self, seq, base, values):
        """Take ``values`` ({index in fn.parameters(): array}) sent for step ``seq``, the changes since the
        values of step ``base`` (-1: those in the file). False, and nothing set, for a task of an older step
        (one the driver cancelled but that ran anyway), which must not overwrite newer values, and when this
        process does not hold the values of step ``base`` (it forgot the model since)."""
        if seq < self.seq or self.seq < base:
            return False
        for index, value in (values or {}).items():
            param = self.params[index]
            if (isinstance(value, np.ndarray) and value.dtype == param.dtype and value.shape == param.shape
                    and value.flags.c_contiguous):
                param._value = value      # (it came for this parameter alone: no copy of megabytes a step)
            else:
                param.value = value
        self.seq = seq
        return True


def model(model_id, blob) -> _Model:
    """The model ``model_id`` of this process, loaded from ``blob`` the first time."""
    with _LOCK:
        found = _MODELS.get(model_id)
        if found is None:
            found = _MODELS[model_id] = _Model(blob)
        return found


def forget(model_id) -> bool:
    """Drop the model from this process (``DataParallel.close`` runs it on every worker)."""
    with _LOCK:
        return _MODELS.pop(model_id, None) is not None


def hold(value):
    """``value`` as it is: run on a worker, keeps a copy of a chunk there (see ``chunks.Placement``)."""
    return value


def shard_gradients(model_id, blob, seq, base, params, arrays):
    """The loss and the gradients on one shard: ``arrays`` are the shard's rows of each input, in the
    function's input order; ``params`` the parameter values that changed since step ``base`` ({index:
    array}, or None). Returns [rows, seconds the call took, loss, gradient, ...], or None when the values
    this process holds are not those of step ``base`` (the driver then sends them all)."""
    m = model(model_id, blob)
    with m.lock:
        if not m.set_params(seq, base, params):
            return None
        started = time.perf_counter()
        outputs = m.fn(*arrays)
        seconds = time.perf_counter() - started
    return [len(arrays[0]), seconds] + [np.asarray(v) for v in outputs]


def piece_gradients(model_id, blob, seq, base, params, spans, *chunks):
    """As :func:`shard_gradients`, on the rows of chunks this worker holds: ``spans`` lists, per piece,
    (first row, end row) within its chunk, and ``chunks`` holds each piece's chunk of every input in
    turn (input 0 of piece 0, input 1 of piece 0, ..., input 0 of piece 1, ...)."""
    per = len(chunks) // len(spans)
    inputs = []
    for k in range(per):
        rows = [chunks[j * per + k][start:stop] for j, (start, stop) in enumerate(spans)]
        inputs.append(rows[0] if len(rows) == 1 else np.concatenate(rows))
    return shard_gradients(model_id, blob, seq, base, params, inputs)

