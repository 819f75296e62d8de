"""The convolutional workload of benchmarks/ (issue 20, V1): the hand-written numpy reference is right
(finite differences, torch), the floors compute what the step computes, the peers agree or say why they
are skipped, the table knows the issue's goals. Tiny sizes where possible: no timing is asserted."""
import numpy as np
import pytest

from benchmarks import cli as bench
from benchmarks import cnn_floors, cnn_report, impl_staticgrad, peers, reference, workloads

TINY = workloads.cnn_workload("tiny", batch=3, size=8, channels=(2, 3, 4), classes=5)


def _float64(data):
    return {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in data.items()}


def _args(data):
    return [data["X"], data["t"]] + [data[k] for k in workloads.CNN_PARAM_NAMES]


def test_v1_is_the_issues_net():
    wl = workloads.get("V1")
    assert (wl.kind, wl.dtype, wl.params["batch"], wl.params["size"], wl.params["channels"]) == (
        "cnn", "float32", 64, 28, (1, 8, 16))
    data = workloads.make_data(wl)
    shapes = {k: data[k].shape for k in ("X",) + workloads.CNN_PARAM_NAMES}
    assert shapes == {"X": (64, 1, 28, 28), "w1": (8, 1, 3, 3), "b1": (8,), "w2": (16, 8, 3, 3), "b2": (16,),
                      "w3": (784, 10), "b3": (10,)}
    assert all(data[k].dtype == np.float32 for k in shapes) and data["t"].dtype == np.int64
    assert set(np.unique(data["t"])) <= set(range(10))
    out = reference.prepare(wl, data).check()
    assert [np.shape(v) for v in out] == [()] + [shapes[k] for k in workloads.CNN_PARAM_NAMES]
    assert all(np.asarray(v).dtype == np.float32 for v in out)
    assert "V1" in bench.Settings().workloads


def test_reference_cnn_gradients_match_finite_differences():
    data = _float64(workloads.make_data(TINY))
    loss, *grads = reference.cnn_grad(*_args(data))
    rng = np.random.default_rng(2)
    for k, (name, grad) in enumerate(zip(workloads.CNN_PARAM_NAMES, grads)):
        assert grad.shape == data[name].shape
        for flat in rng.choice(grad.size, size=min(6, grad.size), replace=False):
            def loss_at(step, k=k, flat=flat):
                args = _args(data)
                value = args[2 + k].copy()
                value.flat[flat] += step
                args[2 + k] = value
                return reference.cnn_grad(*args)[0]
            numeric = (loss_at(1e-6) - loss_at(-1e-6)) / 2e-6
            assert grad.flat[flat] == pytest.approx(numeric, rel=1e-5, abs=1e-9), (name, flat)


def test_im2col_and_col2im_are_adjoint():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5, 4))
    cols = reference.im2col(x)
    assert cols.shape == (27, 40)
    c = rng.standard_normal(cols.shape)
    assert np.sum(cols * c) == pytest.approx(np.sum(x * reference.col2im(c, x.shape)), rel=1e-12)
    # row (channel 1, offset (0, 0)) at output pixel (0, 1, 2, 3) reads input (0, 1, 1, 2)
    assert cols[9, 0 * 20 + 2 * 4 + 3] == x[0, 1, 1, 2]


def test_pooling_sends_a_tie_to_the_windows_first_maximum():
    x = np.array([[[[1.0, 2.0, 0.0, 0.0], [2.0, 2.0, 0.0, 5.0]]]])       # (1, 1, 2, 4): two windows
    out, masks = reference.max_pool2(x)
    assert out.tolist() == [[[[2.0, 5.0]]]]
    grad = reference.max_pool2_backward(np.array([[[[10.0, 20.0]]]]), masks)
    assert grad.tolist() == [[[[0.0, 10.0, 0.0, 0.0], [0.0, 0.0, 0.0, 20.0]]]]
    torch = pytest.importorskip("torch")
    t = torch.tensor(x, requires_grad=True)
    torch.nn.functional.max_pool2d(t, 2).backward(torch.tensor([[[[10.0, 20.0]]]], dtype=torch.float64))
    assert t.grad.numpy().tolist() == grad.tolist()


@pytest.mark.parametrize("name", ["tiny", "V1"])
def test_torch_peer_cnn_equals_the_reference(name):
    pytest.importorskip("torch")
    from benchmarks.peers import torch_peer
    wl = TINY if name == "tiny" else workloads.get(name)
    data = workloads.make_data(wl)
    ok, err = workloads.outputs_close(torch_peer.prepare(wl, data).check(), reference.prepare(wl, data).check(),
                                      wl.rtol)
    assert ok, err
    assert err < wl.rtol / 10           # float32 noise, far below the tolerance


