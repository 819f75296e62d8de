"""DataParallel: one training step split by rows over the workers of a Dask cluster.

The driver (this process) compiles the loss and its gradients into one function, ships it to each worker
once as the bytes of its ``sg.save`` file, and keeps the optimizer. A step sends each worker the parameter
values that changed since it last saw them and its shard of the batch (or, in ``fit``, which rows of the
chunks it already holds), gets back the shard's loss and gradients, combines them, applies the optimizer's
update here, and starts over. Nothing is applied before every shard is back, so a step that loses a
worker is simply run again on the workers that remain.
"""
from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from concurrent.futures import CancelledError

import numpy as np

from ..autodiff import grad
from ..compiler import compile
from ..data import fit as fit_batches
from ..tensor import Tensor
from . import chunks, worker

REDUCTIONS = ("mean", "sum")


def _distributed():
    try:
        import distributed
    except ImportError as err:
        raise ImportError("staticgrad.distributed runs on Dask's distributed scheduler, which is not installed: "
                          "pip install 'dask[distributed]' (or 'staticgrad[distributed]')") from err
    return distributed


class WorkerLost(Exception):
    """Workers left (or lost what a step needed) before their shards came back. ``gone``: whether they are
    left out when the step is run again (not when they only need every parameter value sent again)."""

    def __init__(self, workers, reason, gone=True):
        self.workers, self.gone = set(workers), gone
        super().__init__(f"worker(s) {', '.join(sorted(self.workers))} {reason}")


class Traffic:
    """Payload bytes since the DataParallel was made: ``shipped`` the function's file (once per worker),
    ``sent`` parameter values and shards of a step's batch, ``received`` the losses and gradients; ``steps``
    the steps applied. Dask's own messages (task descriptions, heartbeats) are not counted."""

    def __init__(self):
        self.shipped = self.sent = self.received = self.steps = 0

    def per_step(self) -> dict:
        steps = max(self.steps, 1)
        return {"sent": self.sent / steps, "received": self.received / steps}

    def __repr__(self):
        return (f"<Traffic {self.steps} steps: {self.shipped:,} bytes shipped, {self.sent:,} sent, "
                f"{self.received:,} received>")


def _is_shard(job) -> bool:
    # a shard of a batch in memory is its arrays; a job of fit's is (chunk, start, stop, futures) pieces
    return isinstance(job[0], np.ndarray)


def _nbytes(value) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    return sum(np.asarray(v).nbytes for v in value)


class _Peer:
    """The driver's record of one worker: its copy of the function's file (a future), which parameter
    arrays (by identity) it holds the values of (None for one it may not hold), and since which step
    (``base``, -1: the values in the file, or none assumed)."""

    def __init__(self, graph, held):
        self.graph, self.held, self.base, self.pending = graph, list(held), -1, None

    def changed(self, params) -> dict:
        return {k: p.value for k, (p, held) in enumerate(zip(params, self.held)) if p.value is not held}


