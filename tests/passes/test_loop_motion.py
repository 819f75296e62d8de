"""passes/loop_motion.py's sinking of a weight's gradient into one matrix product over the steps, where
the loop's first carry is a constant zero: no stack of shifted carries is copied (checked every way by the
loops' harness: compiled, eager, numpy, finite differences, torch)."""
import numpy as np
import pytest

import staticgrad as sg
from tests.loops.harness import SG, check

R = np.random.default_rng(11)


def _rnn(reverse, zero=True):
    def model(m, X, W, U):
        def step(h, x):
            h = m.tanh(x @ W + h @ U)
            return h, h
        h0 = m.zeros((X.shape[1], U.shape[0])) if zero else m.const(np.full((X.shape[1], U.shape[0]), 0.3))
        return m.scan(step, h0, xs=X, reverse=reverse)
    return model


def _ops(model, *arrays):
    """The ops of the compiled loss and gradients (what check compiled too)."""
    X, W, U = (sg.placeholder(a.shape, name=n, requires_grad=True) for a, n in zip(arrays, "XWU"))
    h, hs = model(SG, X, W, U)
    loss = sg.sum(hs * hs) + sg.sum(h)
    fn = sg.compile(sg.grad(loss, [W, U]), inputs=[X, W, U])
    return [n.op for n in fn.ir.nodes.values()]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("steps", [1, 2, 7])
def test_a_zero_first_carry_adds_nothing_and_no_shifted_stack_is_made(reverse, steps):
    X, W, U = R.uniform(-1, 1, (steps, 3, 2)), R.uniform(-1, 1, (2, 4)), R.uniform(-1, 1, (4, 4))
    check(_rnn(reverse), X, W, U)
    assert "concatenate" not in _ops(_rnn(reverse), X, W, U)


@pytest.mark.parametrize("reverse", [False, True])
def test_any_other_first_carry_keeps_the_stack_of_carries(reverse):
    X, W, U = R.uniform(-1, 1, (5, 3, 2)), R.uniform(-1, 1, (2, 4)), R.uniform(-1, 1, (4, 4))
    check(_rnn(reverse, zero=False), X, W, U)
    assert "concatenate" in _ops(_rnn(reverse, zero=False), X, W, U)
