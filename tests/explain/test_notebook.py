"""Jupyter display: compiled functions and graph tensors give IPython their picture as SVG, or None."""
import numpy as np

import staticgrad as sg
from staticgrad import eager, nn
from staticgrad.explain import notebook
from tests.explain.test_dot import needs_graphviz


def _model():
    x = sg.placeholder((None, 2), name="x")
    y = nn.MLP([2, 4, 1], activation="tanh", seed=0)(x)
    return x, y, sg.compile(y, inputs=[x])


@needs_graphviz
def test_a_function_and_a_tensor_show_their_picture():
    x, y, fn = _model()
    for target in (fn, y):
        svg = target._repr_svg_()
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
        assert "matmul" in svg and "mlp.0" in svg            # its nodes, in their name scopes
    assert eager.tensor(np.ones(2))._repr_svg_() is None     # an eager tensor shows its value


def test_without_graphviz_the_notebook_falls_back_to_the_text_repr(monkeypatch):
    x, y, fn = _model()
    monkeypatch.setattr(notebook.shutil, "which", lambda name: None)
    assert fn._repr_svg_() is None and y._repr_svg_() is None
    assert repr(fn).startswith("<staticgrad.Function(x)") and "shape=(None, 1)" in repr(y)


@needs_graphviz
def test_a_big_graph_is_collapsed_or_not_laid_out(monkeypatch):
    x, y, fn = _model()
    monkeypatch.setattr(notebook, "FULL_UP_TO", 5)
    svg = fn._repr_svg_()
    assert "<title>scope_mlp_0</title>" in svg and "<title>scope_mlp_1</title>" in svg
    monkeypatch.setattr(notebook, "BOXES_UP_TO", 2)
    assert "parts even with its name scopes collapsed, is not drawn here" in fn._repr_svg_()
    monkeypatch.setattr(notebook, "COUNT_UP_TO", 5)
    for target in (fn, y):
        note = target._repr_svg_()
        assert note.startswith("<svg") and "more than 5 nodes is not drawn here" in note
        assert "collapse=True" in note
