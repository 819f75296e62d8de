"""staticgrad.distributed.parallel: DataParallel against the same steps run in one process.

The cluster tests start a dask LocalCluster of two worker processes (one thread each) once for the module;
they are slow tests. The checks of arguments need dask installed but no cluster."""
import logging
import os
import sys

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.distributed import DataParallel, batch_spans

RTOL = 1e-12


def _model(seed=0, loss_kind="mean"):
    x = sg.placeholder((None, 6), name="x")
    t = sg.placeholder((None,), "int64", name="t")
    net = sg.nn.MLP([6, 16, 16, 3], seed=seed)
    logits = net(x)
    if loss_kind == "mean":
        loss = sg.nn.softmax_cross_entropy(logits, t) + 1e-3 * sg.sum(sg.square(net.layers[0].weight))
    else:                                               # a sum over the rows
        loss = sg.sum(sg.softplus(logits) * sg.reshape(sg.cast(t, "float64"), (-1, 1)))
    return x, t, net, loss


OPTIMIZERS = {"adam": lambda p: sg.optim.Adam(p, lr=0.01),
              "sgd_momentum": lambda p: sg.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)}


def _pair(client, optimizer="adam", loss_kind="mean"):
    """(single-process step, its parameters and optimizer state; DataParallel, its parameters and state),
    from two copies of the same model."""
    x, t, net, loss = _model(loss_kind=loss_kind)
    opt = OPTIMIZERS[optimizer](net.parameters())
    ref = sg.compile(loss, inputs=[x, t], updates=opt.updates(loss))
    x2, t2, net2, loss2 = _model(loss_kind=loss_kind)
    opt2 = OPTIMIZERS[optimizer](net2.parameters())
    dp = DataParallel(loss2, [x2, t2], opt2, client, reduction=loss_kind)
    return ref, opt.parameters(), dp, opt2.parameters()


def _assert_same(expected, got):
    """Each array equal to RTOL relative to its largest element. (Sharding changes only the order in which
    the rows' terms are summed: an element that is a sum cancelling to far below the others, a momentum of
    6e-6 among values of 6e-2, can differ in its last digits relative to itself.)"""
    for p, q in zip(expected, got):
        np.testing.assert_allclose(q.value, p.value, rtol=0, atol=RTOL * np.abs(p.value).max(), err_msg=p.name)


def _data(n, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 6)), rng.integers(0, 3, n)


# ------------------------------------------------------------------ arguments (dask installed, no cluster)
def test_the_arguments_are_checked_before_anything_is_sent():
    pytest.importorskip("distributed")
    x, t, net, loss = _model()
    opt = sg.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum'"):
        DataParallel(loss, [x, t], opt, None, reduction="max")
    with pytest.raises(ValueError, match="loss must be a scalar tensor"):
        DataParallel(net(x), [x, t], opt, None)
    with pytest.raises(TypeError, match="expected a staticgrad.optim optimizer"):
        DataParallel(loss, [x, t], net.parameters(), None)
    fixed = sg.placeholder((8, 6), name="fixed")
    with pytest.raises(ValueError, match="'fixed' has shape .* must be None"):
        DataParallel(sg.mean(net(fixed)), [fixed], opt, None)
    with pytest.raises(ValueError, match="updates state of its own"):
        DataParallel(sg.mean(sg.dropout(net(x), 0.5)), [x], opt, None)


def test_a_batch_that_does_not_fit_is_refused_on_the_driver():
    pytest.importorskip("distributed")
    x, t, net, loss = _model()
    dp = DataParallel(loss, [x, t], sg.optim.SGD(net.parameters(), lr=0.1), client=None)
    X, T = _data(8)
    with pytest.raises(ValueError, match="expected 2 arrays"):
        dp.step(X)
    with pytest.raises(sg.FeedError):
        dp.step(X[:, :5], T)
    with pytest.raises(ValueError, match="share a first axis"):
        dp.step(X, T[:7])


def test_without_dask_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)          # (import distributed then fails)
    x, t, net, loss = _model()
    with pytest.raises(ImportError, match=r"pip install 'dask\[distributed\]'"):
        DataParallel(loss, [x, t], sg.optim.SGD(net.parameters(), lr=0.1), None)


# ------------------------------------------------------------------ on a LocalCluster
@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None,
                                       silence_logs=logging.CRITICAL)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


@pytest.mark.slow
@pytest.mark.parametrize("optimizer, loss_kind", [("adam", "mean"), ("sgd_momentum", "mean"), ("adam", "sum")])
def test_every_step_equals_the_single_process_step(client, optimizer, loss_kind):
    ref, expected, dp, got = _pair(client, optimizer, loss_kind)
    X, T = _data(200)
    # batches of uneven sizes, one of a single row (one worker idle on that step)
    for start, stop in [(0, 64), (64, 101), (101, 102), (102, 160), (160, 200), (0, 64)]:
        want = ref(X[start:stop], T[start:stop])
        loss = dp.step(X[start:stop], T[start:stop])
        assert loss == pytest.approx(float(want), rel=RTOL, abs=0)
        _assert_same(expected, got)                # the parameters and the optimizer's state
    assert dp.redone == 0
    dp.close()


@pytest.mark.slow
def test_a_step_sends_each_worker_one_parameter_set_and_gets_one_gradient_back(client):
    _, _, dp, _ = _pair(client, "sgd_momentum")
    X, T = _data(100)
    param_bytes = sum(p.value.nbytes for p in dp.optimizer.params)
    dp.step(X, T)
    # the first step: the function's file to each worker (its parameter values inside), the batch's shards
    assert dp.traffic.shipped == 2 * len(dp._blob)
    assert dp.traffic.sent == X.nbytes + T.nbytes
    for _ in range(3):
        dp.step(X, T)
    assert dp.traffic.steps == 4
    assert dp.traffic.sent == 4 * (X.nbytes + T.nbytes) + 3 * 2 * param_bytes
    assert dp.traffic.received == 4 * 2 * (param_bytes + 8)     # each worker's gradients and its loss
    dp.close()


