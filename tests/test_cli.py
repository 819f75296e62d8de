"""The `staticgrad` command."""
import importlib.metadata
import pathlib
import re
import shutil
import subprocess

import pytest

import staticgrad as sg
from staticgrad.cli import main


def test_demo_trains_prints_progress_and_writes_a_dot_file(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--epochs", "30"]) in (0, None)
    printed = capsys.readouterr().out
    assert re.search(r"loss", printed, re.I) and re.search(r"accuracy", printed, re.I), printed
    losses = [float(v) for v in re.findall(r"loss\s*[:=]?\s*([0-9]+\.[0-9]+)", printed, re.I)]
    accuracies = [float(v) for v in re.findall(r"accuracy\s*[:=]?\s*([0-9]+\.[0-9]+)", printed, re.I)]
    assert losses and accuracies, printed
    assert accuracies[-1] >= 0.8, printed          # two moons with a 2-8-8-1 MLP: 30 epochs are plenty
    dots = list(out.rglob("*.dot"))
    assert dots, f"no .dot file in {out}"
    texts = {path.name: path.read_text() for path in dots}
    for name, text in texts.items():
        assert text.lstrip().startswith(("digraph", "strict digraph")), name
        if shutil.which("dot"):                      # Graphviz can lay every one of them out
            done = subprocess.run(["dot", "-Tplain"], input=text, capture_output=True, text=True)
            assert done.returncode == 0, f"{name}: {done.stderr}"
            assert sum(line.startswith("node ") for line in done.stdout.splitlines()) > 10, name
    # the forward+backward graph is among them, its two parts told apart
    assert any("backward" in text and "matmul" in text for text in texts.values())


def test_demo_with_an_unknown_option_fails():
    with pytest.raises(SystemExit) as info:
        main(["demo", "--no-such-option"])
    assert info.value.code != 0


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"staticgrad {sg.__version__}\n"


def test_the_versions_agree():
    pyproject = (pathlib.Path(sg.__file__).parent.parent / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"$', pyproject, re.M).group(1)
    assert sg.__version__ == declared == importlib.metadata.version("staticgrad")


def test_no_command_fails():
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code != 0


def test_dot_passes_what_follows_the_double_dash_to_the_script(tmp_path):
    script = tmp_path / "model.py"
    script.write_text("import sys, json\nimport numpy as np, staticgrad as sg\n"
                      f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                      "x = sg.placeholder((2,), name='x')\nsg.compile(x * 2.0, inputs=[x])\n")
    out = tmp_path / "graphs"
    assert main(["dot", str(script), "--out", str(out), "--format", "dot", "--", "--foo", "bar"]) == 0
    assert (tmp_path / "argv.json").read_text() == '["--foo", "bar"]'
    assert list(out.glob("*.dot"))


@pytest.mark.parametrize("argv, message", [
    (["dot", "no_such_script.py"], "no such script: no_such_script.py"),
    (["bench", "--only", "Z"], "unknown workload 'Z'"),
    (["bench", "--only", "A,chainX"], "unknown workload 'chainX'"),
    (["bench", "--only", "chain6"], "multiple of 4"),
    (["demo", "--epochs", "0"], "--epochs: expected a positive whole number"),
    (["demo", "--epochs", "-5"], "--epochs: expected a positive whole number"),
])
def test_bad_arguments_are_usage_errors_before_anything_runs(argv, message, capsys, monkeypatch):
    import benchmarks.cli
    import staticgrad.demo
    monkeypatch.setattr(benchmarks.cli, "run_from_args", lambda *a, **k: pytest.fail("bench ran"))
    monkeypatch.setattr(staticgrad.demo, "run", lambda *a, **k: pytest.fail("demo ran"))
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_without_a_checkout_says_so_in_one_line(capsys, monkeypatch):
    import staticgrad.cli
    monkeypatch.setattr(staticgrad.cli, "_benchmarks_cli", lambda: None)     # as an installed package has it
    assert main(["bench", "--quick", "--only", "A"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "checkout" in err


def test_bench_options_come_from_the_checkouts_harness():
    import benchmarks.cli
    import staticgrad.cli
    assert staticgrad.cli._benchmarks_cli() is benchmarks.cli
