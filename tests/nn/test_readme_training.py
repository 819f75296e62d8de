"""The README's "Training a model" snippets run as written: the graph path trains, saves and loads, and the
define-by-run loop continues training the same model and optimizer objects."""
from pathlib import Path

import numpy as np
import pytest

SECTION = (Path(__file__).parents[2] / "README.md").read_text().split("## Training a model", 1)[1]


def _snippets():
    blocks = SECTION.split("```python\n")[1:3]
    return [block[:block.index("```")] for block in blocks]


@pytest.mark.slow           # (20 epochs of fit, saving and loading: about 2 s)
def test_the_training_section_runs_and_learns(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    graph_path, eager_path = _snippets()
    space = {}
    exec(compile(graph_path, "README.md", "exec"), space)
    assert space["history"].metrics[-1]["test_acc"] >= 0.9
    assert (space["labels"] == space["y_test"]).mean() >= 0.9
    assert (tmp_path / "moons_weights.npz").exists() and (tmp_path / "moons_model.npz").exists()
    steps_before = float(space["opt"].step_count.value)
    exec(compile(eager_path, "README.md", "exec"), space)
    assert float(space["opt"].step_count.value) == steps_before + len(space["batches"])
    assert np.isfinite(float(space["loss"]))
