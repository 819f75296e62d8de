"""The RNN workloads of benchmarks/ (issue 19, R1 and R2): the hand-written BPTT reference is right,
staticgrad's sg.scan version and the peers compute the same numbers, memory is measured, the table and
the command line know them. Tiny sizes: no timing is asserted."""
import argparse

import numpy as np
import pytest

from benchmarks import cli as bench
from benchmarks import impl_staticgrad, measure, memory, peers, reference, rnn_report, workloads

TINY = workloads.rnn_workload("tiny", inputs=3, hidden=4, steps=6, batch=2)


def _rnn_args(data):
    return [data[k] for k in ("X",) + workloads.RNN_PARAM_NAMES]


def _central_differences(f, x, eps=1e-6):
    out = np.zeros_like(x)
    for k in range(x.size):
        shifted = x.copy()
        shifted.flat[k] += eps
        plus = f(shifted)
        shifted.flat[k] -= 2 * eps
        out.flat[k] = (plus - f(shifted)) / (2 * eps)
    return out


def test_r1_and_r2_are_the_issues_sizes():
    for name, sizes in (("R1", (32, 128, 50, 32)), ("R2", (32, 64, 1000, 8))):
        wl = workloads.get(name)
        p = wl.params
        assert (p["inputs"], p["hidden"], p["steps"], p["batch"]) == sizes and wl.kind == "rnn"
        assert wl.dtype == "float64" and p["memory"]
    assert {"checkpoint": 32} in workloads.get("R2").params["variants"]
    data = workloads.make_data(TINY)
    assert [data[k].shape for k in ("X", "Wx", "Wh", "b")] == [(6, 2, 3), (3, 4), (4, 4), (4,)]


def test_reference_rnn_gradients_match_finite_differences():
    data = workloads.make_data(TINY)
    X, Wx, Wh, b = _rnn_args(data)
    loss, *grads = reference.rnn_grad(X, Wx, Wh, b)
    for k, (name, grad) in enumerate(zip(workloads.RNN_PARAM_NAMES, grads)):
        def loss_at(value, k=k):
            args = [Wx, Wh, b]
            args[k] = value
            return reference.rnn_grad(X, *args)[0]
        np.testing.assert_allclose(grad, _central_differences(loss_at, data[name]), rtol=1e-6, atol=1e-11,
                                   err_msg=name)


def test_reference_rnn_loss_is_half_the_mean_square_of_every_step():
    data = workloads.make_data(TINY)
    X, Wx, Wh, b = _rnn_args(data)
    h, squares = np.zeros((2, 4)), []
    for x in X:
        h = np.tanh(x @ Wx + h @ Wh + b)
        squares.append(h * h)
    assert reference.rnn_grad(X, Wx, Wh, b)[0] == pytest.approx(0.5 * np.mean(squares), rel=1e-14)


@pytest.mark.parametrize("loss_in_carry", [False, True])
@pytest.mark.parametrize("checkpoint", [None, 2, 4])
def test_staticgrad_rnn_equals_the_reference(checkpoint, loss_in_carry):
    data = workloads.make_data(TINY)
    got = impl_staticgrad.prepare(TINY, data, checkpoint=checkpoint, loss_in_carry=loss_in_carry)
    ok, err = workloads.outputs_close(got.check(), reference.prepare(TINY, data).check(), 1e-10)
    assert ok, err
    assert got.impl == impl_staticgrad.impl_name(checkpoint=checkpoint, loss_in_carry=loss_in_carry)


def test_variant_names_and_their_stored_everything_counterparts():
    name = impl_staticgrad.impl_name(checkpoint=32, loss_in_carry=True)
    assert name == "staticgrad[loss-in-carry,checkpoint=32]"
    assert rnn_report.without_checkpoint(name) == "staticgrad[loss-in-carry]"
    assert rnn_report.without_checkpoint(impl_staticgrad.impl_name(checkpoint=32)) == "staticgrad"
    assert impl_staticgrad.impl_name(backend="numba") == "staticgrad[numba]"