class DataParallel:
    """Train ``loss`` over ``inputs`` (placeholders whose first axis is the batch) with ``optimizer`` on the
    workers of ``client`` (a ``distributed.Client``).

    ``reduction`` says how the loss depends on the batch's rows: ``"mean"`` (the default) for a mean over
    them plus anything that does not depend on the batch, as ``nn.softmax_cross_entropy``, ``nn.mse`` and
    ``sg.mean`` give, so the shards' gradients are averaged weighted by their rows; ``"sum"`` for a sum over
    them, so they are added. staticgrad cannot tell which from the graph: any other dependence on the batch
    (batch statistics, say) makes the combined gradient differ from the whole batch's. ``retries``: how many
    times one step is run again after losing workers before giving up.

    The parameters stay the driver's: read them, checkpoint them or change the learning rate between steps
    as in one process. A worker is sent the arrays that are not the ones it was last sent: assign a new
    value (``p.value = ...``) rather than writing into the array a parameter holds. ``traffic`` counts the
    bytes sent and received, ``timings`` where the driver's time went, ``redone`` the steps run again.
    """

    poll_seconds = 0.5         # how often a waiting step asks the scheduler whether its workers are still there

    def __init__(self, loss, inputs, optimizer, client, reduction="mean", retries=3):
        self._dd = _distributed()
        if reduction not in REDUCTIONS:
            raise ValueError(f"DataParallel: reduction must be 'mean' or 'sum', got {reduction!r}")
        if not isinstance(loss, Tensor) or loss.shape != ():
            raise ValueError(f"DataParallel: loss must be a scalar tensor, got {loss!r:.120}")
        if not callable(getattr(optimizer, "step", None)) or not hasattr(optimizer, "params"):
            raise TypeError(f"DataParallel: expected a staticgrad.optim optimizer, got {type(optimizer).__name__}")
        self.inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        for x in self.inputs:
            if isinstance(x, Tensor) and x.op == "placeholder" and x.shape[:1] != (None,):
                raise ValueError(f"DataParallel: input {x.label()!r} has shape {x.shape}: the first axis of every "
                                 f"input is the batch, split over the workers, so it must be None (any size)")
        self.optimizer, self.client, self.reduction, self.retries = optimizer, client, reduction, int(retries)
        self.function = compile([loss, *grad(loss, optimizer.params)], inputs=self.inputs)
        if self.function.ir.updates:
            raise ValueError("DataParallel: the loss updates state of its own (batch norm's running statistics, "
                             "random keys): each worker would update its own copy, apart from the driver's")
        self._params = self.function.parameters()
        self._blob = worker.to_bytes(self.function)
        self._shipped = [p.value for p in self._params]       # the values inside the file
        self.model_id = f"staticgrad-{uuid.uuid4().hex}"
        self._peers, self._attempt, self._placement = {}, [], None
        self._seq = itertools.count()
        self.traffic = Traffic()
        self.redone = 0            # steps run again after losing a worker
        # Seconds the driver spent sending, waiting for the shards, receiving their results, and combining
        # them and updating; "shard": the slowest shard's own call on its worker, step by step (of the wait).
        self.timings = dict.fromkeys(("send", "wait", "receive", "update", "shard"), 0.0)

    def __repr__(self):
        return f"<DataParallel {self.model_id} on {len(self._peers)} workers, {self.traffic.steps} steps>"

    # ----------------------------------------------------------------- steps
    def step(self, *batch) -> float:
        """One training step on ``batch`` (one array per input, in ``inputs`` order), its rows split evenly
        over the workers: returns the batch's loss; the parameters then hold the updated values."""
        arrays = self._batch(batch)
        n = len(arrays[0])

        def jobs(workers):
            return {w: [a[lo:hi] for a in arrays]
                    for w, (lo, hi) in zip(workers, chunks.split_rows(n, len(workers))) if hi > lo}
        return self._run(jobs)

    def fit(self, X, y=None, batch_size=32, epochs=1, progress=None, validate=None, log=None):
        """Train on dask arrays where they lie: ``X`` (or a tuple of arrays, one per input) and ``y`` are
        persisted on the workers, chunk by chunk along the rows, and each step's batch takes a proportional
        share of every chunk (:func:`staticgrad.distributed.chunks.batch_spans`), run by the worker holding
        it; the driver never reads the data. The progress bar, ``validate``, ``log`` and the returned
        history are :func:`staticgrad.data.fit`'s.
        """
        arrays = list(X) if isinstance(X, (tuple, list)) else [X]
        arrays = chunks.as_row_chunks(arrays + ([] if y is None else [y]), len(self.inputs))
        place = self._placement
        if place is None or not place.holds(arrays):       # (fit called again on the same data: kept)
            place = self._placement = chunks.Placement(self.client, arrays)
        epoch = chunks.batch_spans(place.rows, batch_size)

        def jobs(workers, k):
            found = place.by_worker(epoch[k])
            gone = set(found) - set(workers)
            if gone:
                raise WorkerLost(gone, "holding data left the cluster")
            return found

        def step(k):
            return self._run(lambda workers: jobs(workers, k), relocate=place.locate)
        return fit_batches(step, range(len(epoch)), epochs=epochs, progress=progress, validate=validate, log=log)

    def _batch(self, batch):
        if len(batch) != len(self.inputs):
            raise ValueError(f"DataParallel.step: expected {len(self.inputs)} arrays (one per input), got {len(batch)}")
        arrays = self.function.check_feeds(*batch)        # (a bad feed is refused here, before any is sent)
        if len({len(a) for a in arrays}) != 1 or not len(arrays[0]):
            raise ValueError("DataParallel.step: the arrays must share a first axis of at least one row, got shapes "
                             + ", ".join(str(a.shape) for a in arrays))
        return arrays

    # ----------------------------------------------------------------- one step, run again if workers leave
    def _run(self, jobs, relocate=None):
        """Run a step: ``jobs(workers)`` gives {worker: its shard (a list of arrays), or its pieces of the
        chunks it holds (a list of (chunk, start, stop, [chunk futures]))}."""
        seq, excluded = next(self._seq), set()
        for _ in range(self.retries + 1):
            workers = [w for w in sorted(self.client.nthreads()) if w not in excluded]
            if not workers:
                raise RuntimeError("DataParallel: no workers left in the cluster")
            self._attempt = []
            try:
                started = time.perf_counter()
                tasks = self._dispatch(jobs(workers), seq)
                self.timings["send"] += time.perf_counter() - started
                results = self._collect(tasks)
            except WorkerLost as lost:
                excluded |= lost.workers if lost.gone else set()
                self._recover(excluded)
                if relocate is not None:
                    relocate(exclude=excluded)
                continue
            except BaseException:
                self._cancel()          # (a shard's own error: the others' work is moot)
                raise
            return self._apply(results, seq)
        raise RuntimeError(f"DataParallel: the step was given up after {self.retries} retries: workers kept "
                           f"leaving ({', '.join(sorted(excluded))})")

    def _payload(self, w, job) -> dict:
        """What worker ``w`` must be sent for ``job``, by name: the function's file the first time, the
        parameter values it does not hold, its shard of the batch (a job of pieces has none)."""
        peer = self._peers.setdefault(w, _Peer(None, self._shipped))
        payload = {}
        if peer.graph is None:
            payload["function"] = self._blob
            self.traffic.shipped += len(self._blob)
        changed = peer.changed(self._params)
        if changed:
            payload["params"] = changed
            self.traffic.sent += _nbytes(changed)
        if _is_shard(job):
            payload["shard"] = job
            self.traffic.sent += _nbytes(job)
        peer.pending = [p.value for p in self._params]
        return payload

    def _scatter(self, payloads, token) -> dict:
        """{worker: {name: future}}: every worker's payload sent at once, straight to it."""
        keyed = {w: {f"{self.model_id}-{name}-{token}-{k}": v for name, v in p.items()}
                 for k, (w, p) in enumerate(payloads.items()) if p}
        items = list(keyed.items())

        async def send():
            return await asyncio.gather(*(self.client.scatter(p, workers=[w], direct=True) for w, p in items),
                                        return_exceptions=True)
        sent = dict(zip(keyed, self.client.sync(send))) if items else {}
        failed = {w: err for w, err in sent.items() if isinstance(err, BaseException)}
        for err in failed.values():
            if not isinstance(err, (OSError, TimeoutError)):     # (CommClosedError is an OSError)
                raise err
        if failed:
            raise WorkerLost(failed, f"could not be reached: {next(iter(failed.values()))}")
        for futures in sent.values():       # (what this step sent; a worker's copy of the function stays)
            self._attempt += [f for key, f in futures.items() if "-function-" not in key]
        return {w: {name: sent[w][key] for name, key in zip(payloads[w], keyed[w])} if w in sent else {}
                for w in payloads}

    def _dispatch(self, jobs, seq) -> dict:
        """{worker: the future of its task} for ``jobs``, the payloads sent first."""
        token = uuid.uuid4().hex[:12]
        sent = self._scatter({w: self._payload(w, job) for w, job in jobs.items()}, token)
        tasks = {}
        for k, (w, job) in enumerate(jobs.items()):
            peer, mine = self._peers[w], sent[w]
            peer.graph = mine.get("function", peer.graph)
            if _is_shard(job):
                task, args = worker.shard_gradients, (mine["shard"],)
            else:
                spans = [(start, stop) for _, start, stop, _ in job]
                task, args = worker.piece_gradients, (spans, *[f for *_, futures in job for f in futures])
            tasks[w] = self.client.submit(task, self.model_id, peer.graph, seq, peer.base, mine.get("params"),
                                          *args, key=f"{self.model_id}-grads-{token}-{k}", workers=[w], pure=False)
        self._attempt += list(tasks.values())
        return tasks

    def _collect(self, tasks) -> list:
        """Each task's result, in order, once all are back; WorkerLost if a worker left first."""
        futures, started = list(tasks.values()), time.perf_counter()
        while True:
            try:
                self._dd.wait(futures, timeout=self.poll_seconds)
                break
            except (TimeoutError, CancelledError):
                # (the scheduler cancels a task whose scattered inputs died with their worker)
                alive = set(self.client.nthreads())
                gone = [w for w, f in tasks.items() if w not in alive or f.status in ("lost", "cancelled")]
                if gone:
                    raise WorkerLost(gone, "left during the step") from None
        for w, f in tasks.items():
            if f.status == "error" and not isinstance(f.exception(), self._dd.KilledWorker):
                f.result()             # the shard's own error (a feed that does not fit, say): raised as it is
            if f.status != "finished":
                raise WorkerLost([w], f"lost its shard ({f.status})")
        waited = time.perf_counter()
        self.timings["wait"] += waited - started
        try:
            results = self.client.gather(futures, direct=True)
        except (OSError, CancelledError) as err:
            raise WorkerLost(tasks, f"lost results: {err}") from err
        self.timings["receive"] += time.perf_counter() - waited
        lost = [w for w, r in zip(tasks, results) if r is None]
        if lost:
            raise WorkerLost(lost, "no longer held the values its step was sent against", gone=False)
        self.timings["shard"] += max(r[1] for r in results)
        return [[r[0], *r[2:]] for r in results]

    def _cancel(self):
        """Cancel what the attempt sent and submitted; no worker is taken to hold what it was sent."""
        self.client.cancel(self._attempt)
        self._attempt = []
        for peer in self._peers.values():
            peer.pending = None

    def _recover(self, excluded):
        """Forget what the failed attempt sent: its futures, the workers gone, and what the others hold
        (a task cancelled before it ran never took its values), so the next attempt sends every value."""
        self._cancel()
        self.redone += 1
        for w, peer in list(self._peers.items()):
            if w in excluded or peer.graph is None or peer.graph.status != "finished":
                del self._peers[w]
            else:
                peer.held, peer.base, peer.pending = [None] * len(self._params), -1, None

    def _apply(self, results, seq) -> float:
        """Combine the shards' losses and gradients, and update the parameters with the optimizer."""
        started = time.perf_counter()
        rows = [r[0] for r in results]
        total = sum(rows)
        weights = [n / total for n in rows] if self.reduction == "mean" else [1.0] * len(rows)
        combined = []
        for k in range(1, len(results[0])):
            value = results[0][k] * weights[0]
            for r, w in zip(results[1:], weights[1:]):
                value = value + r[k] * w
            combined.append(value)
        self.traffic.received += sum(_nbytes(r[1:]) for r in results)
        params = self.optimizer.params
        for p, g in zip(params, combined[1:]):
            p.grad = g
        try:
            self.optimizer.step()
        finally:
            for p in params:
                p.grad = None
        for peer in self._peers.values():
            if peer.pending is not None:
                peer.held, peer.base, peer.pending = peer.pending, seq, None
        self._attempt = []
        # A worker that joins from now on gets every value with its first step: the driver stops keeping
        # the arrays the file was written from.
        self._shipped = [None] * len(self._params)
        self.traffic.steps += 1
        self.timings["update"] += time.perf_counter() - started
        return float(combined[0])

    # ----------------------------------------------------------------- the end
    def close(self):
        """Drop the function from every worker's memory and release what the driver holds there."""
        self.client.run(worker.forget, self.model_id)
        self._peers.clear()
        self._placement = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
