"""Data that lives on the workers: dask arrays persisted there, chunk by chunk, and which rows of which
chunks make each step's batch.

Nothing here reads the data: the driver knows each chunk's number of rows (the dask array's ``chunks``)
and which worker holds it (the scheduler's ``who_has``); the rows themselves stay where they are.
"""
from __future__ import annotations

import math


def split_rows(n, parts) -> list:
    """``parts`` contiguous (start, stop) ranges covering range(n), as equal as whole rows allow."""
    return [(k * n // parts, (k + 1) * n // parts) for k in range(parts)]


def batch_spans(chunk_rows, batch_size) -> list:
    """The batches of one epoch over chunks of ``chunk_rows`` rows: a list, per batch, of (chunk index,
    start, stop) pieces, each batch a proportional share of every chunk.

    With N rows in all, an epoch has ceil(N / batch_size) batches, and batch k takes rows
    [floor(k B L / N), floor((k + 1) B L / N)) of a chunk of L rows (the last batch up to its end). Every row
    comes once an epoch, each chunk is read in order, and a batch has ``batch_size`` rows give or take one
    per chunk (the last one what is left): every worker holding data works on every step, in proportion
    to the data it holds.
    """
    rows = [int(n) for n in chunk_rows]
    total, batch_size = sum(rows), int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if total == 0:
        raise ValueError("the arrays have no rows")
    spans = []
    for k in range(math.ceil(total / batch_size)):
        first, end = k * batch_size, min((k + 1) * batch_size, total)
        pieces = [(j, first * n // total, end * n // total) for j, n in enumerate(rows)]
        spans.append([(j, a, b) for j, a, b in pieces if b > a])
    return spans


def _first_block_keys(keys, ndim) -> list:
    """The key of each block along axis 0 (the arrays have one block along every other axis)."""
    found = []
    for block in keys:
        for _ in range(ndim - 1):
            block = block[0]
        found.append(block)
    return found


def as_row_chunks(arrays, n_inputs):
    """``arrays`` (dask arrays, one per input) with the same row chunks and a single block along every
    other axis: the first array's row chunks are kept, the others rechunked to them (on the cluster)."""
    import dask.array as da
    if len(arrays) != n_inputs:
        raise ValueError(f"fit: the loss has {n_inputs} inputs, got {len(arrays)} arrays")
    for k, a in enumerate(arrays):
        if not isinstance(a, da.Array):
            raise TypeError(f"fit: array {k} is a {type(a).__name__}, expected a dask array (for numpy arrays "
                            f"in memory call step(...) on batches, or wrap them with dask.array.from_array)")
        if a.ndim == 0:
            raise ValueError(f"fit: array {k} is a scalar; every array needs a first axis of rows")
        if any(math.isnan(c) for c in a.chunks[0]):
            raise ValueError(f"fit: array {k} has chunks of unknown size; call its compute_chunk_sizes() first")
    rows = arrays[0].chunks[0]
    if any(a.shape[0] != arrays[0].shape[0] for a in arrays):
        raise ValueError("fit: the arrays must have the same number of rows, got "
                         + ", ".join(str(a.shape[0]) for a in arrays))
    return [a.rechunk({0: rows, **{i: -1 for i in range(1, a.ndim)}}) for a in arrays]


class Placement:
    """Where each chunk of the persisted arrays is: chunk j's rows are run by ``holder[j]``, a worker holding
    the first input's chunk j (the largest, as a rule; of several holding a copy, the one given the fewest
    rows so far). The other inputs' chunks are copied there once, worker to worker, if they were persisted
    elsewhere, so that a step reads only what its worker holds.

    ``futures[k][j]`` is the future of input k's chunk j as persisted, ``local[k][j]`` one held by
    ``holder[j]``.
    """

    def __init__(self, client, arrays):
        from distributed import futures_of
        self.client = client
        self.arrays = client.persist(arrays)
        self.rows = [int(n) for n in self.arrays[0].chunks[0]]
        self.futures = []
        for a in self.arrays:
            by_key = {f.key: f for f in futures_of(a)}
            self.futures.append([by_key[key] for key in _first_block_keys(a.__dask_keys__(), a.ndim)])
        self.holder, self.local = [], [list(per) for per in self.futures]
        self.locate()

    def locate(self, exclude=()):
        """Ask the scheduler where the chunks are (after waiting for any being recomputed), and bring the
        other inputs' chunks next to the first's."""
        from distributed import wait
        wait([f for per in self.futures for f in per])
        who_has = self.client.who_has(self.futures[0])
        load, self.holder = {}, []
        for f, n in zip(self.futures[0], self.rows):
            places = sorted(w for w in who_has.get(f.key, ()) if w not in exclude)
            if not places:
                raise RuntimeError(f"no worker holds chunk {f.key!r} of the data")
            best = min(places, key=lambda w: load.get(w, 0))
            load[best] = load.get(best, 0) + n
            self.holder.append(best)
        self.local[0] = list(self.futures[0])
        for k in range(1, len(self.futures)):
            self.local[k] = self._beside(self.futures[k])

    def _beside(self, futures) -> list:
        from distributed import wait

        from .worker import hold
        who_has = self.client.who_has(futures)
        local = [f if w in who_has.get(f.key, ()) else self.client.submit(hold, f, workers=[w], pure=False)
                 for f, w in zip(futures, self.holder)]
        wait(local)
        return local

    def holds(self, arrays) -> bool:
        """Whether these are the arrays placed here, every chunk still in memory where it was found."""
        return ([a.name for a in arrays] == [a.name for a in self.arrays]
                and all(f.status == "finished" for per in self.futures + self.local for f in per))

    def by_worker(self, pieces) -> dict:
        """{worker: [(chunk index, start, stop, [each input's chunk there]), ...]} for one batch's pieces."""
        found = {}
        for j, start, stop in pieces:
            found.setdefault(self.holder[j], []).append((j, start, stop, [per[j] for per in self.local]))
        return found
