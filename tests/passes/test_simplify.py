"""The simplify pass: each identity it promises, and the unsafe rewrites it must never make."""
from collections import Counter

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.ops import broadcast_to

SIMPLIFY = ["simplify", "dce"]


def ops_of(fn) -> Counter:
    return Counter(op for _, op in fn.graph.nodes(data="op"))


def compiled(out, inputs, passes=SIMPLIFY):
    return sg.compile(out, inputs=inputs, passes=passes)


def same(a, b, zero_signs=True):
    """Equal values, shape and dtype, and (unless told otherwise) the sign of every zero; NaN equals NaN
    (the point is that NaN/Inf survive)."""
    a, b = np.asarray(a), np.asarray(b)
    if not (a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)):
        return False
    return not zero_signs or a.dtype.kind != "f" or np.array_equal(np.signbit(a[a == 0]), np.signbit(b[b == 0]))


X = np.array([[1.5, -2.0, -0.0], [np.inf, np.nan, -0.25]])      # -0.0: x + 0.0 is +0.0 there


def check_against_unoptimized(out, inputs, feeds, passes=SIMPLIFY, zero_signs=True):
    fast = compiled(out, inputs, passes)
    slow = sg.compile(out, inputs=inputs, optimize=False)
    with np.errstate(all="ignore"):
        got, want = fast(*feeds), slow(*feeds)
    if not isinstance(out, sg.Tensor):
        assert len(got) == len(want)
        for k, (a, b) in enumerate(zip(got, want)):
            assert same(a, b, zero_signs), f"output {k}: simplified gives\n{a}\nunoptimized gives\n{b}"
        return fast
    assert same(got, want, zero_signs), f"simplified gives\n{got}\nunoptimized gives\n{want}"
    return fast


# ------------------------------------------------------------------ identities that vanish
IDENTITIES = {
    "x+(-0.0)": lambda x: x + (-0.0),
    "(-0.0)+x": lambda x: -0.0 + x,
    "x-0": lambda x: x - 0.0,
    "x*1": lambda x: x * 1,
    "1*x": lambda x: 1 * x,
    "x/1": lambda x: x / 1,
    "--x": lambda x: -(-x),
    "x.T.T": lambda x: x.T.T,
    "transpose twice": lambda x: sg.transpose(sg.transpose(x, (1, 0)), (1, 0)),
    "reshape to same shape": lambda x: x.reshape((2, 3)),
    "x + -zeros of x's shape": lambda x: x + sg.constant(np.full((2, 3), -0.0)),
    "x * ones of x's shape": lambda x: x * sg.constant(np.ones((2, 3))),
    "x * broadcast 1": lambda x: x * broadcast_to(sg.constant(1.0), (2, 3)),
    "x + broadcast -0.0": lambda x: broadcast_to(sg.constant(-0.0), (2, 3)) + x,
}


@pytest.mark.parametrize("build", IDENTITIES.values(), ids=IDENTITIES.keys())
def test_identity_leaves_only_the_input(build):
    x = sg.placeholder((2, 3), name="x")
    fn = check_against_unoptimized(build(x), [x], [X])
    assert ops_of(fn) == {"placeholder": 1}


# x + 0.0 is x except for the sign of one zero: -0.0 + 0.0 is +0.0 (issue 3 lists x+0; PyTensor drops it too)
ZERO_SIGN_IDENTITIES = {
    "x+0.0": lambda x: x + 0.0, "0.0+x": lambda x: 0.0 + x, "x+0": lambda x: x + 0,
    "x+zeros": lambda x: x + sg.constant(np.zeros((2, 3))), "x-(-0.0)": lambda x: x - (-0.0),
}


@pytest.mark.parametrize("build", ZERO_SIGN_IDENTITIES.values(), ids=ZERO_SIGN_IDENTITIES.keys())
def test_adding_zero_leaves_the_input_with_the_same_values(build):
    x = sg.placeholder((2, 3), name="x")
    fn = check_against_unoptimized(build(x), [x], [X], zero_signs=False)
    assert ops_of(fn) == {"placeholder": 1}


def test_transposes_compose_into_one():
    x = sg.placeholder((2, 3, 4), name="x")
    y = sg.transpose(sg.transpose(x, (1, 2, 0)), (1, 0, 2))
    fn = check_against_unoptimized(y, [x], [np.arange(24.0).reshape(2, 3, 4)])
    assert ops_of(fn) == {"placeholder": 1, "transpose": 1}


def test_transposes_that_cancel_in_3d_vanish():
    x = sg.placeholder((2, 3, 4), name="x")
    y = sg.transpose(sg.transpose(x, (1, 2, 0)), (2, 0, 1))
    fn = check_against_unoptimized(y, [x], [np.arange(24.0).reshape(2, 3, 4)])
    assert ops_of(fn) == {"placeholder": 1}