def test_checkpointing_lowers_staticgrads_peak_memory():
    wl = workloads.rnn_workload("mid", inputs=4, hidden=16, steps=256, batch=4)
    data = workloads.make_data(wl)
    stored = memory.peak(impl_staticgrad.prepare(wl, data, loss_in_carry=True))
    checkpointed = memory.peak(impl_staticgrad.prepare(wl, data, checkpoint=16, loss_in_carry=True))
    assert stored["peak_source"] == checkpointed["peak_source"] == "tracemalloc"
    # stored: every step's residuals (256 x 4 x 16 floats, 128 kB each); checkpointed: every 16th carry
    # and one segment's residuals
    assert checkpointed["peak_bytes"] < stored["peak_bytes"] / 4


def test_memory_measures_see_a_calls_arrays():
    def call():
        a = np.ones(1_000_000)              # 8 MB, freed before the next one is made
        b = np.ones(500_000)
        return a.sum() + b.sum()
    prepared = workloads.Prepared("x", call, None, traced=True, held=lambda: 1234)
    got = memory.peak(prepared)
    assert 12_000_000 <= got["traced_peak_bytes"] < 12_500_000
    assert got["peak_bytes"] == got["traced_peak_bytes"] + 1234 and got["peak_source"] == "tracemalloc"
    if got["rss_peak_bytes"] is not None:     # where /proc/self/clear_refs can be written
        assert got["rss_peak_bytes"] > 6_000_000
    untraced = memory.peak(workloads.Prepared("y", call, None))
    assert untraced["traced_peak_bytes"] is None and untraced["peak_source"] == "rss"
    reported = memory.peak(workloads.Prepared("z", call, None, reported_peak=5_000))
    assert (reported["peak_bytes"], reported["peak_source"]) == (5_000, "reported")


def test_measure_records_memory_for_the_rnn_workloads():
    data = workloads.make_data(TINY)
    result = measure.measure(TINY, data, reference.prepare, rounds=2, target_s=0.0005)
    assert result["status"] == "ok"
    for key in ("memory", "numpy_memory"):
        assert result[key]["traced_peak_bytes"] > 6 * 2 * 4 * 8      # at least the stored h's
    assert "memory" not in measure.measure(workloads.get("E"), workloads.make_data(workloads.get("E")),
                                           reference.prepare, rounds=2, target_s=0.0005)


def test_peers_written_for_some_kinds_only_are_skipped_for_the_others():
    assert peers.skip_reason("tensorflow", "chain") and peers.skip_reason("tensorflow", "rnn") is None
    assert peers.skip_reason("torch.compile", "rnn") and peers.skip_reason("torch.compile", "chain") is None
    assert peers.skip_reason("torch", "rnn") is None and peers.skip_reason("jax.jit", "rnn") is None


@pytest.mark.parametrize("impl, workload, why", [("tensorflow", "A", "R1, R2 and V1"), ("pytensor", "V1", "no conv2d")])
def test_the_peer_runner_reports_a_skipped_pair_without_loading_the_peer(monkeypatch, impl, workload, why):
    from benchmarks import peer_runner
    monkeypatch.setattr(peer_runner, "_load", lambda impl: pytest.fail("loaded a peer it should skip"))
    args = argparse.Namespace(impl=impl, workload=workload, rounds=2, target=0.0005, budget=None, clock="cpu",
                              threads=1)
    result = peer_runner.run(args)
    assert result["status"] == "skipped" and why in result["reason"]


def test_torch_peer_rnn_equals_the_reference():
    pytest.importorskip("torch")
    from benchmarks.peers import torch_peer
    data = workloads.make_data(TINY)
    ok, err = workloads.outputs_close(torch_peer.prepare(TINY, data).check(), reference.prepare(TINY, data).check(),
                                      1e-12)
    assert ok, err


