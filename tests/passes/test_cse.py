"""Common subexpression elimination: what merges, what must stay apart, and forward/backward sharing."""
from collections import Counter

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.passes import cse

from . import graph_of

CSE = ["cse", "dce"]


def ops_of(fn) -> Counter:
    return Counter(op for _, op in fn.graph.nodes(data="op"))


def feeds(rng, *shapes):
    return [rng.normal(size=s) for s in shapes]


def check(outputs, inputs, values, passes=CSE):
    """Compile with ``passes`` and without any; the results must agree. Returns the optimized function."""
    fast = sg.compile(outputs, inputs=inputs, passes=passes)
    slow = sg.compile(outputs, inputs=inputs, optimize=False)
    got, want = fast(*values), slow(*values)
    if isinstance(outputs, sg.Tensor):
        got, want = [got], [want]
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
    return fast


def test_a_times_b_twice_is_one_mul(rng):
    a, b = sg.placeholder((2, 3), name="a"), sg.placeholder((2, 3), name="b")
    fn = check(a * b + a * b, [a, b], feeds(rng, (2, 3), (2, 3)))
    assert ops_of(fn) == {"placeholder": 2, "mul": 1, "add": 1}


def test_default_pipeline_also_gives_one_mul(rng):
    a, b = sg.placeholder((2, 3), name="a"), sg.placeholder((2, 3), name="b")
    fn = check(a * b + a * b, [a, b], feeds(rng, (2, 3), (2, 3)), passes=None)
    assert ops_of(fn)["mul"] == 1


@pytest.mark.parametrize("op", ["add", "mul"])
def test_commutative_operands_in_either_order_merge(rng, op):
    a, b = sg.placeholder((2, 3), name="a"), sg.placeholder((2, 3), name="b")
    f = getattr(sg, op)
    fn = check([f(a, b), f(b, a)], [a, b], feeds(rng, (2, 3), (2, 3)))
    assert ops_of(fn)[op] == 1


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_and_minimum_in_the_other_order_stay_apart(op):
    # on ties numpy returns the second operand: maximum(-0.0, 0.0) is 0.0, maximum(0.0, -0.0) is -0.0
    p, q = sg.placeholder((2,), name="p"), sg.placeholder((2,), name="q")
    f = getattr(sg, op)
    P, Q = np.array([-0.0, 0.0]), np.array([0.0, -0.0])
    fn = check([f(p, q), f(q, p)], [p, q], [P, Q])
    assert ops_of(fn)[op] == 2
    pq, qp = fn(P, Q)
    assert np.signbit(pq).tolist() == np.signbit(getattr(np, op)(P, Q)).tolist() == [False, True]
    assert np.signbit(qp).tolist() == np.signbit(getattr(np, op)(Q, P)).tolist() == [True, False]


@pytest.mark.parametrize("op", ["sub", "div", "pow", "matmul"])
def test_non_commutative_operands_in_the_other_order_stay_apart(rng, op):
    a, b = sg.placeholder((3, 3), name="a"), sg.placeholder((3, 3), name="b")
    f = getattr(sg, op)
    values = [np.abs(v) + 0.5 for v in feeds(rng, (3, 3), (3, 3))]
    fn = check([f(a, b), f(b, a)], [a, b], values)
    assert ops_of(fn)[op] == 2


def test_commutative_with_broadcasting_operands_merge(rng):
    a, b = sg.placeholder((2, 3), name="a"), sg.placeholder((3,), name="b")
    fn = check([a + b, b + a], [a, b], feeds(rng, (2, 3), (3,)))
    assert ops_of(fn)["add"] == 1


def test_chains_merge_level_by_level(rng):
    a, b = sg.placeholder((4,), name="a"), sg.placeholder((4,), name="b")

    def chain():
        return sg.tanh(sg.exp(a * b) + sg.sin(b))

    fn = check([chain(), chain() * 2], [a, b], feeds(rng, (4,), (4,)))
    ops = ops_of(fn)
    assert (ops["tanh"], ops["exp"], ops["sin"], ops["add"]) == (1, 1, 1, 1)
    assert ops["mul"] == 2          # a*b once, and the *2


@pytest.mark.parametrize("build, n", [
    (lambda x: [sg.sum(x, axis=0), sg.sum(x, axis=1)], 2),
    (lambda x: [sg.sum(x, axis=0), sg.sum(x, axis=0, keepdims=True)], 2),
    (lambda x: [sg.sum(x, axis=1), sg.sum(x, axis=-1)], 1),
    (lambda x: [sg.sum(x, axis=0), sg.sum(x, axis=0)], 1),
    (lambda x: [sg.sum(x), sg.sum(x, axis=(0, 1))], 1),
], ids=["axis 0 vs 1", "keepdims", "axis 1 vs -1", "same axis", "None vs all"])
def test_attributes_tell_nodes_apart(rng, build, n):
    x = sg.placeholder((2, 3), name="x")
    fn = check(build(x), [x], feeds(rng, (2, 3)))
    assert ops_of(fn)["sum"] == n


