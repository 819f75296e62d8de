"""The static vs dynamic study: what compare() returns, the twin run, break-even, outputs, the CLI flag."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager, study

THIS_FILE = os.path.basename(__file__)


def regression(x, y, W, b):
    return sg.mean((x @ W + b - y) ** 2)


def regression_case(rng, n_batches=6):
    params = [rng.normal(size=(3, 2)), np.zeros(2)]
    teacher = rng.normal(size=(3, 2))
    xs = [rng.normal(size=(8, 3)) for _ in range(n_batches)]
    return params, [(x, x @ teacher + 0.5) for x in xs]


@pytest.fixture(scope="module")
def result():
    params, batches = regression_case(np.random.default_rng(0))
    return study.compare(regression, params, batches, lr=0.1, name="regression", torch=False)


def test_compare_returns_json_serializable_measurements(result):
    text = json.dumps(result)
    assert json.loads(text)["name"] == "regression"
    assert "torch" not in result and "torch_skipped" not in result
    for mode in ("static", "eager"):
        entry = result[mode]
        for key in ("build_s", "compile_s", "step_s", "peak_bytes", "nodes_executed"):
            assert key in entry, (mode, key)
        assert len(entry["step_times_s"]) == 6 and entry["step_s"] > 0
        assert isinstance(entry["peak_bytes"], int) and entry["peak_bytes"] > 0
    assert result["static"]["compile_s"] > 0 and result["eager"]["compile_s"] == 0
    assert "break_even_batches" in result
    assert result["parameters"] == 8 and result["batch_shapes"] == [[8, 3], [8, 2]]


def test_the_static_peak_counts_the_plans_workspace(monkeypatch):
    # The workspace is allocated once per plan, before the measured call, and kept: with the call's own
    # allocations left out, what remains is that workspace (the regression step's 8x2 buffers and more).
    from staticgrad.study import modes as study_modes
    monkeypatch.setattr(study_modes, "_peak_bytes", lambda fn: (fn(), 0)[1])
    params, batches = regression_case(np.random.default_rng(0))
    mode = study_modes.static_mode(regression, params, batches, 0.1)
    mode.step(batches[0])
    assert mode.measure()["peak_bytes"] >= 8 * 2 * 8


def test_both_modes_train_identically(result):
    assert result["eager"]["losses_max_abs_diff"] < 1e-12
    assert result["static"]["loss_last"] < result["static"]["loss_first"]


def test_node_counts(result):
    eager_roles = result["eager"]["nodes_by_role"]
    # matmul, add, sub, pow, mean: one eager op each; updates are two numpy ops per parameter.
    assert eager_roles["forward"] == 5 and eager_roles["update"] == 4
    assert result["eager"]["nodes_executed"] == sum(eager_roles.values())
    static_roles = result["static"]["nodes_by_role"]
    assert result["static"]["nodes_executed"] == sum(static_roles.values()) > 0
    assert set(static_roles) <= {"forward", "backward", "update"}


def test_eager_backward_skips_gradients_nobody_needs():
    """x @ W with x data and (.)**2 with a constant exponent: no data gradient, no log of the base."""
    x = eager.tensor(np.ones((4, 3)))
    W = eager.tensor(np.ones((3, 2)), requires_grad=True)
    loss = sg.mean((x @ W) ** 2)
    with eager.trace() as ops:
        loss.backward()
    names = [t.op for t in ops]
    assert "log" not in names and names.count("matmul") == 1


def test_break_even_from_medians():
    static = {"build_s": 0.5, "compile_s": 0.5, "step_s": 0.1}
    assert study.break_even(static, {"build_s": 0.0, "compile_s": 0.0, "step_s": 0.2}) == 10
    assert study.break_even(static, {"build_s": 0.0, "compile_s": 0.0, "step_s": 0.1}) is None
    assert study.break_even(static, {"build_s": 0.0, "compile_s": 0.0, "step_s": 0.05}) is None


def test_measured_crossing():
    static = {"build_s": 1.0, "compile_s": 0.0, "step_times_s": [0.1] * 20}
    other = {"build_s": 0.0, "compile_s": 0.0, "step_times_s": [0.3] * 20}
    # static: 1.1, 1.2, ...; other: 0.3, 0.6, ...: equal after 5 batches (1.5 vs 1.5)
    assert study.measured_crossing(static, other) == 5
    assert study.measured_crossing(static, {**other, "step_times_s": [0.1] * 20}) is None


def test_break_even_in_a_result_matches_its_medians(result):
    s, e = result["static"], result["eager"]
    expected = None
    if e["step_s"] > s["step_s"]:
        expected = max(1, math.ceil((s["build_s"] + s["compile_s"]) / (e["step_s"] - s["step_s"])))
    assert result["break_even_batches"] == expected


# ------------------------------------------------------------------ the twin run
def test_twin_run_agrees_on_a_plain_model(rng):
    params, batches = regression_case(rng, 1)
    twin = study.twin_run(regression, params, batches[0])
    assert twin["structure"] == "same" and twin["first_mismatch"] is None
    assert twin["forward_nodes"] == 5
    assert twin["gradients"] == 5 + 2      # matmul, add, sub, pow, mean; then W and b
    assert twin["max_abs_diff_value"] <= 1e-12 and twin["max_abs_diff_grad"] <= 1e-12


def log_sigmoid_loss(x, w):
    return sg.mean(-sg.log(sg.sigmoid(x * w)))


def test_twin_run_names_the_first_node_that_differs():
    """Static mode computes log(sigmoid(z)) in its stable form; eager computes it as written, so at
    z = -800 the two differ first at the log, which the twin run names with the user's line."""
    with np.errstate(all="ignore"):
        twin = study.twin_run(log_sigmoid_loss, [np.array(1.0)], (np.array([1.0, -800.0, 2.0]),))
    m = twin["first_mismatch"]
    assert m is not None and m["kind"] == "value" and m["op"] == "log"
    assert m["source"].startswith(THIS_FILE + ":")