def test_reshape_of_reshape_is_one_reshape():
    x = sg.placeholder((2, 3), name="x")
    fn = check_against_unoptimized(x.reshape((3, 2)).reshape((6,)), [x], [X])
    assert ops_of(fn) == {"placeholder": 1, "reshape": 1}


@pytest.mark.parametrize("keepdims", [True, False])
def test_an_integer_sum_over_a_size_one_axis_is_the_input(keepdims):
    x = sg.placeholder((2, 1, 3), dtype="int64", name="x")
    fn = check_against_unoptimized(sg.sum(x, axis=1, keepdims=keepdims), [x], [np.arange(6).reshape(2, 1, 3)])
    ops = ops_of(fn)
    assert ops["sum"] == 0 and sum(ops.values()) == (1 if keepdims else 2)   # the input, maybe a squeeze


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_a_float_sum_over_a_size_one_axis_is_the_input(reduce):
    # the same numbers; only numpy's sum of a single -0.0 is +0.0 (its reduction starts from +0.0)
    x = sg.placeholder((2, 1, 3), name="x")
    fn = check_against_unoptimized(getattr(sg, reduce)(x, axis=1), [x], [X.reshape(2, 1, 3)], zero_signs=False)
    assert ops_of(fn)[reduce] == 0


def test_sum_over_a_real_axis_stays():
    x = sg.placeholder((2, 1, 3), name="x")
    fn = check_against_unoptimized(sg.sum(x, axis=(1, 2)), [x], [X.reshape(2, 1, 3)])
    assert ops_of(fn)["sum"] == 1


def test_integer_sum_over_size_one_axis_keeps_its_dtype():
    # numpy sums int32 into int64: dropping the sum would change the dtype
    x = sg.placeholder((2, 1), dtype="int32", name="x")
    fn = check_against_unoptimized(sg.sum(x, axis=1, keepdims=True), [x], [np.array([[1], [2]], np.int32)])
    assert fn(np.array([[1], [2]], np.int32)).dtype == sg.compile(sg.sum(x, axis=1, keepdims=True),
                                                                 optimize=False)(np.array([[1], [2]], np.int32)).dtype


@pytest.mark.parametrize("build", [lambda x: (x * 2) * 3, lambda x: (2 * x) * 3, lambda x: 3 * (x * 2)],
                         ids=["(x*2)*3", "(2*x)*3", "3*(x*2)"])
def test_chained_constant_scalings_merge(build):
    x = sg.placeholder((2, 3), name="x")
    fn = check_against_unoptimized(build(x), [x], [X])
    assert ops_of(fn) == {"placeholder": 1, "mul": 1, "constant": 1}
    (const,) = [n for n in fn.ir.nodes.values() if n.op == "constant"]
    assert const.value == 6


def test_float32_scalings_merge_in_float32():
    x = sg.placeholder((3,), dtype="float32", name="x")
    fn = check_against_unoptimized((x * 2) * 3, [x], [np.array([1, 2, 3], np.float32)])
    assert ops_of(fn)["mul"] == 1
    assert fn(np.ones(3, np.float32)).dtype == np.float32


def test_times_minus_one_is_a_neg():
    x = sg.placeholder((2, 3), name="x")
    fn = check_against_unoptimized(x * -1, [x], [X])
    assert ops_of(fn) == {"placeholder": 1, "neg": 1}


def test_scalar_broadcast_is_read_directly():
    x = sg.placeholder((2, 3), name="x")
    fn = check_against_unoptimized(x * broadcast_to(sg.constant(2.0), (2, 3)), [x], [X])
    assert ops_of(fn)["broadcast_to"] == 0
    assert ops_of(fn)["mul"] == 1


def test_scalar_broadcast_through_a_reshape_is_read_directly():
    # reshape(broadcast(c)) is still a broadcast of a scalar: what the backward of sum(reshape(f(x))) makes
    x = sg.placeholder((2, 3), name="x")
    two = broadcast_to(sg.constant(2.0), (3, 2)).reshape((2, 3))
    fn = check_against_unoptimized(x * two, [x], [X])
    assert ops_of(fn)["broadcast_to"] == 0
    assert ops_of(fn)["reshape"] == 0


def test_gradient_of_a_sum_has_no_multiplication_by_one():
    x = sg.placeholder((2, 3), name="x", requires_grad=True)
    w = sg.constant(np.arange(6.0).reshape(2, 3))
    (g,) = sg.grad(sg.sum(x * w), [x])
    fn = sg.compile(g, inputs=[x])
    assert ops_of(fn)["mul"] == 0 and ops_of(fn)["broadcast_to"] == 0
    np.testing.assert_array_equal(fn(X), np.arange(6.0).reshape(2, 3))


