"""The demo's model, written as a user writes one: a 2-8-8-1 MLP for two moons, its loss, its optimizer.

The package's frame filter counts this file as user code (``staticgrad.tensor.USER_CODE``), so what the
demo shows, the tooltips of its pictures and the comments of its generated code, names lines here.
"""
from __future__ import annotations

from types import SimpleNamespace

import staticgrad as sg
from staticgrad import nn, optim


def build(seed=0, lr=0.5):
    """The compiled training step (loss, then the SGD update) and prediction, plus what made them."""
    # 1. Describe the model once, over placeholders (None: any batch size).
    x = sg.placeholder((None, 2), name="x")
    t = sg.placeholder((None,), name="t")
    model = nn.MLP([2, 8, 8, 1], activation="tanh", seed=seed)
    logits = sg.reshape(model(x), (-1,)).named("logits")
    loss = nn.binary_cross_entropy_with_logits(logits, t).named("loss")

    # 2. Compile: forward + backward + the optimizer's updates become one function.
    opt = optim.SGD(model, lr=lr)
    step = sg.compile(loss, inputs=[x, t], updates=opt.updates(loss))
    predict = sg.compile(logits, inputs=[x])
    return SimpleNamespace(x=x, t=t, model=model, logits=logits, loss=loss, step=step, predict=predict)


def forward_backward(built):
    """The loss and its gradients, without the update: the picture of the backward pass."""
    grads = sg.grad(built.loss, built.model.parameters())
    return sg.compile([built.loss] + grads, inputs=[built.x, built.t])
