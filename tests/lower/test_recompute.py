"""staticgrad.lower.recompute: asked to (Backend(recompute_draws=True)), the backward pass draws dropout's masks
again where that lowers the plan's peak."""
import numpy as np

import staticgrad as sg
from staticgrad import optim
from staticgrad.lower import Backend, recompute
from staticgrad.lower.memory import plan_memory
from staticgrad.lower.shapes import at_sizes, concrete_shapes


def dropout_net(depth, memory_planning=True, recompute_draws=True):
    """A training step of ``depth`` relu layers of width 16, each followed by dropout, and its parameters."""
    rng = np.random.default_rng(0)
    sizes = [16] + [16] * depth + [3]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [sg.parameter(rng.standard_normal((a, b)) / 4), sg.parameter(np.zeros(b))]
    key = sg.random.key(0)
    x = sg.placeholder((None, 16), name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    h = x
    for k in range(depth):
        h = sg.dropout(sg.relu(h @ params[2 * k] + params[2 * k + 1]), 0.5, key=key)
    loss = sg.softmax_cross_entropy(h @ params[-2] + params[-1], t)
    step = sg.compile(loss, [x, t], updates=optim.SGD(params, lr=0.1).updates(loss),
                      backend=Backend(memory_planning=memory_planning, recompute_draws=recompute_draws))
    return step, params


def batch(n):
    rng = np.random.default_rng(1)
    return rng.standard_normal((n, 16)), rng.integers(0, 3, n)


def test_a_deep_dropout_net_draws_its_masks_again_and_trains_the_same():
    step, params = dropout_net(3)
    plain, plain_params = dropout_net(3, memory_planning=False)
    X, T = batch(256)
    for _ in range(3):
        np.testing.assert_allclose(step(X, T), plain(X, T), rtol=1e-13)
    for p, q in zip(params, plain_params):
        np.testing.assert_allclose(p.value, q.value, rtol=1e-12, atol=1e-15)
    summary = step.report().summary
    assert summary["recomputed_draws"] == 3 and summary["recompute_bytes_saved"] > 0
    assert step.source.count("random_bernoulli_") == 6          # each mask drawn twice


def test_masks_are_held_unless_asked():
    step, _ = dropout_net(3, recompute_draws=False)
    step(*batch(256))
    assert "recomputed_draws" not in step.report().summary
    assert step.source.count("random_bernoulli_") == 3


def plan_both_ways(depth, rows):
    step, _ = dropout_net(depth)
    X, T = batch(rows)
    ir = step.ir
    shapes = concrete_shapes(ir, list(ir.nodes), [X.shape, T.shape])
    graph, order = at_sizes(ir, list(ir.nodes), shapes)
    draws = recompute.late_draws(graph, order)
    assert len(draws) == depth
    again, again_order, again_shapes = recompute.split(graph, order, shapes, draws)
    for i in again_order:
        node = again.nodes[i]
        if node.role != "forward":
            assert not set(draws) & set(node.inputs)       # backward reads the new draws only
    held = plan_memory(graph, order, shapes).peak_planned
    drawn = plan_memory(again, again_order, again_shapes).peak_planned
    return held, drawn, recompute.choose(graph, order, shapes)[3]


def test_masks_are_drawn_again_only_where_that_lowers_the_peak_by_what_it_reports():
    outcomes = set()
    for depth, rows in ((1, 4), (3, 256)):
        held, drawn, stats = plan_both_ways(depth, rows)
        if drawn < held:
            assert stats == {"recomputed_draws": depth, "recompute_bytes_saved": held - drawn}
        else:
            assert stats == {}
        outcomes.add(drawn < held)
    # (one layer at batch 4: the peak is the weight gradients and updates, where the mask is dead already)
    assert outcomes == {True, False}
