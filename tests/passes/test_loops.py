"""The loops pass's merging: the forward loop sg.grad extended replaces the original, also once the passes
before it rewrote inside the bodies (their twins then no longer share one traced body's tensors)."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.passes import loops

from . import assert_same_values

R = np.random.default_rng(19)


def scans(graph, depth=0):
    """(depth, reverse) of every scan of ``graph`` and of the bodies within, in graph order."""
    found = []
    for node in graph.nodes.values():
        if node.op == "scan":
            found.append((depth, node.attrs["reverse"]))
            found += scans(node.attrs["body"].graph, depth + 1)
    return found


def both(outputs, inputs, feeds, **options):
    """The compiled function (default passes) and its outputs, checked against optimize=False's."""
    fn = sg.compile(outputs, inputs=inputs, **options)
    got = fn(*feeds)
    assert_same_values(got, sg.compile(outputs, inputs=inputs, optimize=False)(*feeds))
    return fn


def rewritable_step(h, x):
    """A step the passes rewrite inside the body: h * 1.0 is h, 2.0 * 3.0 a constant."""
    return sg.tanh(h * 1.0 + x * (sg.constant(2.0) * 3.0)), h * h


@pytest.mark.parametrize("reverse", [False, True])
def test_a_forward_loop_and_its_extension_merge_after_their_bodies_were_rewritten(reverse):
    X = sg.placeholder((5, 3), name="X", requires_grad=True)
    h, ys = sg.scan(rewritable_step, sg.constant(np.zeros(3)), xs=X, reverse=reverse)
    loss = sg.sum(ys) + sg.sum(h * np.arange(3.0))
    fn = both([loss, h, ys] + sg.grad(loss, [X]), [X], [R.uniform(-1, 1, (5, 3))])
    assert sorted(scans(fn.ir)) == [(0, False), (0, True)]
    row = next(r for r in fn.report().rows if r["pass"] == "loops")
    assert row["details"]["merged"] == 1


def test_three_xs_and_a_rewritten_body_run_one_forward_loop():
    X, Y, Z = (sg.placeholder((4, 2), name=n, requires_grad=True) for n in "XYZ")

    def step(c, xyz):
        x, y, z = xyz
        return sg.sin(c * 1.0 + x * y) * (z + 0.0), c * z
    c, ys = sg.scan(step, sg.constant(np.ones(2)), xs=(X, Y, Z))
    loss = sg.sum(c * c) + sg.sum(ys)
    fn = both([loss] + sg.grad(loss, [X, Y, Z]), [X, Y, Z], [R.uniform(-1, 1, (4, 2)) for _ in range(3)])
    assert [reverse for _, reverse in scans(fn.ir)].count(False) == 1


def test_nested_loops_merge_at_each_level():
    """The outer forward loop and its extension merge; in the merged body, the inner loop each brought
    (each rewritten apart) merge in turn, as the pass runs inside the bodies."""
    A = sg.placeholder((3, 4, 2), name="A", requires_grad=True)

    def inner(d, r):
        return sg.tanh(d * 1.0 + r * (sg.constant(2.0) * 0.5)), d

    def outer(f, block):
        d, ys = sg.scan(inner, f * 1.0, xs=block)
        return sg.tanh(d) * f + sg.sum(ys * ys, axis=0), d
    f, fs = sg.scan(outer, sg.constant(np.full(2, 0.3)), xs=A)
    loss = sg.sum(f * f) + sg.sum(fs * fs)
    fn = both([loss] + sg.grad(loss, [A]), [A], [R.uniform(-1, 1, (3, 4, 2))])
    found = scans(fn.ir)
    assert found.count((0, False)) == 1 and found.count((0, True)) == 1
    forward = next(n for n in fn.ir.nodes.values() if n.op == "scan" and not n.attrs["reverse"])
    assert scans(forward.attrs["body"].graph) == [(0, False)]


def test_a_while_loop_recording_its_tape_replaces_its_rewritten_twin():
    x = sg.placeholder((3,), name="x", requires_grad=True)
    w = sg.parameter(np.array([0.5, 0.9, 1.1]), name="w")
    v, _ = sg.while_loop(lambda s: s[1] < 3.0,
                         lambda s: (sg.tanh(s[0] * 1.0 * w + x * (sg.constant(2.0) * 3.0)), s[1] + 1.0),
                         (x, sg.constant(0.0)))
    loss = sg.sum(v * v)
    fn = both([loss] + sg.grad(loss, [x, w]), [x], [np.array([0.1, -0.2, 0.3])])
    assert [n.attrs["record"] for n in fn.ir.nodes.values() if n.op == "while_loop"] == [2]


def test_twins_whose_inputs_a_loop_rewrite_changed_do_not_merge():
    """Hoisting gives a body other inputs: it is no longer known to compute its traced body's values."""
    X = sg.placeholder((4, 3), name="X", requires_grad=True)
    W = sg.parameter(R.uniform(-1, 1, (3, 3)), name="W")
    _, hs = sg.scan(lambda h, x: (sg.tanh(x @ W + h), h), sg.constant(np.zeros(3)), xs=X)
    loss = sg.sum(hs * hs)
    fn = sg.compile([loss] + sg.grad(loss, [W]), inputs=[X], passes=[])
    graph = fn.ir
    forward = [i for i, n in graph.nodes.items() if n.op == "scan" and not n.attrs["reverse"]]
    assert len(forward) == 2
    body = graph.nodes[forward[0]].attrs["body"]
    assert loops._takes_base_inputs(body)
    hoisted, moved = loops.loop_motion.hoist(graph, forward[0])
    assert moved and not loops._takes_base_inputs(hoisted.nodes[forward[0]].attrs["body"])
    merged, n = loops.merge(hoisted)
    assert n == 0 and merged is hoisted