def test_simplify_reports_what_it_did():
    x = sg.placeholder((2, 3), name="x")
    fn = sg.compile(((x - 0.0) * 1).T.T, inputs=[x], passes=["simplify"])
    (row,) = fn.report().rows
    assert row["pass"] == "simplify"
    assert row["changed"] >= 3
    assert row["fixed_point"] is True
    assert row["removed"] == {"sub": 1, "mul": 1, "transpose": 2, "constant": 2}


# ------------------------------------------------------------------ rewrites that must not happen
NAN_INF = np.array([np.nan, np.inf, -np.inf, 0.0, 2.0])


@pytest.mark.parametrize("build, op", [
    (lambda x: x * 0, "mul"), (lambda x: 0 * x, "mul"), (lambda x: x - x, "sub"), (lambda x: x / x, "div"),
    (lambda x: x * sg.constant(np.zeros(5)), "mul"), (lambda x: x + x - x, "sub"),
], ids=["x*0", "0*x", "x-x", "x/x", "x*zeros", "x+x-x"])
def test_unsafe_identities_stay_so_nan_and_inf_propagate(build, op):
    x = sg.placeholder((5,), name="x")
    fn = check_against_unoptimized(build(x), [x], [NAN_INF], passes=list(sg.passes.DEFAULT))
    assert ops_of(fn)[op] >= 1
    with np.errstate(all="ignore"):
        out = fn(NAN_INF)
    assert np.isnan(out[0])          # NaN in, NaN out
    assert not np.isfinite(out[1])   # inf*0, inf-inf, inf/inf: NaN, not a number


@pytest.mark.parametrize("build, op", [
    (lambda x: 0.0 - x, "sub"), (lambda x: sg.constant(np.zeros(3)) - x, "sub"), (lambda x: 1.0 / x, "div"),
], ids=["0-x", "zeros-x", "1/x"])
def test_a_neutral_constant_on_the_left_of_sub_or_div_is_not_dropped(build, op):
    # x - 0 and x / 1 are x; 0 - x and 1 / x are not
    x = sg.placeholder((3,), name="x")
    fn = check_against_unoptimized(build(x), [x], [np.array([2.0, -0.5, 4.0])])
    assert ops_of(fn)[op] == 1


def test_adding_zeros_that_broadcast_is_not_dropped():
    x = sg.placeholder((1,), name="x")
    fn = check_against_unoptimized(x + sg.constant(np.zeros((3,))), [x], [np.array([5.0])])
    assert fn(np.array([5.0])).shape == (3,)
    assert ops_of(fn)["add"] == 1


def test_multiplying_by_ones_that_broadcast_is_not_dropped():
    x = sg.placeholder((3,), name="x")
    fn = check_against_unoptimized(x * sg.constant(np.ones((2, 3))), [x], [np.arange(3.0)])
    assert fn(np.arange(3.0)).shape == (2, 3)


def test_scalar_broadcast_that_sets_the_shape_is_kept():
    x = sg.placeholder((1, 3), name="x")
    fn = check_against_unoptimized(x + broadcast_to(sg.constant(0.0), (4, 3)), [x], [np.ones((1, 3))])
    assert fn(np.ones((1, 3))).shape == (4, 3)


@pytest.mark.parametrize("build", [lambda x: x + 0.0, lambda x: x * 1.0, lambda x: x / 1,
                                   lambda x: x + sg.constant(np.zeros(3))],
                         ids=["int+0.0", "int*1.0", "int/1", "int+zeros"])
def test_identities_that_change_the_dtype_are_kept(build):
    x = sg.placeholder((3,), dtype="int64", name="x")
    fn = check_against_unoptimized(build(x), [x], [np.arange(3)])
    assert fn(np.arange(3)).dtype == np.float64


def test_float32_times_a_float64_array_of_ones_keeps_float64():
    x = sg.placeholder((3,), dtype="float32", name="x")
    y = x * sg.constant(np.ones(3))
    fn = check_against_unoptimized(y, [x], [np.ones(3, np.float32)])
    assert fn(np.ones(3, np.float32)).dtype == y.dtype


