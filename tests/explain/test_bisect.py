"""explain.bisect: the first pass after which an output differs or turns non-finite, or None."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad.explain import bisect
from staticgrad.graph import Node
from staticgrad.passes import DEFAULT, PassStats


def swap_add_for_sub(graph):
    """A deliberately broken pass: every add becomes a sub (same shapes, wrong values)."""
    changed = 0

    def visit(new, node):
        nonlocal changed
        if node.op == "add":
            new.add(node.copy(op="sub"))     # passes add changed copies; nodes are shared between graphs
            changed += 1
        return node.id

    return graph.rebuild(visit), PassStats("swap_add_for_sub", changed=changed)


def tanh_to_log(graph):
    """Broken in a louder way: tanh becomes log, so negative inputs give NaN. Returns only the graph."""
    def visit(new, node):
        if node.op == "tanh":
            new.add(node.copy(op="log"))
        return node.id

    return graph.rebuild(visit)


def swapping(old, new_op, name, same_input=False):
    """A deliberately broken pass named ``name``: every ``old`` node becomes ``new_op`` (over its first
    input twice with ``same_input``)."""
    def run(graph):
        def visit(new, node):
            if node.op == old:
                inputs = [node.inputs[0]] * 2 if same_input else node.inputs
                new.add(node.copy(op=new_op, inputs=inputs))
            return node.id
        return graph.rebuild(visit), PassStats(name, changed=1)
    return run


def nudge_constants(scale):
    """A pass that scales every floating constant by ``scale`` (a small change, or a large one)."""
    def nudge(graph):
        def visit(new, node):
            if node.op == "constant" and node.value.dtype.kind == "f":
                value = node.value * scale
                value.setflags(write=False)
                new.add(node.copy(value=value))
            return node.id
        return graph.rebuild(visit), PassStats("nudge", changed=1)
    return nudge


def mlp(rng):
    x = sg.placeholder((None, 4), name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    W1 = sg.parameter(rng.normal(size=(4, 8)), name="W1")
    b1 = sg.parameter(rng.normal(size=8), name="b1")
    W2 = sg.parameter(rng.normal(size=(8, 3)), name="W2")
    b2 = sg.parameter(rng.normal(size=3), name="b2")
    z = sg.tanh(x @ W1 + b1) @ W2 + b2
    loss = sg.softmax_cross_entropy(z, t) + 0.01 * sg.sum(W1 * W1)
    grads = sg.grad(loss, [W1, b1, W2, b2])
    feeds = {x: rng.normal(size=(6, 4)), t: rng.integers(0, 3, size=6)}
    return [loss, *grads], feeds


def test_default_pipeline_keeps_every_result(rng):
    outputs, feeds = mlp(rng)
    assert bisect(outputs, feeds) is None
    assert bisect(outputs, feeds, passes=DEFAULT) is None


def test_finds_the_broken_pass_among_good_ones(rng):
    outputs, feeds = mlp(rng)
    pipeline = ["constant_fold", "simplify", "cse", swap_add_for_sub, "cse", "dce"]
    assert bisect(outputs, feeds, passes=pipeline) == "swap_add_for_sub"


def test_broken_pass_first_or_last(rng):
    outputs, feeds = mlp(rng)
    assert bisect(outputs, feeds, passes=[swap_add_for_sub] + DEFAULT) == "swap_add_for_sub"
    assert bisect(outputs, feeds, passes=DEFAULT + [swap_add_for_sub]) == "swap_add_for_sub"


def test_pass_that_makes_results_nan_is_named_after_its_function(rng):
    outputs, feeds = mlp(rng)
    with np.errstate(all="ignore"):
        assert bisect(outputs, feeds, passes=["simplify", tanh_to_log, "dce"]) == "tanh_to_log"


def test_a_single_output_tensor(rng):
    x = sg.placeholder((3,), name="x")
    y = sg.sum(sg.exp(x) + x)
    assert bisect(y, {x: np.array([1.0, 2.0, 3.0])}, passes=["cse", swap_add_for_sub]) == "swap_add_for_sub"
    assert bisect(y, {x: np.array([1.0, 2.0, 3.0])}) is None


def test_changes_within_the_tolerance_are_not_reported():
    x = sg.placeholder((3,), name="x")
    y = x * 3.0
    feeds = {x: np.array([1.0, -2.0, 3.0])}
    assert bisect(y, feeds, passes=[nudge_constants(1 + 1e-12)]) is None
    assert bisect(y, feeds, passes=[nudge_constants(1 + 1e-12)], rtol=1e-14, atol=0) == "nudge"
    assert bisect(y, feeds, passes=[nudge_constants(1.001)]) == "nudge"


def test_stabilize_making_an_overflow_finite_is_not_a_break():
    x = sg.placeholder((2,), name="x", requires_grad=True)
    y = sg.log(sg.sigmoid(x))
    (g,) = sg.grad(sg.sum(y), [x])
    feeds = {x: np.array([-1000.0, 0.5])}
    with np.errstate(all="ignore"):
        assert bisect([y, g], feeds) is None


def test_a_result_turning_infinite_is_a_break():
    # replaces softplus(x) = log(1 + exp(x)) by exp: finite in, inf out for large x
    log_of_exp_unfolded = swapping("softplus", "exp", "softplus_to_exp")
    x = sg.placeholder((2,), name="x")
    with np.errstate(all="ignore"):
        assert bisect(sg.softplus(x), {x: np.array([1000.0, 0.0])}, passes=[log_of_exp_unfolded]) \
            == "softplus_to_exp"


def test_a_pass_that_leaves_a_graph_that_cannot_run_is_the_one_named():
    # the point of bisect is finding the pass to blame: a graph that fails at run time after a pass
    # (here an elementwise mul turned into a matmul with a 0-d operand) is a broken result of that pass
    mul_to_matmul = swapping("mul", "matmul", "mul_to_matmul")
    x = sg.placeholder((2, 3), name="x")
    y = sg.sum(x + x * 2)
    assert bisect(y, {x: np.ones((2, 3))}, passes=["cse", mul_to_matmul, "dce"]) == "mul_to_matmul"


def test_feeds_by_placeholder_name(rng):
    x = sg.placeholder((3,), name="x")
    y = sg.sum(x + x * 2)
    assert bisect(y, {"x": np.ones(3)}, passes=[swap_add_for_sub]) == "swap_add_for_sub"


def test_bisect_leaves_the_users_graph_alone(rng):
    outputs, feeds = mlp(rng)
    before = sg.compile(outputs, inputs=list(feeds), optimize=False)(*feeds.values())
    bisect(outputs, feeds, passes=[swap_add_for_sub, tanh_to_log])
    after = sg.compile(outputs, inputs=list(feeds), optimize=False)(*feeds.values())
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_unknown_pass_name_is_an_error(rng):
    outputs, feeds = mlp(rng)
    with pytest.raises(ValueError, match="nope"):
        bisect(outputs, feeds, passes=["cse", "nope"])


def replace_outputs(make):
    """A broken pass: every output node ``o`` is replaced by the node ``make(graph, new, o)`` adds."""
    def rewrite(graph):
        def visit(new, node):
            if node.id in graph.outputs:
                new.add(node)
                return make(new, node).id
            return node.id
        return graph.rebuild(visit), PassStats("replace_outputs", changed=1)
    return rewrite


def _added(new, node):
    new.add(node)
    return node


NEGATE = replace_outputs(lambda new, o: _added(new, Node("neg", [o.id], {}, o.shape, o.dtype, role=o.role)))
TO_FLOAT32 = replace_outputs(lambda new, o: _added(new, Node("cast", [o.id], {"dtype": np.dtype(np.float32)},
                                                              o.shape, np.dtype(np.float32), role=o.role)))


def test_an_infinity_changing_sign_is_a_break():
    x = sg.placeholder((3,), name="x")
    with np.errstate(all="ignore"):
        assert bisect(sg.exp(x), {x: np.full(3, 1000.0)}, passes=["cse", NEGATE]) == "replace_outputs"


def test_an_infinity_turning_nan_is_a_break():
    exp_to_inf_minus_inf = swapping("exp", "sub", "inf_minus_inf", same_input=True)
    x = sg.placeholder((2,), name="x")
    with np.errstate(all="ignore"):
        assert bisect(sg.exp(x), {x: np.array([np.inf, np.inf])}, passes=[exp_to_inf_minus_inf]) == "inf_minus_inf"


def test_a_nan_turning_into_a_number_is_a_break():
    sqrt_to_abs = swapping("sqrt", "abs", "sqrt_to_abs")
    x = sg.placeholder((2,), name="x")
    with np.errstate(all="ignore"):
        assert bisect(sg.sqrt(x), {x: np.array([-1.0, -4.0])}, passes=[sqrt_to_abs]) == "sqrt_to_abs"


@pytest.mark.parametrize("dtype, feed", [("float64", [0.5, 1.0]), ("int64", [1, 2])])
def test_a_result_changing_dtype_is_a_break(dtype, feed):
    x = sg.placeholder((2,), dtype=dtype, name="x")
    assert bisect(x * 2, {x: np.array(feed, dtype)}, passes=[TO_FLOAT32]) == "replace_outputs"


def test_a_pass_that_raises_is_the_one_named():
    x = sg.placeholder((3,), name="x")

    def exploding(graph):
        raise RuntimeError("boom")
    assert sg.passes.bisect(sg.exp(x) + 1.0, {x: np.ones(3)}, passes=["simplify", exploding, "cse"]) == "exploding"


def test_pass_modules_stand_for_their_run_function_and_optimize_false_refuses_passes():
    from staticgrad.passes import cse, simplify
    a, b = sg.placeholder((3,), name="a"), sg.placeholder((3,), name="b")
    fn = sg.compile(a * b + a * b, inputs=[a, b], passes=[simplify, cse, "dce"])
    assert sum(op == "mul" for _, op in fn.graph.nodes(data="op")) == 1
    with pytest.raises(ValueError, match="optimize=False would run no pass"):
        sg.compile(a * b, inputs=[a, b], passes=["cse"], optimize=False)
