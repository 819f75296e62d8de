"""sg.summary: layers (name scopes or sub-modules), shapes, parameter counts, FLOPs per call, peak bytes."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import nn, optim


def classifier_step(model, features=784, lr=0.1):
    """A training step of ``model`` (SGD with momentum) on a batch of unknown size."""
    x = sg.placeholder((None, features), name="x")
    y = sg.placeholder((None,), dtype="int64", name="y")
    loss = nn.softmax_cross_entropy(model(x), y)
    return sg.compile(loss, inputs=[x, y], updates=optim.SGD(model, lr=lr, momentum=0.9).updates(loss))


def rows_by_layer(summary):
    return {row["layer"]: row for row in summary.rows}


def test_an_mlp_784_64_10_has_50890_parameters():
    model = nn.MLP([784, 64, 10])
    s = sg.summary(model)
    assert (s.total_params, s.trainable_params, s.non_trainable_params) == (50_890, 50_890, 0)
    assert [(r["layer"], r["type"], r["params"]) for r in s.rows] == [("mlp.0", "Linear", 50_240),
                                                                      ("mlp.1", "Linear", 650)]
    text = str(s)
    assert "Total params: 50,890 (397.6 KiB)" in text and "weight (784, 64), bias (64,)" in text
    # compiled into a training step: the same 50,890 trained, and the momentum buffers and the learning
    # rate as the optimizer's
    step = sg.summary(classifier_step(model), batch=32)
    assert step.trainable_params == 50_890 and step.optimizer_params == 50_890 + 1
    assert step.total_params == 2 * 50_890 + 1 and step.non_trainable_params == 0


def test_a_conv_nets_counts_are_its_parameters_and_buffers_sizes():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), sg.relu, nn.BatchNorm2d(4), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(36, 10))
    s = sg.summary(model)
    assert s.trainable_params == sum(p.value.size for p in model.parameters()) == 418
    assert s.non_trainable_params == sum(b.value.size for b in model.buffers()) == 9
    assert s.total_params == 427
    assert [r["layer"] for r in s.rows] == ["0.conv2d", "1.relu", "2.batchnorm2d", "3.maxpool2d", "4.flatten",
                                            "5.linear"]
    assert sum(r["params"] for r in s.rows) == 418 and sum(r["buffers"] for r in s.rows) == 9
    # on a graph: the rows are the scopes Sequential opens, each with the parameters its nodes read (batch
    # norm's running statistics, which it updates, too)
    g = sg.summary(model, input_shape=(None, 1, 8, 8), batch=5)
    rows = rows_by_layer(g)
    assert list(rows) == [r["layer"] for r in s.rows]
    assert rows["0.conv2d"]["type"] == "Conv2d" and rows["1.relu"]["type"] == "function"
    assert [rows[k]["params"] for k in rows] == [40, 0, 17, 0, 0, 370]
    assert [rows[k]["output_shape"] for k in rows] == ["(5, 4, 6, 6)", "(5, 4, 6, 6)", "(5, 4, 6, 6)",
                                                      "(5, 4, 3, 3)", "(5, 36)", "(5, 10)"]
    assert g.total_params == 427


def test_a_matmul_layers_flops_are_2_n_in_out():
    x = sg.placeholder((None, 784), name="x")
    model = nn.Sequential(nn.Linear(784, 64, bias=False), sg.relu)
    fn = sg.compile(model(x), inputs=[x])
    s = sg.summary(fn, batch=32)
    rows = rows_by_layer(s)
    assert rows["0.linear"]["forward"] == 2 * 32 * 784 * 64
    assert rows["0.linear"]["params"] == 784 * 64 and rows["0.linear"]["output_shape"] == "(32, 64)"
    assert rows["1.relu"]["forward"] == 32 * 64
    assert s.flops == s.flops_by_role["forward"] == 2 * 32 * 784 * 64 + 32 * 64
    assert "FLOPs per call: 3,213,312 (forward 3,213,312)" in str(s)


def test_peak_bytes_are_the_plans():
    fn = classifier_step(nn.MLP([784, 32, 10]))
    x, y = np.zeros((16, 784)), np.zeros(16, dtype=np.int64)
    before = sg.summary(fn, batch=16).peak_bytes        # a plan built for the summary, nothing run
    fn(x, y)
    assert before == fn.report()["peak_bytes"] > 0
    assert sg.summary(fn, feeds=[x, y]).peak_bytes == fn.report()["peak_bytes"]
    assert sg.summary(fn, batch=64).peak_bytes > before


def test_an_unknown_batch_is_said_to_be_taken_as_1():
    fn = classifier_step(nn.Sequential(nn.Linear(784, 32), nn.Linear(32, 10)))
    s = sg.summary(fn)
    assert not s.exact_sizes and s.sizes == {"x": (1, 784), "y": (1,)}
    text = str(s)
    assert "every unknown size taken as 1, so the figures below are per example (give batch= or feeds=)" in text
    assert "(None, 32)" in text
    # at size 1 the totals are the pass ledger's last row (its FLOPs at the same sizes)
    assert s.flops == fn.report().rows[-1]["flops"]
    given = sg.summary(fn, batch=np.int64(8))
    assert given.exact_sizes and "per example" not in str(given) and "(8, 32)" in str(given)


def test_a_training_steps_gradients_and_updates_go_to_their_layers():
    model = nn.Sequential(nn.Linear(784, 32), sg.relu, nn.Linear(32, 10))
    s = sg.summary(classifier_step(model), batch=8)
    rows = rows_by_layer(s)
    assert list(rows) == ["0.linear", "1.relu", "2.linear", "softmax_cross_entropy"]    # (nn's losses: a scope)
    # the weight's gradient is (8, 784)^T @ (8, 32): the input's gradient is never computed
    assert rows["0.linear"]["backward"] >= 2 * 8 * 784 * 32
    assert rows["0.linear"]["update"] > 0 and rows["1.relu"]["update"] == 0
    assert rows["softmax_cross_entropy"]["output_shape"] == "()"             # the loss
    assert sum(r[role] for r in s.rows for role in ("forward", "backward", "update")) == s.flops_as_written
    assert set(s.flops_by_role) == {"forward", "backward", "update"}
    assert s.flops == sum(s.flops_by_role.values())
    assert "Backward FLOPs" in str(s) and "Optimizer params: 25,451" in str(s)


def test_a_tensor_a_method_and_html():
    x = sg.placeholder((None, 3), name="x")
    w = sg.parameter(np.ones((3, 2)), name="w")
    with sg.name_scope("dense"):
        h = x @ w
    loss = sg.mean(h * h)
    s = sg.summary(loss, batch=4)
    assert [(r["layer"], r["params"], r["forward"]) for r in s.rows][0] == ("dense", 6, 2 * 4 * 3 * 2)
    fn = sg.compile(loss, inputs=[x])
    assert str(fn.summary(batch=4)).splitlines()[1:] == str(s).splitlines()[1:]
    page = s._repr_html_()
    assert "<table>" in page and "<td" in page and "dense" in page and "Total params: 6" in page
    assert nn.MLP([3, 2]).summary().total_params == 8


def test_bad_arguments_are_refused():
    x = sg.placeholder((None, None), name="seq")
    fn = sg.compile(sg.sum(x), inputs=[x])
    with pytest.raises(ValueError, match="batch= sizes the first axis only; placeholder 'seq' has shape"):
        sg.summary(fn, batch=4)
    assert sg.summary(fn, feeds=[np.zeros((4, 7))]).sizes == {"seq": (4, 7)}
    assert sg.summary(fn, feeds={"seq": np.zeros((2, 3))}).sizes == {"seq": (2, 3)}
    for batch in (0, 2.5, True):
        with pytest.raises(ValueError, match="batch must be a positive int"):
            sg.summary(fn, batch=batch)
    with pytest.raises(TypeError, match="expected a compiled Function, a Tensor or an nn.Module"):
        sg.summary("model")
    with pytest.raises(TypeError, match="an eager tensor keeps no graph to summarize"):
        sg.summary(sg.eager.tensor(np.ones(3)) * 2.0)
    with pytest.raises(TypeError, match="input_shape is for an nn.Module"):
        sg.summary(fn, input_shape=(None, 3))
    with pytest.raises(TypeError, match="give an nn.Module its input_shape too"):
        sg.summary(nn.Linear(2, 3), batch=4)
