"""Smoke tests of benchmarks/ and `staticgrad bench`: every workload runs for a few rounds, the JSON has
its shape, staticgrad and the hand-written numpy reference compute the same numbers, and the reference
itself is right. No timing is asserted."""
import argparse
import json

import numpy as np
import pytest

from benchmarks import cli as bench
from benchmarks import measure, reference, workloads


def _settings(**overrides):
    return bench.quick_settings(**{"peers": [], "rounds": 2, "target_s": 0.0005, "budget_s": 0.01, **overrides})


@pytest.fixture(scope="module")
def doc():
    return bench.run(_settings(workloads=list(bench.WORKLOAD_NAMES), compile_ops=[40]), log=lambda msg: None)


def test_reference_a_reproduces_worked_example_3():
    wl = workloads.get("A")
    loss, gW, gb1, gU, gd, gv, gb = reference.prepare(wl, workloads.make_data(wl)).check()
    assert loss == pytest.approx(workloads.A_EXPECTED_LOSS, abs=1e-6)
    assert gW[0, 0] == pytest.approx(0.006731, abs=1e-6)
    assert gb == pytest.approx(0.627673, abs=1e-6)
    assert [g.shape for g in (gW, gb1, gU, gd, gv)] == [(3, 2), (3,), (2, 3), (2,), (2,)]
    assert sum(np.size(g) for g in (gW, gb1, gU, gd, gv, gb)) == 20


def _central_difference(f, x, k, eps=1e-6):
    x = x.copy()
    x.flat[k] += eps
    plus = f(x)
    x.flat[k] -= 2 * eps
    return (plus - f(x)) / (2 * eps)


def test_reference_chain_gradient_matches_finite_differences():
    x = np.random.default_rng(0).uniform(-0.2, 0.2, size=5)
    loss, gx = reference.chain_grad(x, cycles=7)
    for k in range(x.size):
        assert gx[k] == pytest.approx(_central_difference(lambda z: reference.chain_grad(z, 7)[0], x, k), rel=1e-6)


def test_reference_sgd_step_matches_finite_differences():
    wl = workloads.get("B")
    data = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in workloads.make_data(wl).items()}
    X, t = data["X"][:16], data["t"][:16]
    params = {k: data[k] for k in workloads.B_PARAM_NAMES}

    def loss_at(name, value):
        trial = {**{k: v.copy() for k, v in params.items()}, name: value}
        return reference.mlp_sgd_step(trial, X, t, lr=0.0)

    rng = np.random.default_rng(1)
    for name in ("W1", "b2", "W3"):
        after = {k: v.copy() for k, v in params.items()}
        reference.mlp_sgd_step(after, X, t, lr=1.0)          # after = before - gradient
        for k in rng.choice(params[name].size, size=2, replace=False):
            grad = params[name].flat[k] - after[name].flat[k]
            assert grad == pytest.approx(_central_difference(lambda v: loss_at(name, v), params[name], k),
                                         rel=1e-5, abs=1e-9)


def test_every_workload_runs_and_staticgrad_equals_the_reference(doc):
    names = [e["name"] for e in doc["workloads"]]
    assert names == list(bench.WORKLOAD_NAMES) + ["chain40"]
    for entry in doc["workloads"]:
        result = entry["results"]["staticgrad"]
        assert result["status"] == "ok", (entry["name"], result)
        assert result["max_rel_err"] <= workloads.get(entry["name"]).rtol
        assert result["median_s"] > 0 and result["numpy"]["median_s"] > 0
        assert result["ratio"] == pytest.approx(result["median_s"] / result["numpy"]["median_s"])
        assert set(result["costs"]) == {"build", "grad", "compile", "first_call"}
        assert result["rounds"] == len(result["samples_s"]) >= 2
        assert result["other_clock"]["clock"] == "wall"


def test_json_round_trips_and_table_names_every_workload(doc, tmp_path):
    path = bench.write_json(doc, str(tmp_path))
    loaded = json.loads(open(path).read())
    assert loaded["schema"] == 1
    assert {"settings", "machine", "blas", "workloads", "seconds"} <= set(loaded)
    assert loaded["settings"]["threads"] == 1
    table = bench.format_table(loaded)
    for entry in loaded["workloads"]:
        assert f"{entry['name']}: " in table
    assert "Issue 4 goals:" in table


def test_a_wrong_implementation_is_reported_not_timed():
    wl = workloads.get("D")
    data = workloads.make_data(wl)

    def wrong(workload, data):
        good = reference.prepare(workload, data)
        return workloads.Prepared("wrong", good.call, lambda: [v * 1.001 for v in good.check()])
    result = measure.measure(wl, data, wrong, rounds=2, target_s=0.0005)
    assert result["status"] == "mismatch"
    assert "median_s" not in result and result["max_rel_err"] > wl.rtol


