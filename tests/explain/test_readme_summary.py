"""The summary table the README prints is what sg.summary gives for the model it names."""
from pathlib import Path

import staticgrad as sg
from staticgrad import nn, optim


def test_the_readme_summary_table_is_current():
    text = (Path(__file__).parents[2] / "README.md").read_text()
    start = text.index("```\nFunction(x, y):") + 4
    shown = text[start:text.index("```", start)].rstrip("\n")
    model = nn.MLP([784, 64, 10], seed=0)
    x = sg.placeholder((None, 784), name="x")
    y = sg.placeholder((None,), dtype="int64", name="y")
    loss = nn.softmax_cross_entropy(model(x), y).named("loss")
    step = sg.compile(loss, inputs=[x, y], updates=optim.Adam(model).updates(loss))
    assert str(sg.summary(step, batch=64)) == shown
