"""check_numerics: the first node that makes a NaN or an infinity is named, with its role and the user's
line, and no parameter changes; off, the generated code holds no check."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager


def _sqrt_model(**compile_args):
    x = sg.placeholder((None, 3), name="x")
    W = sg.parameter(np.ones((3, 2)), name="W")
    h = sg.sqrt(x @ W)                                   # (the line the backward error points back to)
    loss = sg.sum(h)
    (gW,) = sg.grad(loss, [W])
    step = sg.compile(loss, inputs=[x], updates=[(W, W - 0.1 * gW)], **compile_args)
    return step, W, h


def test_the_first_bad_node_of_the_backward_pass_is_named_with_its_vjp():
    step, W, h = _sqrt_model(check_numerics=True)
    step(np.ones((2, 3)))
    before = W.value.copy()
    with pytest.raises(sg.NumericsError, match=r"div node \d+ made the first infinity \(backward, VJP of sqrt node "
                       rf"{h.id} from test_numerics.py:\d+; built at test_numerics.py:\d+\): inputs of shapes "
                       r"\(2, 2\), \(2, 2\), output \(2, 2\), 4 of 4") as info:
        step(np.zeros((2, 3)))
    assert isinstance(info.value, FloatingPointError)
    np.testing.assert_array_equal(W.value, before)         # nothing assigned
    step(np.ones((2, 3)))                                  # and the next call runs
    assert not np.array_equal(W.value, before)


def test_a_forward_nan_and_a_nan_feed_are_named():
    x = sg.placeholder((None,), name="x")
    y = sg.log(x - 1.0)
    fn = sg.compile(sg.sum(y), inputs=[x], check_numerics=True)
    with pytest.raises(sg.NumericsError, match=r"log node \d+ made the first NaN \(forward, built at test_numerics"):
        fn(np.array([2.0, 0.5]))
    with pytest.raises(sg.NumericsError, match=r"placeholder 'x' \(created at test_numerics.py:\d+\) was fed a NaN "
                       r"at index \(1,\)"):
        fn(np.array([2.0, np.nan]))
    assert fn(np.array([2.0, 3.0])) == pytest.approx(np.log(2.0))


def test_an_update_that_overflows_is_named_and_not_assigned():
    W = sg.parameter(np.array([1e200, 1.0]), name="W")
    fn = sg.compile([], updates=[(W, W * 1e200)], check_numerics=True)
    with pytest.raises(sg.NumericsError, match=r"mul node \d+ made the first infinity \(update, built at"):
        fn()
    np.testing.assert_array_equal(W.value, [1e200, 1.0])


def test_checks_cost_nothing_when_off():
    step, _, _ = _sqrt_model()
    step(np.ones((2, 3)))
    assert "finite(" not in step.source
    checked, _, _ = _sqrt_model(check_numerics=True)
    checked(np.ones((2, 3)))
    assert "finite(" in checked.source and checked.program.kind == "numpy"


def test_errstate_raise_names_the_vjp_and_the_forward_line():
    step, _, h = _sqrt_model()
    with np.errstate(all="raise"), pytest.raises(sg.NumericsError, match=rf"div node \d+ \(backward, VJP of sqrt "
                                                  rf"node {h.id} from test_numerics.py:\d+; built at .*divide by zero"):
        step(np.zeros((20, 3)))


def test_eager_checks_name_the_op_and_its_vjp():
    x = eager.tensor(np.zeros(3), requires_grad=True)
    with eager.check_numerics():
        y = sg.sum(sg.sqrt(x))
        with pytest.raises(sg.NumericsError, match=r"eager div made an infinity .* \(backward, VJP of sqrt node \d+ "
                           r"from test_numerics.py:\d+; built at test_numerics.py:\d+\)"):
            y.backward()
    assert not eager.STATE.check_numerics                   # only inside the with
    with np.errstate(invalid="ignore"):
        assert np.isnan(sg.log(x - 1.0).numpy()).all()      # off: numpy's values


def test_eager_errstate_raise_gives_a_numerics_error_naming_the_op():
    x = eager.tensor(np.zeros(2))
    with np.errstate(all="raise"), pytest.raises(sg.NumericsError, match=r"eager log failed: divide by zero .*"
                                                  r"\(forward, built at test_numerics.py"):
        sg.log(x)