def test_interleaved_timing_shape():
    stats = measure.time_interleaved({"a": lambda: None, "b": lambda: sum(range(10))}, rounds=3, target_s=0.0005,
                                     clock="wall")
    for name in ("a", "b"):
        assert stats[name]["clock"] == "wall" and stats[name]["rounds"] == 3
        assert stats[name]["q1_s"] <= stats[name]["median_s"] <= stats[name]["q3_s"]
        assert stats[name]["calls_per_round"] >= 1


def test_paired_ratio_compares_each_round_with_its_neighbour(doc):
    # a slow machine in round 2 weighs on both of its rounds: round by round the ratio stays 0.5
    spread = measure.paired_ratio([1.0, 4.0, 1.0, 1.0, 1.0], [2.0, 8.0, 2.0, 2.0, 2.0])
    assert spread == {"median": 0.5, "q1": 0.5, "q3": 0.5}
    assert measure.paired_ratio([1.0, 3.0], [2.0, 2.0])["median"] == 1.0
    result = next(e for e in doc["workloads"] if e["name"] == "D")["results"]["staticgrad"]
    assert result["paired_ratio"]["q1"] <= result["paired_ratio"]["median"] <= result["paired_ratio"]["q3"]
    assert "round by round: median" in "\n".join(bench.goal_lines(doc))


def test_bench_env_unpins_openblas_and_fixes_threads():
    env = bench.bench_env(1, base={"OPENBLAS_CORETYPE": "Prescott", "OPENBLAS_L2_SIZE": "1", "HOME": "/x"})
    assert "OPENBLAS_CORETYPE" not in env and "OPENBLAS_L2_SIZE" not in env
    assert env["HOME"] == "/x" and env["OPENBLAS_NUM_THREADS"] == "1" and env[bench.CHILD_MARK] == "1"
    assert "OMP_NUM_THREADS" not in bench.bench_env(0, base={})


def test_command_line_options():
    parser = bench.add_arguments(argparse.ArgumentParser())
    s = bench.settings_from_args(parser.parse_args(["--quick", "--only", "A,chain40", "--peers", "none"]))
    assert (s.workloads, s.compile_ops, s.peers, s.quick, s.clock) == (["A"], [40], [], True, "cpu")
    assert bench.settings_from_args(parser.parse_args(["--quick"])).peers == ["torch", "jax.jit"]
    s = bench.settings_from_args(parser.parse_args(["--threads", "0", "--peers", "torch,jax.jit"]))
    assert (s.clock, s.peers, s.compile_ops) == ("wall", ["torch", "jax.jit"], [1000, 100000])
    with pytest.raises(SystemExit):
        bench.settings_from_args(parser.parse_args(["--peers", "mxnet"]))


@pytest.mark.parametrize("name", ["A", "B", "D", "E"])
def test_torch_peer_equals_the_reference(name):
    pytest.importorskip("torch")
    from benchmarks.peers import torch_peer
    wl = workloads.get(name)
    data = workloads.make_data(wl)
    ok, err = workloads.outputs_close(torch_peer.prepare(wl, data).check(), reference.prepare(wl, data).check(),
                                      wl.rtol)
    assert ok, err


def test_floors_time_the_shared_calls_against_both_steps():
    from benchmarks import floors
    out = floors.measure(rounds=3, target_s=0.001, names=("B", "C"))     # V1's: tests/test_bench_cnn.py
    assert set(out) == {"B", "C"}
    for name, bounds in (("B", {"8 matrix products", "leanest numpy step"}),
                         ("C", {"1,500 sin/cos/tanh calls", "1,000 complex exp/tanh calls"})):
        rows = out[name]
        assert set(rows) == {"hand numpy", "staticgrad"} | bounds
        assert rows["hand numpy"]["ratio"] == 1.0
        assert all(r["median_s"] > 0 for r in rows.values())


def test_the_lean_b_step_is_the_hand_written_step():
    # A floor is only a floor if it does the whole job: same loss, same updates, step after step.
    from benchmarks import floors
    wl = workloads.get("B")
    data = workloads.make_data(wl)
    lean, params = floors.lean_step_of_b(data)
    state = {k: data[k].copy() for k in workloads.B_PARAM_NAMES}
    for _ in range(3):
        want = reference.mlp_sgd_step(state, data["X"], data["t"])
        got = lean()
        np.testing.assert_allclose(got, want, rtol=1e-5)
        for k in workloads.B_PARAM_NAMES:
            np.testing.assert_allclose(params[k], state[k], rtol=wl.rtol, atol=1e-6, err_msg=k)


