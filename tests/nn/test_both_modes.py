"""One model object, both modes: nn modules and optimizers run on eager tensors (model(x), loss.backward(),
opt.step(), opt.zero_grad()) as they build graphs (opt.updates(loss)), and the two agree."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager, nn, optim

RNG = np.random.default_rng(0)
X = RNG.normal(size=(32, 4))
Y = np.arange(32) % 3


def _batch(i):
    rows = slice(i % 4 * 8, i % 4 * 8 + 8)
    return X[rows], Y[rows]


def _graph_step(model, opt):
    x = sg.placeholder((None, 4), name="x")
    y = sg.placeholder((None,), dtype="int64", name="y")
    loss = nn.softmax_cross_entropy(model(x), y)
    return sg.compile(loss, inputs=[x, y], updates=opt.updates(loss))


def _eager_step(model, opt, xb, yb):
    opt.zero_grad()
    loss = nn.softmax_cross_entropy(model(eager.tensor(xb)), yb)
    loss.backward()
    opt.step()
    return float(loss)


def _train(mode, model, opt, steps, start=0):
    if mode == "graph":
        step = _graph_step(model, opt)
        return [float(step(*_batch(i))) for i in range(start, start + steps)]
    return [_eager_step(model, opt, *_batch(i)) for i in range(start, start + steps)]


def test_an_mlp_trained_50_adam_steps_both_ways_gives_the_same_losses():
    runs = {}
    for mode in ("graph", "eager"):
        model = nn.MLP([4, 16, 16, 3], seed=1)
        runs[mode] = (_train(mode, model, optim.Adam(model, lr=0.01), 50), model)
    (graph_losses, graph_model), (eager_losses, eager_model) = runs["graph"], runs["eager"]
    assert graph_losses[-1] < 0.7 * graph_losses[0]           # it learned something
    np.testing.assert_allclose(eager_losses, graph_losses, rtol=1e-12, atol=1e-12)
    for p, q in zip(graph_model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(q.value, p.value, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make_opt", [
    lambda m: optim.SGD(m, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda m: optim.AdamW(m, lr=0.02),
], ids=["sgd-nesterov", "adamw"])
def test_one_model_and_optimizer_switch_modes_mid_training(make_opt):
    # eager steps, then graph steps on the same objects, against graph steps only: the optimizer's state
    # (momentum buffers, step count) is shared, so the runs agree
    model, reference = nn.MLP([4, 8, 3], seed=2), nn.MLP([4, 8, 3], seed=2)
    opt, ref_opt = make_opt(model), make_opt(reference)
    mixed = _train("eager", model, opt, 5) + _train("graph", model, opt, 5, start=5)
    mixed += _train("eager", model, opt, 5, start=10)
    np.testing.assert_allclose(mixed, _train("graph", reference, ref_opt, 15), rtol=1e-12)


def _convnet():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, seed=0), nn.BatchNorm2d(4), sg.relu, nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dropout(0.25, key=5), nn.Linear(4 * 3 * 3, 3, seed=1))


def test_a_conv_net_with_batch_norm_and_dropout_runs_the_same_both_ways():
    images = RNG.normal(size=(6, 1, 6, 6))
    labels = np.arange(6) % 3
    graph_model, eager_model = _convnet(), _convnet()
    graph_opt, eager_opt = optim.SGD(graph_model, lr=0.1, momentum=0.9), optim.SGD(eager_model, lr=0.1, momentum=0.9)
    x = sg.placeholder((None, 1, 6, 6))
    loss = nn.softmax_cross_entropy(graph_model(x), labels)
    step = sg.compile(loss, inputs=[x], updates=graph_opt.updates(loss))
    for _ in range(4):
        eager_opt.zero_grad()
        eager_loss = nn.softmax_cross_entropy(eager_model(eager.tensor(images)), labels)
        eager_loss.backward()
        eager_opt.step()
        np.testing.assert_allclose(float(eager_loss), float(step(images)), rtol=1e-12)
    # the running statistics, the batch count and the dropout key moved the same way
    for p, q in zip(graph_model.parameters() + graph_model.buffers(), eager_model.parameters() + eager_model.buffers()):
        np.testing.assert_allclose(q.value, p.value, rtol=1e-11, atol=1e-13, err_msg=p.label())
    assert eager_model.layers[1].num_batches_tracked.value == 4


def test_backward_accumulates_into_parameters_and_zero_grad_forgets():
    model = nn.MLP([4, 5, 3], seed=0)
    weight = model.layers[0].weight
    assert weight.grad is None
    nn.softmax_cross_entropy(model(eager.tensor(X)), Y).backward()
    once = weight.grad.copy()
    nn.softmax_cross_entropy(model(eager.tensor(X)), Y).backward()
    np.testing.assert_allclose(weight.grad, 2 * once)
    x, y = sg.placeholder((None, 4)), sg.placeholder((None,), dtype="int64")
    want = sg.compile(sg.grad(nn.softmax_cross_entropy(model(x), y), weight), inputs=[x, y])(X, Y)
    np.testing.assert_allclose(once, want, rtol=1e-13)
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_an_expression_over_parameters_alone_carries_the_gradient():
    # a weight penalty built from parameters only is graph; met by an eager loss it is run then, taped
    model = nn.Linear(4, 3, seed=0)
    penalty = 0.5 * sg.sum(model.weight * model.weight)
    loss = nn.softmax_cross_entropy(model(eager.tensor(X)), Y) + penalty
    loss.backward()
    x = sg.placeholder((None, 4))
    graph_loss = nn.softmax_cross_entropy(model(x), Y) + penalty
    want = sg.compile(sg.grad(graph_loss, model.weight), inputs=[x])(X)
    np.testing.assert_allclose(model.weight.grad, want, rtol=1e-13)


def test_eager_leaves_train_with_torch_style_optimizers():
    w = eager.tensor(RNG.normal(size=(4, 3)), requires_grad=True, name="w")
    b = eager.tensor(np.zeros(3), requires_grad=True, name="b")
    unused = eager.tensor(np.ones(2), requires_grad=True, name="unused")
    opt = optim.Adam([w, b, unused], lr=0.05)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = nn.softmax_cross_entropy(eager.tensor(X) @ w + b, Y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    # a parameter no gradient reached is left alone, and so is its state
    np.testing.assert_array_equal(unused.value, np.ones(2))
    np.testing.assert_array_equal(opt.m[2].value, np.zeros(2))


def test_a_failing_step_changes_no_parameter():
    model = nn.MLP([4, 5, 3], seed=0)
    opt = optim.Adam(model)
    nn.softmax_cross_entropy(model(eager.tensor(X)), Y).backward()
    before = [p.value.copy() for p in opt.parameters()]
    model.layers[1].weight.grad = np.ones((2, 2))
    with pytest.raises(sg.ShapeError, match=r"gradient of parameter 'mlp.1.weight' of shape \(5, 3\) has shape"):
        opt.step()
    for p, old in zip(opt.parameters(), before):
        np.testing.assert_array_equal(p.value, old)


def test_optimizer_errors_are_short_and_name_the_tensor():
    big = eager.tensor(np.zeros((300, 300)), name="big")
    with pytest.raises(ValueError) as err:
        optim.Adam([big])
    assert str(err.value) == ("optimizer: eager tensor 'big' of shape (300, 300) does not require grad, so it "
                              "cannot be trained")
    with pytest.raises(TypeError, match=r"^Adam.updates builds the step as graph.* call loss.backward\(\)"):
        model = nn.Linear(4, 3)
        optim.Adam(model).updates(nn.softmax_cross_entropy(model(eager.tensor(X)), Y))
    with pytest.raises(TypeError) as err:
        optim.SGD([np.zeros((300, 300))], lr=0.1)
    assert len(str(err.value)) < 200 and "ndarray of shape (300, 300)" in str(err.value)


def test_a_recurrent_layer_runs_eagerly_with_its_own_parameters():
    rnn = nn.GRU(3, 4, seed=0)
    seq = RNG.normal(size=(5, 2, 3))
    out, _ = rnn(eager.tensor(seq))
    sg.sum(out * out).backward()
    x = sg.placeholder((5, 2, 3))
    graph_out, _ = rnn(x)
    want = sg.compile(sg.grad(sg.sum(graph_out * graph_out), rnn.parameters()), inputs=[x])(seq)
    for p, g in zip(rnn.parameters(), want):
        np.testing.assert_allclose(p.grad, g, rtol=1e-12, atol=1e-14, err_msg=p.label())


def test_a_learned_initial_state_gets_its_gradient_in_an_eager_scan():
    h0 = sg.parameter(RNG.normal(size=(2, 4)), name="h0")
    w = sg.parameter(RNG.normal(size=(4, 4)) * 0.5, name="w")
    seq = RNG.normal(size=(3, 2, 4))

    def run(xs):
        def cell(h, x):
            h = sg.tanh(h @ w + x)
            return h, h
        return sg.scan(cell, h0, xs)[0]

    sg.sum(run(eager.tensor(seq))).backward()
    x = sg.placeholder((3, 2, 4))
    want = sg.compile(sg.grad(sg.sum(run(x)), [h0, w]), inputs=[x])(seq)
    np.testing.assert_allclose(h0.grad, want[0], rtol=1e-12)
    np.testing.assert_allclose(w.grad, want[1], rtol=1e-12)
