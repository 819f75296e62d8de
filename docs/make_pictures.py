"""Render the pictures under docs/ (run: .venv/bin/python docs/make_pictures.py; needs Graphviz's dot).

The 2-3-2-1 sigmoid network with 20 parameters and the polynomial of docs/worked_examples.md
(examples 3 and 1), drawn the ways `sg.to_dot` offers (forward and backward side by side, values and gradient
flow, name scopes collapsed, what the passes did), a tanh RNN's loops, an MLP's Adam step (collapsed, whole).
"""
import os

import staticgrad as sg
from staticgrad.study.workloads import SIGMOID_NET_BATCH, sigmoid_net_graph

HERE = os.path.dirname(os.path.abspath(__file__))


def sigmoid_net():
    """Worked example 3: h = σ(Wx + b1), g = σ(Uh + d), ŷ = v·g + b, L = mean((ŷ - y)²)."""
    net = sigmoid_net_graph()
    grads = sg.grad(net["loss"], net["params"])
    fn = sg.compile([net["loss"]] + grads, inputs=[net["x"], net["y"]])
    x, y = SIGMOID_NET_BATCH
    return fn, {"x": x, "y": y}


def polynomial():
    """Worked example 1: y = 2u³ + 3uv + 4v² + 5 at u=5, v=7."""
    u = sg.placeholder((), name="u", requires_grad=True)
    v = sg.placeholder((), name="v", requires_grad=True)
    t1 = u * u
    t2 = t1 * u
    t3 = 2 * t2
    t4 = u * v
    t5 = 3 * t4
    t6 = v * v
    t7 = 4 * t6
    s1 = t3 + t5
    s2 = s1 + t7
    y = s2 + 5
    names = dict(t1=t1, t2=t2, t3=t3, t4=t4, t5=t5, t6=t6, t7=t7, s1=s1, s2=s2, y=y)
    for name, t in names.items():     # every node named, so the trace reads the same in every run
        t.name = name
    return sg.compile([y] + sg.grad(y, [u, v]), inputs=[u, v])


def rnn_loop():
    """h_t = tanh(x_t Wx + h_{t-1} Wh + b) over 50 steps by sg.scan, loss = 0.5 mean(h²), and the
    gradients of Wx, Wh and b (the reverse loop), compiled."""
    # (imported here, not at the top: the lines above keep the numbers the README quotes)
    import numpy as np
    rng = np.random.default_rng(0)
    X = sg.placeholder((50, 1, 3), name="X")
    Wx = sg.parameter(rng.normal(size=(3, 4)) * 0.5, name="Wx")
    Wh = sg.parameter(rng.normal(size=(4, 4)) * 0.5, name="Wh")
    b = sg.parameter(np.zeros(4), name="b")

    def step(h, x):
        h = sg.tanh(x @ Wx + h @ Wh + b)
        h.name = "h"
        return h, h
    _, hs = sg.scan(step, sg.constant(np.zeros((1, 4)), name="h"), xs=X)
    loss = 0.5 * sg.mean(hs * hs)
    loss.name = "loss"
    return sg.compile([loss] + sg.grad(loss, [Wx, Wh, b]), inputs=[X])


def adam_step():
    """One Adam step of a 2-8-8-1 tanh MLP on a logistic loss: nn's layers and optim's states build in name
    scopes, so collapse=True draws a box per layer and per optimizer state."""
    from staticgrad import nn, optim
    x, t = sg.placeholder((None, 2), name="x"), sg.placeholder((None, 1), name="t")
    model = nn.MLP([2, 8, 8, 1], activation="tanh", seed=0)
    loss = nn.binary_cross_entropy_with_logits(model(x), t)
    loss.name = "loss"
    opt = optim.Adam(model, lr=0.01)
    return sg.compile(loss, inputs=[x, t], updates=opt.updates(loss))


def main():
    net, feeds = sigmoid_net()
    out = lambda name: os.path.join(HERE, name)      # noqa: E731
    written = [
        sg.save_dot(net, out("sigmoid_net.svg")),
        sg.save_dot(net, out("sigmoid_net.png")),
        sg.save_dot(net, out("sigmoid_net_values.svg"), feeds=feeds),
        sg.save_dot(net, out("sigmoid_net_flow.svg"), feeds=feeds, view="flow"),
        sg.save_dot(net, out("sigmoid_net_collapsed.svg"), collapse=True),
        sg.save_dot(sg.diff_dot(net), out("sigmoid_net_passes.svg")),
    ]
    poly = polynomial()
    written.append(sg.save_dot(poly, out("polynomial_flow.svg"), feeds=(5.0, 7.0), view="flow"))
    with open(out("polynomial_trace.txt"), "w") as fh:
        sg.trace(poly, (5.0, 7.0), file=fh)
    written.append(out("polynomial_trace.txt"))
    written.append(sg.save_dot(rnn_loop(), out("rnn_loop.svg")))
    step = adam_step()      # (built last: the ids above stay those the docs quote)
    written.append(sg.save_dot(step, out("mlp_adam_step_collapsed.svg"), collapse=True))
    written.append(sg.save_dot(step, out("mlp_adam_step.svg")))
    for path in written:
        print(os.path.relpath(path))


if __name__ == "__main__":
    main()