def test_scalar_broadcast_with_unknown_sizes_keeps_the_runtime_shape():
    # a and b are both (None, 3): the gradient of sum(a*b) wrt b is broadcast(1, like a*b) * a. Fed a batch
    # of 1 and a batch of 5 it has 5 rows; reading the broadcast scalar directly would leave a's 1 row.
    a = sg.placeholder((None, 3), name="a", requires_grad=True)
    b = sg.placeholder((None, 3), name="b", requires_grad=True)
    (gb,) = sg.grad(sg.sum(a * b), [b])
    A, B = np.arange(3.0).reshape(1, 3), np.ones((5, 3))
    want = sg.compile(gb, inputs=[a, b], optimize=False)(A, B)
    assert want.shape == (5, 3)
    for passes in (SIMPLIFY, sg.passes.DEFAULT):
        got = sg.compile(gb, inputs=[a, b], passes=passes)(A, B)
        assert got.shape == want.shape, f"passes {passes}"
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x_value, c1, c2", [(0.0, 1e300, 1e300), (np.inf, 1e-300, 1e-300)],
                         ids=["0*(c1*c2 overflows)", "inf*(c1*c2 underflows)"])
def test_merging_scalings_never_makes_a_nan(x_value, c1, c2):
    # (x*c1)*c2 is finite-or-inf but never NaN here; x*(c1*c2) is 0*inf or inf*0 = NaN
    x = sg.placeholder((1,), name="x")
    check_against_unoptimized((x * c1) * c2, [x], [np.array([x_value])])


def test_shapes_and_dtypes_of_every_node_survive_the_pass():
    x = sg.placeholder((2, 3), name="x", requires_grad=True)
    y = sg.sum(sg.tanh((x * 1 - 0.0).T.T) * 2 * 3, axis=0, keepdims=True)
    (g,) = sg.grad(sg.sum(y), [x])
    fn = check_against_unoptimized([y, g], [x], [np.arange(6.0).reshape(2, 3) / 6])
    out = dict(fn.graph.nodes(data=True))
    assert out[fn.ir.outputs[0]]["shape"] == (1, 3)
    assert out[fn.ir.outputs[1]]["shape"] == (2, 3)


@pytest.mark.parametrize("x_value, c1, c2", [(3.0, 0.1, 10.0), (1e308, 2.0, 0.5), (3.0, 3.0, 5.0),
                                             (2.0 ** -1074 * 3, 0.5, 0.5), (2.0 ** -1074 * 3, 1.5, 2.0 ** 60)],
                         ids=["rounds twice", "overflows on one side", "no power of two", "subnormal halvings",
                              "rounds in the subnormal range first"])
def test_scalings_that_would_round_differently_are_not_merged(x_value, c1, c2):
    x = sg.placeholder((1,), name="x")
    fn = check_against_unoptimized((x * c1) * c2, [x], [np.array([x_value])])
    assert ops_of(fn)["mul"] == 2


INT64_MIN = np.iinfo(np.int64).min
NEGATED = {   # (a's dtype and values, b's dtype and values): -b wraps, then is promoted to a wider dtype
    "float + -uint8": (np.full(3, 10.0), np.array([1, 2, 3], np.uint8)),
    "int16 + -uint8": (np.array([1, 2, 3], np.int16), np.array([0, 1, 255], np.uint8)),
    "int16 + -int8 min": (np.array([1, 2, 3], np.int16), np.array([0, -128, 127], np.int8)),
    "float + -int64 min": (np.full(3, 10.0), np.array([0, INT64_MIN, 5])),
}


@pytest.mark.parametrize("build", [lambda a, b: a + -b, lambda a, b: -b + a, lambda a, b: a - -b],
                         ids=["a + -b", "-b + a", "a - -b"])
@pytest.mark.parametrize("case", NEGATED)
def test_a_negation_that_wraps_before_promotion_is_not_folded_into_the_sign(build, case):
    av, bv = NEGATED[case]
    a, b = sg.placeholder((3,), dtype=av.dtype, name="a"), sg.placeholder((3,), dtype=bv.dtype, name="b")
    fn = check_against_unoptimized(build(a, b), [a, b], [av, bv])
    assert ops_of(fn)["neg"] == 1


@pytest.mark.parametrize("dtype, values", [("uint8", [0, 1, 255]), ("int8", [-128, 1, 127]),
                                           ("float32", [-0.0, np.inf, 3.5])])
def test_a_negation_in_the_result_dtype_still_folds(dtype, values):
    # integers wrap in their own dtype both ways: a + -b == a - b even for unsigned b or INT_MIN
    bv = np.array(values, dtype)
    a, b = sg.placeholder((3,), dtype=dtype, name="a"), sg.placeholder((3,), dtype=dtype, name="b")
    fn = check_against_unoptimized([a + -b, a - -b, -(-b)], [a, b], [bv[::-1].copy(), bv])
    assert ops_of(fn)["neg"] == 0
