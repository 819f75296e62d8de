"""The README's CNN snippet runs as written, and its two functions share parameters and running stats."""
from pathlib import Path

import numpy as np

import staticgrad as sg
from staticgrad import nn, optim


def test_the_readme_cnn_snippet_trains_and_predicts():
    text = (Path(__file__).parents[2] / "README.md").read_text()
    start = text.index("model = nn.Sequential(")
    space = {"np": np, "sg": sg, "nn": nn, "optim": optim}
    exec(compile(text[start:text.index("```", start)], "README.md", "exec"), space)
    rng = np.random.default_rng(0)
    X, t = rng.normal(size=(8, 1, 28, 28)), rng.integers(0, 10, 8)
    bn = space["model"].layers[1]
    before = np.array(bn.running_mean.value)
    first = space["step"](X, t)
    assert np.isfinite(first) and not np.array_equal(bn.running_mean.value, before)
    for _ in range(5):
        last = space["step"](X, t)
    assert last < first
    moved = np.array(bn.running_mean.value)
    logits = space["predict"](X)
    assert logits.shape == (8, 10)
    np.testing.assert_array_equal(bn.running_mean.value, moved)     # evaluation reads them only
    np.testing.assert_array_equal(logits, space["predict"](X))      # no dropout in evaluation
