"""staticgrad.testing.check_grads: passes on correct gradients, catches wrong ones at every order."""
import uuid

import numpy as np
import pytest

import staticgrad as sg
from staticgrad.ops.registry import REGISTRY, apply, defop, elementwise_spec
from staticgrad.testing import check_grads


@pytest.fixture
def make_op():
    """``make_op(kernel, vjp)`` registers a throwaway elementwise op under a unique name and returns a
    function that applies it; every op made is removed from the registry afterwards."""
    made = []

    def make(kernel, vjp):
        name = f"test_op_{uuid.uuid4().hex[:10]}"
        defop(name, kernel, elementwise_spec(kernel), vjp)
        made.append(name)
        return lambda *xs: apply(name, xs)

    yield make
    for name in made:
        REGISTRY.pop(name, None)


def test_throwaway_ops_are_removed_again(make_op):
    before = set(REGISTRY)
    make_op(np.square, lambda g, out, x: (g * x * 2.0,))
    assert len(set(REGISTRY) - before) == 1


def test_correct_op_passes_first_and_second_order(make_op, rng):
    square = make_op(np.square, lambda g, out, x: (g * x * 2.0,))
    x = rng.normal(size=(3, 2))
    assert check_grads(square, [x], order=1) is True
    assert check_grads(square, [x], order=2) is True


def test_wrong_vjp_is_caught(make_op, rng):
    square = make_op(np.square, lambda g, out, x: (g * x,))          # forgot the factor 2
    with pytest.raises(AssertionError):
        check_grads(square, [rng.normal(size=(4,))])


def test_wrong_vjp_is_caught_inside_a_larger_function(make_op, rng):
    bad_exp = make_op(np.exp, lambda g, out, x: (g * out * 1.01,))   # off by one percent
    f = lambda a, b: sg.tanh(bad_exp(a) * b)                          # noqa: E731
    with pytest.raises(AssertionError):
        check_grads(f, [rng.normal(size=(2, 3)) * 0.3, rng.normal(size=(3,))])


def test_wrong_vjp_for_the_second_input_is_caught(make_op, rng):
    # d(x*y)/dy should be x; this rule sends y instead.
    mul = make_op(np.multiply, lambda g, out, x, y: (g * y, g * y))
    with pytest.raises(AssertionError, match="input 1"):
        check_grads(mul, [rng.normal(size=3), rng.normal(size=3)])


def test_second_order_error_is_caught_only_at_order_2(make_op, rng):
    # The VJP is right but hides x from differentiation, so its own derivative is wrong.
    cube = make_op(lambda x: x ** 3, lambda g, out, x: (g * sg.stop_gradient(x * x * 3.0),))
    x = rng.normal(size=(3,)) + 2.0
    assert check_grads(cube, [x], order=1)
    with pytest.raises(AssertionError):
        check_grads(cube, [x], order=2)


def test_non_scalar_outputs_and_broadcasting(rng):
    f = lambda a, b: sg.tanh(a) * b + sg.exp(b) / 3.0                 # noqa: E731
    assert check_grads(f, [rng.normal(size=(2, 3)), rng.normal(size=(3,))], order=2)


def test_integer_inputs_are_data(rng):
    f = lambda z, t: sg.softmax_cross_entropy(z, t)                   # noqa: E731
    assert check_grads(f, [rng.normal(size=(4, 3)), np.array([0, 2, 1, 2])])


def test_zero_dimensional_input(rng):
    assert check_grads(lambda s: sg.sin(s) * s, [np.array(0.7)], order=3)


def test_nothing_to_differentiate_is_an_error():
    with pytest.raises(ValueError):
        check_grads(lambda t: t * 2, [np.array([1, 2, 3])])


def test_float32_steps_and_tolerances_follow_the_dtype(make_op, rng):
    f32 = lambda *shape: rng.normal(size=shape).astype(np.float32)   # noqa: E731
    assert check_grads(lambda x: sg.tanh(x) * x, [f32(3)], order=2)
    assert check_grads(lambda z, t: sg.softmax_cross_entropy(z, t), [f32(8, 5), rng.integers(0, 5, 8)], order=2)
    assert check_grads(lambda a, b: sg.tanh(a @ b), [f32(6, 4), f32(4, 3)])
    assert check_grads(lambda x: sg.exp(x) * 3.0, [f32(20) * 2])      # values far larger than some gradients
    square = make_op(np.square, lambda g, out, x: (g * x * 2.0,))
    assert check_grads(square, [f32(3, 2)], order=2)
    bad_exp = make_op(np.exp, lambda g, out, x: (g * out * 1.05,))  # off by five percent
    with pytest.raises(AssertionError):
        check_grads(lambda a: sg.tanh(bad_exp(a)), [f32(2, 3) * 0.3])
    cube = make_op(lambda x: x ** 3, lambda g, out, x: (g * sg.stop_gradient(x * x * 3.0),))
    x = f32(3) + 2.0
    assert check_grads(cube, [x], order=1)
    with pytest.raises(AssertionError):
        check_grads(cube, [x], order=2)


def test_numerical_grad_of_integers_and_a_step_below_the_dtypes_resolution():
    from staticgrad.testing import numerical_grad
    np.testing.assert_allclose(numerical_grad(lambda x: float(np.sum(x * x)), [np.array([1, 2])], 0, 1e-6),
                               [2.0, 4.0], rtol=1e-6)
    with pytest.raises(ValueError, match="below float32's resolution"):
        numerical_grad(lambda x: float(np.sum(x * x)), [np.array([1000.0], np.float32)], 0, 1e-6)