def test_twin_run_reports_different_graphs():
    def shifty(x, w):
        y = x * w
        if eager.is_eager(y):          # a model whose eager run takes another path
            y = y + 0.0
        return sg.sum(y)
    twin = study.twin_run(shifty, [np.ones(2)], (np.ones(2),))
    assert twin["structure"] != "same" and twin["first_mismatch"] is None


# ------------------------------------------------------------------ outputs
def test_tables(result):
    table = study.format_table(result)
    for text in ("regression", "static", "eager", "step (median)", "peak memory", "break-even", "twin run"):
        assert text in table
    md = study.summary_table([result, result]).splitlines()
    assert md[0].startswith("| workload") and len(md) == 4 and md[2].startswith("| regression")
    assert "regression" in study.summary_table([result], markdown=False)
    assert any("regression" in line for line in study.findings([result]))


def test_save_json_and_plot(result, tmp_path):
    path = study.save_json([result], tmp_path / "study.json")
    assert json.loads(open(path).read())[0]["name"] == "regression"
    picture = tmp_path / "study.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert study.plot([result], picture) is None and not picture.exists()
    else:
        assert study.plot([result], picture) == picture and picture.stat().st_size > 0


def test_compare_checks_its_inputs():
    with pytest.raises(ValueError, match="at least one batch"):
        study.compare(regression, [np.ones((3, 2)), np.zeros(2)], [], torch=False)


def test_a_smaller_last_batch_becomes_a_dynamic_dimension(rng):
    params, batches = regression_case(rng, 3)
    batches.append((batches[0][0][:5], batches[0][1][:5]))
    r = study.compare(regression, params, batches, torch=False, twin=False)
    assert r["eager"]["losses_max_abs_diff"] < 1e-12


# ------------------------------------------------------------------ PyTorch as a third column
def test_torch_column(rng):
    pytest.importorskip("torch")
    params, batches = regression_case(rng)
    r = study.compare(regression, params, batches, lr=0.1, torch=True, twin=False)
    t = r["torch"]
    assert t["losses_max_abs_diff"] < 1e-10
    assert t["nodes_by_role"]["forward"] == 5 and t["peak_bytes"] is None
    assert t["step_over_static"] > 0 and "break_even_batches" in t
    json.dumps(r)


def test_torch_replay_skips_what_it_cannot_translate(rng):
    torch = pytest.importorskip("torch")

    def odd(x, w):          # getitem_grad says, in its OpDef, why it has no torch twin
        return sg.sum(sg.getitem_grad(w * x, (4, 3), np.s_[1:3]))
    with pytest.raises(study.Unsupported, match="getitem_grad"):
        study.torch_program(odd, [np.ones((2, 3))], (np.ones((2, 3)),), torch)
    r = study.compare(odd, [np.ones((2, 3))], [(np.ones((2, 3)),)] * 2, twin=False)
    assert "torch" not in r and "getitem_grad" in r["torch_skipped"]


# ------------------------------------------------------------------ the workloads and the command
@pytest.mark.slow
def test_quick_workloads_run(capsys):
    results = study.run_study(quick=True, torch=False)
    assert [r["name"].split()[0] for r in results] == ["sigmoid", "moons", "MLP", "deep"]
    for r in results:
        assert r["eager"]["losses_max_abs_diff"] < 1e-12
        assert r["twin"]["structure"] == "same" and r["twin"]["first_mismatch"] is None
    out = capsys.readouterr().out
    assert "| workload |" in out and "break-even" in out


def test_sigmoid_net_is_the_worked_example():
    x, y = study.SIGMOID_NET_BATCH
    ps = [eager.tensor(p, requires_grad=True) for p in study.SIGMOID_NET_PARAMS]
    assert sum(p.value.size for p in ps) == 20
    loss = study.sigmoid_net(eager.tensor(x), eager.tensor(y), *ps)
    loss.backward()
    assert loss.item() == pytest.approx(0.175595, abs=5e-7)
    assert ps[0].grad[0, 0] == pytest.approx(0.006731, abs=5e-7)
    assert ps[5].grad == pytest.approx(0.627673, abs=5e-7)


def test_bench_study_flag(tmp_path, capsys, monkeypatch):
    from staticgrad.cli import main
    every = study.workloads
    monkeypatch.setattr(study, "workloads", lambda quick, seed: every(quick, seed)[:1])
    out = tmp_path / "study.json"
    # --threads 0 runs in this process (no relaunch with BLAS thread variables).
    assert main(["bench", "--study", "--quick", "--peers", "none", "--threads", "0", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc) == 1 and all("static" in r and "eager" in r for r in doc)
    assert "measurements written to" in capsys.readouterr().out


def test_the_example_script(capsys, monkeypatch, tmp_path):
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "static_vs_dynamic.py"
    spec = importlib.util.spec_from_file_location("example_static_vs_dynamic", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    every = study.workloads
    monkeypatch.setattr(study, "workloads", lambda quick, seed=0: every(quick, seed)[1:2])
    assert example.main(["--quick", "--no-torch", "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    # Worked example 3 by hand, statically and eagerly, then the study's table and findings.
    assert "  L           0.175595    0.175595    0.175595" in out
    assert "  dL/db       0.627673    0.627673    0.627673" in out
    assert "moons MLP" in out and "- moons MLP" in out
    assert json.loads((tmp_path / "s.json").read_text())[0]["name"].startswith("moons")