@pytest.mark.parametrize("wl", [TINY, workloads.get("V1")], ids=["tiny", "V1"])
def test_the_lean_v1_step_is_the_hand_written_step(wl):
    # a floor is only a floor if it does the whole job, call after call (its buffers are reused)
    data = workloads.make_data(wl)
    want = reference.prepare(wl, data).check()
    lean = cnn_floors.LeanStep(data)
    for _ in range(2):
        ok, err = workloads.outputs_close(lean(), want, 1e-5)
        assert ok, err


def test_the_layout_floors_do_the_references_moves():
    wl = workloads.get("V1")
    data = workloads.make_data(wl)
    assert [name for name, _ in cnn_floors.FLOORS] == ["8 matrix products", "im2col copies", "col2im adds",
                                                       "NCHW transposes", "leanest numpy step"]
    x = np.random.default_rng(4).standard_normal((2, 3, 4, 4)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    np.testing.assert_array_equal(cnn_floors._windows(xp, 1).reshape(27, -1), reference.im2col(x))
    cols = np.random.default_rng(5).standard_normal((27, 32)).astype(np.float32)
    dx = np.empty((3, 2, 4, 4), np.float32)
    cnn_floors._col2im_into(dx, cols.reshape(3, 3, 3, 2, 4, 4))
    np.testing.assert_allclose(dx.transpose(1, 0, 2, 3), reference.col2im(cols, x.shape), rtol=1e-6, atol=1e-6)
    for _, make in cnn_floors.FLOORS[:-1]:
        make(data)()


def test_pytensor_is_skipped_with_the_reason_and_tensorflow_has_a_v1():
    reason = peers.skip_reason("pytensor", "cnn")
    assert reason and "no conv2d" in reason
    assert peers.skip_reason("tensorflow", "cnn") is None and peers.skip_reason("torch", "cnn") is None
    assert peers.skip_reason("jax.jit", "cnn") is None and peers.skip_reason("pytensor", "rnn") is None
    # the peer runner says so without loading pytensor: tests/test_bench_rnn.py


@pytest.mark.slow
@pytest.mark.parametrize("peer", ["jax", "tensorflow"])
def test_other_peers_cnn_equal_the_reference(peer):
    # runs in the peers environment (.venv-peers); skipped where the framework is missing
    pytest.importorskip(peer)
    module = __import__(f"benchmarks.peers.{'tf' if peer == 'tensorflow' else peer}_peer", fromlist=["prepare"])
    data = workloads.make_data(TINY)
    ok, err = workloads.outputs_close(module.prepare(TINY, data).check(), reference.prepare(TINY, data).check(),
                                      TINY.rtol)
    assert ok, err


def test_staticgrad_cnn_equals_the_reference():
    data = workloads.make_data(TINY)
    got = impl_staticgrad.prepare(TINY, data)
    ok, err = workloads.outputs_close(got.check(), reference.prepare(TINY, data).check(), TINY.rtol)
    assert ok, err


@pytest.mark.slow
def test_v1_floors_are_timed_beside_both_steps():
    from benchmarks import floors
    rows = floors.measure(rounds=3, target_s=0.001, names=("V1",))["V1"]
    assert list(rows) == ["hand numpy", "staticgrad"] + [name for name, _ in cnn_floors.FLOORS]
    assert rows["hand numpy"]["ratio"] == 1.0 and all(r["median_s"] > 0 for r in rows.values())


def _fake_doc(ours, torch, jax, tf):
    """Median times in ms; every ratio 1.0 (each peer's hand numpy as fast as it): the goals read times."""
    def result(ms):
        return {"status": "ok", "ratio": 1.0, "median_s": ms / 1e3}
    results = {"staticgrad": result(ours), "torch": result(torch), "jax.jit": result(jax),
               "tensorflow": result(tf), "pytensor": {"status": "skipped", "reason": "no conv2d"}}
    return {"settings": {"clock": "cpu", "threads": 1}, "machine": {"git": "x"},
            "workloads": [{"name": "V1", "title": "cnn", "kind": "cnn", "results": results}]}


def test_the_table_shows_the_issue_20_goals():
    lines = cnn_report.cnn_goal_lines(_fake_doc(6, 10, 12, 5))
    assert lines[1].startswith("Issue 20 goals")
    assert all(line.endswith(": met") for line in lines[2:]), lines
    assert "staticgrad 6 ms = 1.20 x tensorflow's 5 ms" in lines[4]
    lines = cnn_report.cnn_goal_lines(_fake_doc(14, 10, 12, 5))
    assert all(line.endswith("NOT met") for line in lines[2:]), lines
    doc = _fake_doc(6, 10, 12, 5)
    doc["workloads"][0]["results"]["tensorflow"] = {"status": "skipped", "reason": "not installed"}
    assert "tensorflow not measured (skipped)" in cnn_report.cnn_goal_lines(doc)[-1]
    del doc["workloads"][0]["results"]["torch"]
    assert "torch not measured (not in this run)" in cnn_report.cnn_goal_lines(doc)[2]
    assert "Issue 20 goals" in bench.format_table(doc)
