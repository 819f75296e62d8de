"""`staticgrad demo` (staticgrad/demo.py): trains, reports, writes pictures, source and the model."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import data, demo


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"
    lines = []
    result = demo.run(out_dir=str(out), epochs=30, log=lines.append, progress=False)
    return result, out, lines


def test_demo_trains_and_reports_accuracy(ran):
    result, _, lines = ran
    assert result["accuracy"] >= 0.9
    assert result["loss"][-1] < result["loss"][0]
    assert any(line.startswith("epoch    1  loss") for line in lines)       # no bar off a terminal: lines
    assert f"test accuracy {result['accuracy']:.3f}" in lines[[k for k, line in enumerate(lines)
                                                               if line.startswith("final:")][0]]


def test_demo_writes_forward_backward_pictures_source_and_model(ran):
    _, out, lines = ran
    for name in ("moons_forward_backward.dot", "moons_train_step.dot", "moons_train_step.py", "moons_train_step.npz",
                 "moons_model.npz"):
        assert (out / name).exists(), name
    for name in ("moons_forward_backward.dot", "moons_train_step.dot"):
        text = (out / name).read_text()
        assert "backward" in text and "matmul" in text
    assert "def run(" in (out / "moons_train_step.py").read_text()
    assert any(str(out) in line for line in lines)                          # it names the folder


def test_demo_provenance_names_the_lines_of_its_model(ran):
    _, out, _ = ran
    code = (out / "moons_train_step.py").read_text()
    places = re.findall(r"# .* @ ([^ ;]+)", code)
    assert places and all(p.startswith("demo_model.py:") for p in places), sorted(set(places))
    for name in ("moons_forward_backward.dot", "moons_train_step.dot"):
        built = re.findall(r"built at ([^ ,&\"]+)", (out / name).read_text())
        assert built and all(b.startswith("demo_model.py:") for b in built), sorted(set(built))
    text = (out / "moons_forward_backward.dot").read_text()
    assert "dloss/dmlp.0.weight" in text and "gradient d" not in text


def test_demo_svg_files_are_real_svg(ran):
    _, out, _ = ran
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    assert (out / "moons_forward_backward.svg").exists()
    for svg in out.glob("*.svg"):                   # never a half-drawn file left by a failed render
        assert "<svg" in svg.read_text()[:2000]


def test_demo_model_loads_back_and_predicts_as_trained(ran):
    result, out, _ = ran
    functions = sg.load(out / "moons_model.npz")
    X_test, y_test = data.make_moons(256, noise=0.15, seed=1)
    accuracy = np.mean((functions["predict"](X_test) > 0) == y_test)
    assert accuracy == pytest.approx(result["accuracy"])


def test_demo_train_step_module_runs_as_the_trained_step(ran):
    _, out, _ = ran
    spec = importlib.util.spec_from_file_location("demo_moons_train_step", out / "moons_train_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    step = sg.load(out / "moons_model.npz")["step"]          # the same trained values
    X, y = data.make_moons(64, noise=0.15, seed=7)
    for _ in range(2):
        np.testing.assert_allclose(module.step(X, y)[0], step(X, y), rtol=1e-12)


@pytest.mark.slow          # (a fresh interpreter imports staticgrad: about 2 s)
def test_demo_train_step_module_imports_from_its_folder(ran):
    _, out, _ = ran
    code = "import numpy as np, moons_train_step as m; print(m.run(np.zeros((64, 2)), np.zeros(64))[0][0])"
    root = os.path.dirname(os.path.dirname(sg.__file__))       # (this staticgrad, wherever it is installed)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], cwd=out, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert np.isfinite(float(done.stdout))


def test_demo_without_graphviz_says_so_once_in_one_whole_line_and_writes_dot(tmp_path, monkeypatch):
    monkeypatch.setattr("staticgrad.explain.dot.shutil.which", lambda name: None)      # no `dot` on PATH
    lines = []
    demo.run(out_dir=str(tmp_path), epochs=2, log=lines.append, progress=False)
    assert (tmp_path / "moons_train_step.dot").exists() and (tmp_path / "moons_forward_backward.dot").exists()
    assert not list(tmp_path.glob("*.svg"))
    said = [line for line in lines if "Graphviz" in line or "SVG" in line]
    assert said == [demo.NO_GRAPHVIZ]
    assert "\n" not in said[0] and "apt-get install graphviz" in said[0] and said[0].endswith("written")


def test_a_picture_dot_fails_on_is_named_with_the_whole_error(tmp_path, monkeypatch):
    x = sg.placeholder((2,), name="x")
    fn = sg.compile(x * 2.0, inputs=[x])

    def failing(target, path):
        if path.endswith(".svg"):
            open(path, "w").close()                     # the half-drawn file a failed render leaves
            raise sg.StaticgradError(f"save_dot: Graphviz `dot -Tsvg` failed on {path!r}:\nError: syntax error")
        return sg.save_dot(target, path)
    monkeypatch.setattr(demo, "save_dot", failing)
    lines = []
    written = demo._write_pictures([("a", fn), ("b", fn)], str(tmp_path), lines.append)
    assert [p.rsplit("/", 1)[-1] for p in written] == ["a.dot", "b.dot"] and not list(tmp_path.glob("*.svg"))
    svg = {name: str(tmp_path / name) + ".svg" for name in "ab"}
    assert lines == [f"  (no SVG for {name}: save_dot: Graphviz `dot -Tsvg` failed on {svg[name]!r}: "
                     "Error: syntax error)" for name in "ab"]           # each picture, its whole error


def test_demo_shows_a_progress_bar_when_asked(tmp_path, capsys):
    lines = []
    demo.run(out_dir=str(tmp_path), epochs=3, log=lines.append, progress=True)
    bar = capsys.readouterr().err
    assert "epoch 3/3" in bar and "100%" in bar and "loss=" in bar
    assert not any(line.startswith("epoch ") for line in lines)            # the bar replaces epoch lines
