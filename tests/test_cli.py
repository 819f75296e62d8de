"""The `staticgrad` command."""
import re
import shutil
import subprocess

import pytest

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


def test_no_command_fails():
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code != 0
