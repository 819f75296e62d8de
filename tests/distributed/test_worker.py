"""staticgrad.distributed.worker: the functions a worker runs, called here in this process (no cluster)."""
import uuid

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.distributed import worker


def _function(seed=0):
    x = sg.placeholder((None, 4), name="x")
    t = sg.placeholder((None,), "int64", name="t")
    net = sg.nn.MLP([4, 8, 3], seed=seed)
    loss = sg.nn.softmax_cross_entropy(net(x), t)
    params = net.parameters()
    return sg.compile([loss, *sg.grad(loss, params)], inputs=[x, t]), params


def _batch(n=10, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)), rng.integers(0, 3, n)


def test_the_function_travels_as_the_bytes_of_its_saved_file():
    fn, _ = _function()
    blob = worker.to_bytes(fn)
    assert isinstance(blob, bytes) and blob[:2] == b"PK"          # a zip: the .npz sg.save writes
    loaded = worker.from_bytes(blob)
    X, T = _batch()
    for a, b in zip(loaded(X, T), fn(X, T)):
        np.testing.assert_array_equal(a, b)


def test_a_shipped_file_is_checked_as_a_loaded_one():
    with pytest.raises(sg.LoadError, match="corrupt, truncated or not a staticgrad file"):
        worker.from_bytes(b"PK\x03\x04 not really a zip")


def test_a_shard_runs_on_the_model_loaded_once_with_the_values_sent():
    fn, params = _function()
    blob, model_id = worker.to_bytes(fn), f"test-{uuid.uuid4().hex}"
    X, T = _batch()
    try:
        rows, seconds, *out = worker.shard_gradients(model_id, blob, 0, -1, None, [X, T])
        assert rows == 10 and seconds > 0
        for a, b in zip(out, fn(X, T)):
            np.testing.assert_array_equal(a, b)
        first = worker.model(model_id, b"never read again")
        # new values for parameter 0 only: the shard runs on them, the others kept
        new = params[0].value * 2
        rows, seconds, *out = worker.shard_gradients(model_id, blob, 1, 0, {0: new}, [X, T])
        assert worker.model(model_id, blob) is first
        params[0].value = new
        for a, b in zip(out, fn(X, T)):
            np.testing.assert_array_equal(a, b)
    finally:
        assert worker.forget(model_id)
    assert not worker.forget(model_id)


def test_a_task_of_an_older_step_leaves_newer_values_alone():
    fn, params = _function()
    blob, model_id = worker.to_bytes(fn), f"test-{uuid.uuid4().hex}"
    X, T = _batch()
    try:
        assert worker.shard_gradients(model_id, blob, 5, -1, {0: params[0].value + 1}, [X, T]) is not None
        assert worker.shard_gradients(model_id, blob, 4, -1, {0: params[0].value}, [X, T]) is None
        np.testing.assert_array_equal(worker.model(model_id, blob).params[0].value, params[0].value + 1)
    finally:
        worker.forget(model_id)


def test_a_process_that_forgot_the_model_asks_for_every_value_again():
    # the driver believes the worker holds step 3's values and sends only what changed since: a process
    # that loads the model afresh (the file's values) must not run on that
    fn, params = _function()
    blob, model_id = worker.to_bytes(fn), f"test-{uuid.uuid4().hex}"
    X, T = _batch()
    try:
        assert worker.shard_gradients(model_id, blob, 4, 3, {0: params[0].value + 1}, [X, T]) is None
        assert worker.model(model_id, blob).seq == -1
        assert worker.shard_gradients(model_id, blob, 4, -1, {0: params[0].value + 1}, [X, T]) is not None
    finally:
        worker.forget(model_id)


def test_pieces_of_several_chunks_make_one_shard():
    fn, _ = _function()
    blob, model_id = worker.to_bytes(fn), f"test-{uuid.uuid4().hex}"
    X, T = _batch(30)
    chunks = [X[:10], T[:10], X[10:], T[10:]]               # two chunks, each input's in turn
    try:
        rows, seconds, *out = worker.piece_gradients(model_id, blob, 0, -1, None, [(2, 6), (0, 5)], *chunks)
        assert rows == 9
        rows_read = np.r_[2:6, 10:15]
        for a, b in zip(out, fn(X[rows_read], T[rows_read])):
            np.testing.assert_array_equal(a, b)
    finally:
        worker.forget(model_id)


def test_hold_gives_its_value_back():
    a = np.arange(3)
    assert worker.hold(a) is a
