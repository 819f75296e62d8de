"""The README's loop example runs as written, and its loop is hoisted and differentiated as it says."""
from pathlib import Path

import numpy as np

import staticgrad as sg


def _snippet():
    text = (Path(__file__).parents[2] / "README.md").read_text()
    start = text.index("rng = np.random.default_rng(0)\nX = sg.placeholder((None, None, 32)")
    return text[start:text.index("```", start)]


def test_the_readme_loop_example_runs_and_trains():
    space = {"np": np, "sg": sg}
    exec(compile(_snippet(), "README.md", "exec"), space)
    train, Wh = space["train"], space["Wh"]
    before = Wh.value.copy()
    train(np.random.default_rng(1).normal(size=(5, 8, 32)))
    assert not np.array_equal(before, Wh.value)
    report = train.report()
    assert report["plans"] == 3
    details = [row["details"] for row in report if row["pass"] == "loops"][0]
    assert details["merged"] == 1 and details["hoisted"] >= 1 and details["sunk"] >= 1
