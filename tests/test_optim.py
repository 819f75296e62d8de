"""staticgrad.optim: optimizers as graph updates, checked by hand and against torch.optim."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import nn, optim


def _quadratic(W0):
    """loss = 0.5 * sum(W^2), so the gradient is W itself: easy to follow by hand."""
    W = sg.parameter(W0, name="W")
    return W, 0.5 * sg.sum(sg.square(W))


def test_plain_sgd_step_by_hand():
    W, loss = _quadratic(np.array([1.0, -2.0]))
    opt = optim.SGD([W], lr=0.1)
    step = sg.compile(loss, updates=opt.updates(loss))
    assert step({}) == pytest.approx(2.5)
    np.testing.assert_allclose(W.value, [0.9, -1.8])


def test_sgd_momentum_by_hand():
    W, loss = _quadratic(np.array([1.0]))
    opt = optim.SGD([W], lr=0.1, momentum=0.5)
    step = sg.compile(loss, updates=opt.updates(loss))
    step({})                                   # buf = 1, W = 1 - 0.1 = 0.9
    step({})                                   # buf = 0.5 + 0.9 = 1.4, W = 0.9 - 0.14 = 0.76
    np.testing.assert_allclose(W.value, [0.76])
    np.testing.assert_allclose(opt.buffers[0].value, [1.4])


def test_adam_first_step_moves_each_weight_by_lr():
    # After bias correction, Adam's first step is lr * g / (|g| + eps): about lr in the gradient's sign.
    W, loss = _quadratic(np.array([3.0, -0.5]))
    opt = optim.Adam([W], lr=0.01)
    step = sg.compile(loss, updates=opt.updates(loss))
    step({})
    np.testing.assert_allclose(W.value, [2.99, -0.49], rtol=1e-6)
    assert float(opt.step_count.value) == 1.0


def test_state_is_held_in_graph_parameters_and_covered_by_the_updates():
    model = nn.Linear(3, 2, seed=0)
    opt = optim.Adam(model, lr=0.01)
    x = sg.placeholder((None, 3))
    loss = sg.mean(sg.square(model(x)))
    pairs = opt.updates(loss)
    updated = {p.id for p, _ in pairs}
    assert {p.id for p in model.parameters()} <= updated
    assert {p.id for p in opt.m + opt.v + [opt.step_count]} <= updated
    assert all(p.op == "parameter" for p in opt.state())
    # each buffer is named after its parameter (what a report or a saved step shows)
    assert [s.name for s in opt.m + opt.v] == [f"{p.label()}.{kind}" for kind in "mv" for p in model.parameters()]
    assert opt.parameters() == model.parameters() + opt.state()


def test_learning_rate_can_change_without_recompiling():
    W, loss = _quadratic(np.array([1.0]))
    opt = optim.SGD([W], lr=0.1)
    step = sg.compile(loss, updates=opt.updates(loss))
    opt.lr = 0.5
    step({})
    np.testing.assert_allclose(W.value, [0.5])
    assert opt.lr == 0.5


def test_float32_parameters_stay_float32():
    W = sg.parameter(np.ones(3, np.float32))
    loss = sg.sum(sg.square(W))
    for opt in (optim.SGD([W], lr=0.1, momentum=0.9), optim.Adam([W], lr=0.1), optim.AdamW([W], lr=0.1)):
        step = sg.compile(loss, updates=opt.updates(loss))
        step({})
        assert W.value.dtype == np.float32
        assert all(s.value.dtype == np.float32 for s in opt.state() if s.shape == (3,))


def test_bad_arguments_are_errors():
    W = sg.parameter(np.ones(2))
    with pytest.raises(TypeError, match=r"expected parameters .* got mul 'mul#\d+' of shape \(2,\)$"):
        optim.SGD([W * 2], lr=0.1)
    with pytest.raises(ValueError, match="does not require grad"):
        optim.SGD([sg.parameter(np.ones(2), requires_grad=False)], lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([W], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="^Adam: betas"):
        optim.Adam([W], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="^AdamW: eps and weight_decay must be >= 0"):
        optim.AdamW([W], eps=-1e-8)
    with pytest.raises(ValueError, match="^SGD: momentum and weight_decay must be >= 0"):
        optim.SGD([W], lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="^optimizer: a parameter appears twice"):
        optim.SGD([W, W], lr=0.1)
    with pytest.raises(ValueError, match="scalar"):
        optim.SGD([W], lr=0.1).updates(W * 1.0)


# ------------------------------------------------------------------ against torch.optim, step by step
CASES = {
    "sgd": (lambda p: optim.SGD(p, lr=0.1), lambda torch, p: torch.optim.SGD(p, lr=0.1)),
    "sgd_momentum_wd": (lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01),
                        lambda torch, p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01)),
    "sgd_nesterov": (lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
                     lambda torch, p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1)),
    "adam": (lambda p: optim.Adam(p, lr=0.01),
             lambda torch, p: torch.optim.Adam(p, lr=0.01)),
    "adam_wd": (lambda p: optim.Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
                lambda torch, p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    "adamw": (lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1),
              lambda torch, p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_torch_optim_for_100_steps(case):
    torch = pytest.importorskip("torch")
    make_ours, make_theirs = CASES[case]
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(16, 3)), rng.normal(size=(16, 2))
    W0, b0 = rng.normal(size=(3, 2)), rng.normal(size=2)

    W, b = sg.parameter(W0, name="W"), sg.parameter(b0, name="b")
    x, y = sg.placeholder((None, 3), name="x"), sg.placeholder((None, 2), name="y")
    loss = sg.mean(sg.square(sg.tanh(x @ W + b) - y))
    step = sg.compile(loss, inputs=[x, y], updates=make_ours([W, b]).updates(loss))

    tW = torch.tensor(W0, requires_grad=True)
    tb = torch.tensor(b0, requires_grad=True)
    topt = make_theirs(torch, [tW, tb])
    tX, tY = torch.tensor(X), torch.tensor(Y)
    for k in range(100):
        ours = step(X, Y)
        topt.zero_grad()
        theirs = ((torch.tanh(tX @ tW + tb) - tY) ** 2).mean()
        theirs.backward()
        topt.step()
        np.testing.assert_allclose(ours, theirs.item(), rtol=1e-9, err_msg=f"loss at step {k}")
        np.testing.assert_allclose(W.value, tW.detach().numpy(), rtol=1e-9, err_msg=f"W after step {k}")
        np.testing.assert_allclose(b.value, tb.detach().numpy(), rtol=1e-9, err_msg=f"b after step {k}")
    assert not np.allclose(W.value, W0)        # it did train
