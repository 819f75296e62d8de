"""The study's RNN case at tiny sizes: every way of running it gives the same loss and gradients, the mask
keeps padding out, the measurements, tables, time limit and commands."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import study
from staticgrad.study import rnn, rnn_measure
from staticgrad.testing import check_grads

TOL = 1e-10
SIZES = {"inputs": 3, "hidden": 4, "batch": 2}


def tiny(rng, steps):
    params = rnn.rnn_params(rng, SIZES["inputs"], SIZES["hidden"])
    return params, rnn.rnn_batch(rng, steps, SIZES["batch"], SIZES["inputs"])


def free_time(feeds):
    return [(None,) + a.shape[1:] for a in feeds]


def assert_same(outs, reference):
    assert len(outs) == len(reference) == 5           # the loss, then Wx, Wh, b, v
    for a, b in zip(outs, reference):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL)


def test_scan_unrolled_and_eager_give_the_same_loss_and_gradients(rng):
    params, feeds = tiny(rng, 7)
    scan = rnn.static_runner(rnn.rnn_loss, params, free_time(feeds))
    reference = scan.call(*feeds)
    assert reference[0].shape == () and [g.shape for g in reference[1:]] == [p.shape for p in params]
    assert_same(rnn.static_runner(rnn.rnn_loss_unrolled, params, [a.shape for a in feeds]).call(*feeds), reference)
    assert_same(rnn.eager_runner(rnn.rnn_loss, params).call(*feeds), reference)
    # A batch with nothing padded: the masked loss is the plain one.
    masked = rnn.static_runner(rnn.rnn_loss_masked, params, free_time(feeds) + [(None, SIZES["batch"])])
    assert_same(masked.call(*rnn.pad(feeds, 7)), reference)


def test_one_scan_compile_serves_every_length(rng):
    params, feeds = tiny(rng, 9)
    scan = rnn.static_runner(rnn.rnn_loss, params, free_time(feeds))
    for steps in (1, 4, 9):
        X, Y = feeds[0][:steps], feeds[1][:steps]
        unrolled = rnn.static_runner(rnn.rnn_loss_unrolled, params, [X.shape, Y.shape])
        assert_same(scan.call(X, Y), unrolled.call(X, Y))
    assert scan.fn.plans_built == 3 and [n.op for n in scan.fn.ir.nodes.values()].count("scan") >= 1


def test_the_gradients_match_finite_differences(rng):
    params, (X, Y) = tiny(rng, 4)
    check_grads(lambda *ps: rnn.rnn_loss(sg.constant(X), sg.constant(Y), *ps), params)


def test_the_mask_keeps_padding_out_of_every_sequence(rng):
    """Two sequences of 3 and 5 steps in one batch padded to 6: each real step counts once, no padded one."""
    params = rnn.rnn_params(rng, SIZES["inputs"], SIZES["hidden"])
    X, Y = rnn.rnn_batch(rng, 6, 2, SIZES["inputs"])
    M = np.zeros((6, 2))
    M[:3, 0] = M[:5, 1] = 1.0
    ps = [sg.eager.tensor(p, requires_grad=True) for p in params]
    masked = rnn.rnn_loss_masked(sg.eager.tensor(X), sg.eager.tensor(Y), sg.eager.tensor(M), *ps)
    squares = 0.0
    for k, n in ((0, 3), (1, 5)):             # each sequence alone, unpadded
        errors = rnn.rnn_errors(sg.eager.tensor(X[:n, k:k + 1]), sg.eager.tensor(Y[:n, k:k + 1]), *ps)
        squares = squares + sg.sum(errors * errors)
    alone = 0.5 * squares / 8.0
    assert abs(masked.item() - alone.item()) < TOL
    np.testing.assert_allclose(sg.eager.grad(masked, ps)[1].value, sg.eager.grad(alone, ps)[1].value, atol=TOL)


def test_pad():
    X, Y, M = rnn.pad((np.ones((2, 3, 4)), np.ones((2, 3))), 5)
    assert X.shape == (5, 3, 4) and Y.shape == (5, 3) and M.shape == (5, 3)
    assert X[2:].sum() == Y[2:].sum() == M[2:].sum() == 0 and M[:2].all()


# ------------------------------------------------------------------ the measurements
@pytest.fixture(scope="module")
def result():
    return rnn_measure.rnn_study(quick=True, torch=False)


def test_every_mode_at_every_length_agrees_with_the_scan(result):
    json.dumps(result)
    assert [e["steps"] for e in result["lengths"]] == rnn_measure.QUICK["lengths"]
    assert "torch" not in result["lengths"][0]["modes"]
    for entry in result["lengths"]:
        modes = entry["modes"]
        assert list(modes) == ["scan", "unrolled", "eager"]
        for name, m in modes.items():
            assert m["max_abs_diff"] < TOL, (entry["steps"], name)
            assert m["step_s"] > 0 and m["peak_bytes"] > 0 and len(m["step_times_s"]) == entry["repeats"]
            assert m["first_call_s"] > 0 and "step_over_scan" in m and "peak_over_scan" in m
        assert modes["scan"]["shared_compile"] and modes["unrolled"]["compile_s"] > 0
        assert modes["eager"]["build_s"] == modes["eager"]["compile_s"] == 0
    # one compile for the scan: its one-off costs are the same object at every length
    assert len({e["modes"]["scan"]["compile_s"] for e in result["lengths"]}) == 1


def test_the_epoch_padded_and_per_length(result):
    epoch = result["epoch"]
    v = epoch["variants"]
    assert len(epoch["lengths"]) == epoch["batches"] and epoch["padded_to"] == max(epoch["lengths"])
    assert (v["padded"]["compiles"], v["padded"]["plans"]) == (1, 1)
    assert (v["per_length"]["compiles"], v["per_length"]["plans"]) == (1, epoch["distinct_lengths"])
    assert v["unrolled"]["compiles"] == v["unrolled"]["plans"] == epoch["distinct_lengths"]
    assert v["eager"]["compiles"] == v["eager"]["plans"] == 0
    assert v["padded"]["steps_run"] == epoch["batches"] * epoch["padded_to"]
    assert v["per_length"]["steps_run"] == v["eager"]["steps_run"] == sum(epoch["lengths"])
    for name, entry in v.items():
        assert entry["max_abs_diff"] < TOL, name
        assert entry["total_s"] >= entry["calls_s"] >= entry["planning_calls_s"] >= 0
    assert v["per_length"]["total_over_per_length"] == 1.0


def test_tables_and_findings(result):
    text = study.format_rnn(result)
    for needle in ("static scan", "static unrolled", "eager loop", "(once)", "padded + mask, one plan",
                   "a plan per length", "max |diff|"):
        assert needle in text, needle
    md = study.format_rnn(result, markdown=True)
    assert "| steps | mode |" in md and "| variant |" in md
    lines = study.rnn_findings(result)
    assert lines[0].startswith("Unrolled build + compile + first call") and lines[-1].startswith("Epoch:")


# The 0.1 ms limit fires wherever the build happens to be, a garbage collection callback included, where
# Python can only print the exception (the limit re-arms and the next one ends the block).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_unrolled_build_over_its_time_limit_is_reported_not_waited_for(rng):
    config = dict(rnn_measure.QUICK)
    params = rnn.rnn_params(rng, config["inputs"], config["hidden"])
    scan = rnn.static_runner(rnn.rnn_loss, params, [(None, config["batch"], config["inputs"]), (None, config["batch"])])
    entry = rnn_measure.measure_length(12, params, scan, rng, config, timeout=1e-4, quick=True)
    unrolled = entry["modes"]["unrolled"]
    assert unrolled["timed_out"] and unrolled["timeout_s"] == 1e-4 and "step_s" not in unrolled
    assert entry["modes"]["eager"]["max_abs_diff"] < TOL
    row = [r for r in study.rnn_report.length_rows({"lengths": [entry]}) if r[1] == "static unrolled"][0]
    assert row[2] == "> 0.0001 s"


def test_time_limit_without_a_limit_runs_the_block():
    with rnn.time_limit(None):
        done = True
    assert done


def spin(seconds):
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_time_out_that_a_finalizer_swallows_comes_again():
    class Slow:
        def __del__(self):
            spin(0.2)           # the first TimedOut is raised in here, where Python only prints it

    with pytest.raises(rnn.TimedOut):
        with rnn.time_limit(0.01, retry=0.01):
            slow = Slow()
            del slow
            spin(5.0)           # the second one ends the block at once
    spin(0.05)                  # and none comes after it


def test_a_block_that_ends_in_time_is_not_interrupted_later():
    with rnn.time_limit(0.05, retry=0.01):
        pass
    spin(0.1)


# ------------------------------------------------------------------ PyTorch's eager loop
def test_the_torch_loop_agrees_and_its_saved_tensors_grow_with_the_length(rng):
    torch = pytest.importorskip("torch")
    params, feeds = tiny(rng, 6)
    reference = rnn.static_runner(rnn.rnn_loss, params, free_time(feeds)).call(*feeds)
    runner = rnn.torch_runner(rnn.rnn_loss, params, feeds, torch)
    assert_same(runner.call(*feeds), reference)
    short = rnn.torch_runner(rnn.rnn_loss, params, (feeds[0][:2], feeds[1][:2]), torch)
    assert 0 < short.peak(feeds[0][:2], feeds[1][:2]) < runner.peak(*feeds)


# ------------------------------------------------------------------ the commands
def test_bench_study_rnn_flag(tmp_path, capsys, monkeypatch, result):
    from staticgrad.cli import main
    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        return result
    monkeypatch.setattr(study, "rnn_study", fake)
    out = tmp_path / "rnn.json"
    assert main(["bench", "--rnn", "--quick", "--peers", "none", "--threads", "0", "--unroll-timeout", "7",
                 "--out", str(out)]) == 0
    assert seen == {"quick": True, "seed": 0, "torch": False, "timeout": 7.0}
    assert json.loads(out.read_text())["case"] == "rnn"
    text = capsys.readouterr().out
    assert "static unrolled" in text and "- Epoch:" in text and "measurements written to" in text


def test_the_example_script_runs_the_rnn_case(capsys, monkeypatch, tmp_path, result):
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "static_vs_dynamic.py"
    spec = importlib.util.spec_from_file_location("example_static_vs_dynamic_rnn", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setattr(study, "rnn_study", lambda **kwargs: result)
    assert example.main(["--rnn", "--quick", "--no-torch", "--json", str(tmp_path / "r.json")]) == 0
    assert "static scan" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["epoch"]["variants"]["padded"]["plans"] == 1