@pytest.mark.slow
@pytest.mark.parametrize("peer", ["jax", "pytensor", "tensorflow"])
def test_other_peers_rnn_equal_the_reference(peer):
    # runs in the peers environment (.venv-peers, 5-11 s each); skipped where the framework is missing
    pytest.importorskip(peer)
    module = __import__(f"benchmarks.peers.{'tf' if peer == 'tensorflow' else peer}_peer", fromlist=["prepare"])
    data = workloads.make_data(TINY)
    got = module.prepare(TINY, data)
    ok, err = workloads.outputs_close(got.check(), reference.prepare(TINY, data).check(), 1e-12)
    assert ok, err
    if peer == "jax":
        assert got.reported_peak > 6 * 2 * 4 * 8


def test_command_line_names_the_rnn_workloads_and_tensorflow():
    parser = bench.add_arguments(argparse.ArgumentParser())
    s = bench.settings_from_args(parser.parse_args(["--only", "r1,R2", "--peers", "torch,tf1,jax"]))
    assert s.workloads == ["R1", "R2"] and s.peers == ["torch", "tensorflow", "jax.jit"]
    assert bench.Settings().workloads == ["A", "B", "C", "D", "E", "R1", "R2", "V1"]
    with pytest.raises(SystemExit):
        parser.parse_args(["--only", "R3"])


def _fake_doc(ratio, peer_ratio, once, stored, checkpointed):
    mem = {"peak_source": "tracemalloc", "peak_bytes": stored}
    ours = {"status": "ok", "ratio": ratio, "median_s": 1e-3, "numpy": {"median_s": 1e-3 / ratio},
            "costs": {"build": once / 4, "grad": once / 4, "compile": once / 4, "first_call": once / 4},
            "memory": mem, "numpy_memory": {"peak_bytes": 3 * stored}}
    results = {"staticgrad": ours,
               "staticgrad[checkpoint=32]": {**ours, "memory": {**mem, "peak_bytes": checkpointed}},
               "torch": {"status": "ok", "ratio": peer_ratio, "median_s": 1e-3 * peer_ratio / ratio,
                         "memory": {"peak_source": "rss", "peak_bytes": 10 ** 7}}}
    return {"settings": {"clock": "cpu", "threads": 1}, "machine": {"git": "x"},
            "workloads": [{"name": "R2", "title": "rnn", "kind": "rnn", "results": results}]}


def test_the_table_shows_memory_and_the_issue_19_goals():
    text = bench.format_table(_fake_doc(0.8, 0.9, 0.5, 4_000_000, 500_000))
    assert "Peak memory of one call" in text and "4 MB" in text and "10 MB (rss)" in text and "12 MB" in text
    lines = rnn_report.rnn_goal_lines(_fake_doc(0.8, 0.9, 0.5, 4_000_000, 500_000))
    assert [line.endswith("met") and not line.endswith("NOT met") for line in lines[2:4]] == [True, True]
    assert "= 0.12 (goal < 0.25): met" in lines[4]
    lines = rnn_report.rnn_goal_lines(_fake_doc(0.95, 0.9, 1.5, 4_000_000, 2_000_000))
    assert all("NOT met" in line for line in lines[2:5]), lines


def test_the_speed_goal_is_judged_by_time_too():
    doc = _fake_doc(0.8, 0.9, 0.5, 4_000_000, 500_000)
    doc["workloads"][0]["results"]["torch"]["median_s"] = 0.9e-3     # (its own hand numpy ran faster)
    line = rnn_report.rnn_goal_lines(doc)[2]
    assert "fastest peer torch 0.9 ms" in line and line.endswith("NOT met"), line


def test_the_numba_backend_is_judged_too_when_it_ran():
    doc = _fake_doc(0.95, 0.9, 0.5, 4_000_000, 500_000)
    results = doc["workloads"][0]["results"]
    results["staticgrad[numba]"] = {**results["staticgrad"], "ratio": 0.6, "median_s": 0.6e-3}
    lines = rnn_report.rnn_goal_lines(doc)
    assert lines[2].startswith("  R2: 0.95") and lines[2].endswith("NOT met"), lines
    assert lines[4].startswith("  R2 staticgrad[numba]: 0.60") and lines[4].endswith(": met"), lines
    assert lines[5].startswith("  R2 staticgrad[numba] one-time costs") and lines[5].endswith(": met"), lines