def _assert_fit_as_one_process(history, ref, X, T, chunk_rows, batch_size, epochs):
    """``history`` is that of the same batches run by ``ref`` in this process: batch_spans says which rows
    of which chunks make each."""
    offsets = np.cumsum([0] + list(chunk_rows))
    batches = [np.concatenate([np.arange(offsets[j] + a, offsets[j] + b) for j, a, b in pieces])
               for pieces in batch_spans(chunk_rows, batch_size)]
    want = sg.data.fit(ref, [(X[rows], T[rows]) for rows in batches], epochs=epochs, progress=False)
    np.testing.assert_allclose(history.loss, want.loss, rtol=RTOL)


@pytest.mark.slow
def test_fit_reads_the_chunks_where_they_are_persisted(client, capsys):
    da = pytest.importorskip("dask.array")
    ref, expected, dp, got = _pair(client, "sgd_momentum")
    X, T = _data(300)
    dX, dT = da.from_array(X, chunks=50), da.from_array(T, chunks=(30, 70, 100, 100))   # rechunked like X
    history = dp.fit(dX, dT, batch_size=64, epochs=2, progress=True)
    _assert_fit_as_one_process(history, ref, X, T, dX.chunks[0], 64, 2)
    _assert_same(expected, got)
    # fit again on the same arrays: where the chunks are is known already
    placement = dp._placement
    history = dp.fit(dX, dT, batch_size=64, epochs=1, progress=False)
    assert dp._placement is placement
    _assert_fit_as_one_process(history, ref, X, T, dX.chunks[0], 64, 1)
    _assert_same(expected, got)
    # no data went through the driver: after the first step, only each worker's parameter values
    param_bytes = sum(p.value.nbytes for p in dp.optimizer.params)
    assert dp.traffic.sent <= (dp.traffic.steps - 1) * 2 * param_bytes
    assert "epoch 2/2" in capsys.readouterr().err                 # data.fit's progress bar
    dp.close()


def _die_when_a_shard_starts():
    """Run on one worker: its next shard ends the worker process at once (as a crash would)."""
    from staticgrad.distributed import worker as on_worker

    def dying(*args):
        os._exit(17)
    on_worker.model = dying


def _fail_when_a_shard_starts():
    from staticgrad.distributed import worker as on_worker

    def failing(*args):
        raise ArithmeticError("a shard that fails by itself")
    on_worker.model = failing


def _restore():
    """Run on the worker patched: the module as it was, its models forgotten too (the driver must then
    send every value again)."""
    import importlib

    from staticgrad.distributed import worker as on_worker
    importlib.reload(on_worker)


def _run_on(client, fn, worker_address):
    import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])      # (the workers need not import the tests)
    try:
        client.run(fn, workers=[worker_address])
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.mark.slow
def test_a_shard_that_raises_is_an_error_not_a_lost_worker(client):
    ref, expected, dp, got = _pair(client)
    X, T = _data(50)
    ref(X, T)
    dp.step(X, T)
    victim = sorted(client.nthreads())[0]
    _run_on(client, _fail_when_a_shard_starts, victim)
    try:
        with pytest.raises(ArithmeticError, match="fails by itself"):
            dp.step(X, T)
    finally:
        _run_on(client, _restore, victim)
    assert dp.redone == 0 and dp.traffic.steps == 1
    for _ in range(2):
        want = ref(X, T)
        assert dp.step(X, T) == pytest.approx(float(want), rel=RTOL)
        _assert_same(expected, got)
    # the first of these found the restored worker without the model: every value was sent again
    assert dp.redone == 1
    dp.close()


@pytest.mark.slow
def test_a_worker_dying_mid_step_has_the_step_redone_on_the_others(client):
    ref, expected, dp, got = _pair(client)
    X, T = _data(200)
    for start in (0, 50):
        ref(X[start:start + 50], T[start:start + 50])
        dp.step(X[start:start + 50], T[start:start + 50])
    _run_on(client, _die_when_a_shard_starts, sorted(client.nthreads())[1])
    for start in (100, 150):                      # the first of these loses a worker
        want = ref(X[start:start + 50], T[start:start + 50])
        assert dp.step(X[start:start + 50], T[start:start + 50]) == pytest.approx(float(want), rel=RTOL)
        _assert_same(expected, got)                # applied once, as the single process did
    assert dp.redone == 1 and dp.traffic.steps == 4
    client.wait_for_workers(2, timeout=60)         # (the nanny starts a new worker process)
    dp.close()


@pytest.mark.slow
def test_a_worker_dying_during_fit_loses_its_chunks_which_dask_computes_again(client):
    da, distributed = pytest.importorskip("dask.array"), pytest.importorskip("distributed")
    ref, expected, dp, got = _pair(client, "sgd_momentum")
    X, T = _data(240)
    dX, dT = client.persist([da.from_array(X, chunks=40), da.from_array(T, chunks=40)])
    distributed.wait([dX, dT])
    holder = next(iter(client.who_has(dX)[dX.__dask_keys__()[0][0]]))     # a worker holding chunk 0 of X
    _run_on(client, _die_when_a_shard_starts, holder)
    history = dp.fit(dX, dT, batch_size=48, epochs=2, progress=False)
    assert dp.redone == 1
    _assert_fit_as_one_process(history, ref, X, T, dX.chunks[0], 48, 2)
    _assert_same(expected, got)
    client.wait_for_workers(2, timeout=60)
    dp.close()
