"""Data-parallel training on a Dask cluster (``pip install 'dask[distributed]'``; imported on demand).

``DataParallel(loss, inputs, optimizer, client)`` compiles the loss and its gradients once and ships the
compiled function to every worker of the ``distributed.Client`` as staticgrad's own file format (the bytes
``sg.save`` writes, loaded there with ``sg.load``'s checks: nothing is pickled but numpy arrays and bytes).
``.step(*batch)`` splits a batch in memory by rows over the workers; ``.fit(X, y, batch_size, epochs)``
trains on dask arrays persisted on the workers, each worker reading the chunks it holds. The workers return
each shard's loss and gradients, the driver combines them (weighted by rows for a mean loss) and applies the
optimizer's update, so after every step the parameters are those of the same step run in one process, up
to rounding. A step that loses a worker is run again on the workers left; nothing is applied twice.

Modules: ``parallel`` (DataParallel, on the driver), ``worker`` (the functions tasks run on the workers),
``chunks`` (where the data's chunks are, and which rows of them make each batch). Dask is imported only
when a DataParallel is made, so this package imports without it.
"""
from .chunks import batch_spans, split_rows
from .parallel import DataParallel, Traffic, WorkerLost

__all__ = ["DataParallel", "Traffic", "WorkerLost", "batch_spans", "split_rows"]