def test_the_complex_exp_floor_computes_the_chains_sin_and_cos():
    from benchmarks import floors
    wl = workloads.get("C")
    data = workloads.make_data(wl)
    calls, pairs = floors.sincos_of_c(data, 3)
    calls()
    h = data["x"]
    for e in pairs:
        np.testing.assert_allclose(e.real, np.cos(h), rtol=1e-15, atol=0)
        np.testing.assert_allclose(e.imag, np.sin(h), rtol=1e-15, atol=0)
        h = np.tanh(np.sin(h) * workloads.CHAIN_SCALE + data["x"])


def test_without_a_peers_environment_peers_run_here_where_installed(monkeypatch, tmp_path):
    absent = str(tmp_path / "no-venv" / "bin" / "python")
    monkeypatch.setattr(bench, "DEFAULT_PEER_PYTHON", absent)
    monkeypatch.setattr(bench, "PEER_MODULES", {"torch": "numpy", "jax.jit": "no_such_module_here"})
    s = _settings(peers=["torch", "jax.jit"], peer_python=absent, workloads=["E"], compile_ops=[])
    assert bench.peer_interpreter(s) == (bench.sys.executable, ["jax.jit"])
    # a python asked for by name that is not there: every peer is skipped, none runs elsewhere
    s_named = _settings(peers=["torch"], peer_python=str(tmp_path / "elsewhere"))
    assert bench.peer_interpreter(s_named) == (None, ["torch"])
    ran, lines = [], []
    monkeypatch.setattr(bench, "run_peer", lambda peer, wl, settings, python=None: ran.append((peer, python)) or
                        {"impl": peer, "status": "ok"})
    doc = bench.run(s, log=lines.append)
    results = doc["workloads"][0]["results"]
    assert ran == [("torch", bench.sys.executable)]
    assert results["jax.jit"]["status"] == "skipped" and "no_such_module_here" in results["jax.jit"]["reason"]
    assert any("peers run in this interpreter where installed" in line for line in lines)


def test_the_table_prints_each_implementations_median_time_per_call():
    doc = {"settings": {"clock": "cpu", "threads": 1}, "machine": {"git": "x"}, "workloads": [
        {"name": "E", "title": "x + 1.0", "results": {"staticgrad": {
            "status": "ok", "ratio": 2.5, "median_s": 2.5e-6, "numpy": {"median_s": 1e-6}, "costs": {}}}}]}
    text = bench.format_table(doc)
    assert "Median time per call" in text and "2.5 µs" in text and "1 µs" in text


def test_common_spellings_of_peers_workloads_and_the_json_option():
    import argparse
    parser = bench.add_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--only", "a,d", "--peers", "jax,pytensor.function,torch.eager", "--json", "o.json"])
    settings = bench.settings_from_args(args)
    assert settings.workloads == ["A", "D"] and args.out == "o.json"
    assert settings.peers == ["jax.jit", "pytensor", "torch"]



def test_floors_help_prints_usage_and_measures_nothing():
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "benchmarks.floors", "--help"], cwd=root, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stdout + done.stderr
    assert "ms (" not in done.stdout


def test_the_huge_chain_reference_matches_finite_differences():
    from benchmarks import huge
    data = huge.make_data()
    loss, gx, gc, gd = huge.reference(data, cycles=6)
    for name, grad in (("x", gx), ("c", gc), ("d", gd)):
        for k in (0, 7):
            def at(v, name=name):
                return huge.reference({**data, name: v}, cycles=6)[0]
            assert grad[k] == pytest.approx(_central_difference(at, data[name], k), rel=1e-6)


def test_the_huge_graph_measurement_runs_a_size_in_its_own_process(tmp_path):
    from benchmarks import huge
    entry = huge.run_one(300, timeout=300, env=bench.bench_env(1))
    assert entry["status"] == "ok", entry
    assert list(entry["stages"]) == list(huge.STAGES)
    assert entry["result"]["forward_ops"] == 300 and entry["result"]["max_rel_err"] <= huge.RTOL
    assert all(s["peak_rss"] > 0 and s["cpu_s"] >= 0 for s in entry["stages"].values())
    assert "300" in huge.format_table([entry]).splitlines()[-1]


def test_bench_huge_runs_the_huge_graph_measurement_instead(monkeypatch, tmp_path):
    from benchmarks import huge
    seen = []
    monkeypatch.setattr(huge, "main", lambda argv: seen.append(argv) or 0)
    parser = bench.add_arguments(argparse.ArgumentParser())
    assert bench.run_from_args(parser.parse_args(["--huge", "--out", "x.json"]), relaunch=["false"]) == 0
    assert bench.run_from_args(parser.parse_args(["--huge", "--out", str(tmp_path)]), relaunch=["false"]) == 0
    assert seen[0] == ["--out", "x.json"] and seen[1][1].startswith(str(tmp_path)) and seen[1][1].endswith(".json")