@pytest.mark.parametrize("build, op, n", [
    (lambda x: [x[0], x[1], x[0]], "getitem", 2),
    (lambda x: [x[:, 1:], x[:, :2], x[:, 1:]], "getitem", 2),
    (lambda x: [x.reshape((3, 2)), x.reshape((6,)), x.reshape((3, 2))], "reshape", 2),
    (lambda x: [sg.softmax(x, axis=0), sg.softmax(x, axis=1)], "softmax", 2),
    (lambda x: [sg.transpose(x, (1, 0)), x.T], "transpose", 1),
], ids=["index", "slices", "reshape", "softmax axis", "transpose"])
def test_attributes_of_layout_ops(rng, build, op, n):
    x = sg.placeholder((2, 3), name="x")
    fn = check(build(x), [x], feeds(rng, (2, 3)))
    assert ops_of(fn)[op] == n


def test_identical_constants_merge(rng):
    x = sg.placeholder((3,), name="x")
    c1, c2 = sg.constant(np.array([1.0, 2.0, 3.0])), sg.constant(np.array([1.0, 2.0, 3.0]))
    fn = check([x * c1, x * c2], [x], feeds(rng, (3,)))
    assert ops_of(fn) == {"placeholder": 1, "constant": 1, "mul": 1}


@pytest.mark.parametrize("other", [
    np.array([1.0, 2.0, 4.0]),            # another value
    np.array([1, 2, 3]),                  # same numbers, another dtype
    np.array([[1.0, 2.0, 3.0]]),          # same numbers, another shape
], ids=["value", "dtype", "shape"])
def test_different_constants_stay_apart(rng, other):
    x = sg.placeholder((3,), name="x")
    fn = check([x * sg.constant(np.array([1.0, 2.0, 3.0])), x * sg.constant(other)], [x], feeds(rng, (3,)))
    assert ops_of(fn)["constant"] == 2


def test_zero_and_negative_zero_stay_apart():
    x = sg.placeholder((1,), name="x")
    fn = check([x * sg.constant(0.0), x * sg.constant(-0.0)], [x], [np.array([1.0])])
    pos, neg = fn(np.array([1.0]))
    assert not np.signbit(pos[0]) and np.signbit(neg[0])


def test_placeholders_and_parameters_never_merge():
    a, b = sg.placeholder((2,), name="a"), sg.placeholder((2,), name="b")
    p, q = sg.parameter(np.ones(2), name="p"), sg.parameter(np.ones(2), name="q")
    fn = check([a * 2, b * 2, p * 2, q * 2], [a, b], [np.ones(2), np.zeros(2)])
    assert ops_of(fn)["placeholder"] == 2 and ops_of(fn)["parameter"] == 2
    q.value = np.full(2, 5.0)
    assert fn(np.ones(2), np.zeros(2))[3].tolist() == [10.0, 10.0]


def test_forward_and_backward_share_work(rng):
    # softplus' gradient is g * sigmoid(x): the same sigmoid(x) the forward already computes
    x = sg.placeholder((4,), name="x", requires_grad=True)
    y = sg.sum(sg.softplus(x) + sg.sigmoid(x))
    (g,) = sg.grad(y, [x])
    fn = check([y, g], [x], feeds(rng, (4,)), passes=None)
    assert ops_of(fn)["sigmoid"] == 1
    (role,) = [d["role"] for _, d in fn.graph.nodes(data=True) if d["op"] == "sigmoid"]
    assert role == "forward"


def test_a_forward_node_merged_into_its_earlier_backward_twin_makes_it_forward(rng):
    # softplus' gradient computes sigmoid(x) first; the sigmoid(x) asked for after it is the same node
    x = sg.placeholder((4,), name="x", requires_grad=True)
    y = sg.sum(sg.softplus(x))
    (g,) = sg.grad(y, [x])
    z = sg.sigmoid(x)
    check([y, g, z], [x], feeds(rng, (4,)), passes=["cse"])
    graph, _ = cse.run(graph_of([y, g, z], [x]))      # (compile re-assigns roles after the passes)
    assert [n.role for n in graph.nodes.values() if n.op == "sigmoid"] == ["forward"]


def test_backward_twins_of_forward_nodes_merge(rng):
    # d/dx of exp(x*w) is exp(x*w)*w: the backward rebuilds nothing the forward has
    x = sg.placeholder((4,), name="x", requires_grad=True)
    w = sg.parameter(rng.normal(size=4), name="w")
    y = sg.sum(sg.exp(x * w))
    gx, gw = sg.grad(y, [x, w])
    fn = check([y, gx, gw], [x], feeds(rng, (4,)), passes=None)
    ops = ops_of(fn)
    assert ops["exp"] == 1
    assert ops["mul"] == 3         # x*w, and out*w, out*x for the two gradients


def test_stabilized_forward_shares_the_stable_backward(rng):
    # sg.grad differentiates -softplus(-x); once the forward is stabilized too, neg(x) is computed once
    x = sg.placeholder((4,), name="x", requires_grad=True)
    y = sg.sum(sg.log(sg.sigmoid(x)))
    (g,) = sg.grad(y, [x])
    fn = check([y, g], [x], feeds(rng, (4,)), passes=None)
    ids = {i for i, d in fn.graph.nodes(data=True) if d["op"] == "neg"
           and [fn.graph.nodes[j]["op"] for j in fn.graph.predecessors(i)] == ["placeholder"]}
    assert len(ids) == 1


def test_cse_counts_its_merges():
    a, b = sg.placeholder((2,), name="a"), sg.placeholder((2,), name="b")
    fn = sg.compile([a * b + a * b, b * a], inputs=[a, b], passes=["cse"])
    (row,) = fn.report().rows
    assert row["pass"] == "cse"
    assert row["changed"] == 2
    assert row["removed"] == {"mul": 2}
    assert row["nodes_before"] - row["nodes_after"] == 2


def test_merged_outputs_are_still_separate_results():
    # a*b and b*a merge into one node; the caller still gets two arrays that do not share memory
    # (as without optimization), so changing one result does not change the other.
    a, b = sg.placeholder((2,), name="a"), sg.placeholder((2,), name="b")
    fn = sg.compile([a * b, b * a], inputs=[a, b])
    first, second = fn(np.ones(2), np.ones(2))
    assert not np.shares_memory(first, second)


def test_array_indices_are_compared_by_value():
    x = sg.placeholder((4,), name="x")
    outs = [x[np.array([0, 1])], x[np.array([0, 1])], x[np.array([1, 0])],
            x[np.array([True, False, True, False])], x[np.array([1, 0, 1, 0], dtype=bool)]]
    fn = check(outs, [x], [np.arange(4.0)])
    assert ops_of(fn)["getitem"] == 3


def test_casts_to_different_dtypes_stay_apart():
    x = sg.placeholder((4,), name="x")
    outs = [sg.ops.cast(x, "float32"), sg.ops.cast(x, "int64"), sg.ops.cast(x, "float32")]
    fn = check(outs, [x], [np.arange(4.0)])
    assert ops_of(fn)["cast"] == 2
    assert [o.dtype for o in fn(np.arange(4.0))] == [np.float32, np.int64, np.float32]


@pytest.mark.parametrize("mask, row", [(True, 1), (False, 0), (np.True_, 1)], ids=["True", "False", "np.True_"])
def test_a_bool_scalar_index_is_a_mask_not_a_row(mask, row):
    # True == 1 in Python, but numpy reads x[True] as a 0-d mask: shape (1, 3, 4), not row 1
    x = sg.placeholder((3, 4), name="x")
    X = np.arange(12.0).reshape(3, 4)
    fn = check([x[mask], x[row]], [x], [X])
    assert ops_of(fn)["getitem"] == 2
    assert [o.shape for o in fn(X)] == [X[mask].shape, X[row].shape]


def test_attribute_keys_tell_apart_values_python_calls_equal():
    from staticgrad.passes.cse import attrs_key
    assert attrs_key({"a": (True,)}) != attrs_key({"a": (1,)})
    assert attrs_key({"a": 0.0}) != attrs_key({"a": -0.0})
    assert attrs_key({"a": 1.0}) != attrs_key({"a": 1})
    assert attrs_key({"a": (slice(0, 2),)}) == attrs_key({"a": (slice(0, 2),)})


@pytest.mark.parametrize("index", [(True, np.array([True, False, True])), (np.True_, 0), (Ellipsis, False)],
                         ids=["bool then mask", "np.True_", "trailing False"])
def test_bool_scalar_indices_shape_like_numpy_over_unknown_sizes(index):
    x = sg.placeholder((None, 4), name="x", requires_grad=True)
    X = np.arange(12.0).reshape(3, 4)
    y = x[index]
    assert len(y.shape) == X[index].ndim
    assert all(s is None or s == n for s, n in zip(y.shape, X[index].shape))
    (g,) = sg.grad(sg.sum(y * y), [x])
    got = check([y, g], [x], [X])
    want = np.zeros_like(X)
    want[index] = 2 * X[index]
    np.testing.assert_array_equal(got(X)[1], want)
