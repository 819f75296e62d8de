"""Updates a graph carries by itself (staticgrad.effects): added by compile, chained, refused where unclear."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import effects


def _state(name="s"):
    return sg.parameter(np.zeros(3), name=name, requires_grad=False)


def test_compile_applies_the_update_of_a_needed_tensor_only():
    x = sg.placeholder((None, 3), name="x")
    s = _state()
    m = sg.mean(x, axis=0)
    effects.add_update(m, s, lambda v: 0.9 * v + 0.1 * m, "running mean")
    sg.compile(sg.sum(x * 2), [x])(np.ones((2, 3)))
    assert np.all(s.value == 0)                       # the function does not need m
    sg.compile([sg.sum(x), m], [x])(np.full((2, 3), 2.0))
    np.testing.assert_allclose(s.value, 0.2)


def test_updates_of_one_parameter_chain_in_build_order():
    x = sg.placeholder((3,), name="x")
    s = _state()
    a, b = x * 1.0, x * 2.0
    effects.add_update(a, s, lambda v: v * 0.5 + a, "first")
    effects.add_update(b, s, lambda v: v * 0.5 + b, "second")
    sg.compile(a + b, [x])(np.ones(3))
    np.testing.assert_allclose(s.value, (0 * 0.5 + 1) * 0.5 + 2)


def test_a_parameter_also_in_updates_is_refused():
    x = sg.placeholder((3,), name="x")
    s = _state("stat")
    y = x * 1.0
    effects.add_update(y, s, lambda v: v + y, "running sum")
    with pytest.raises(ValueError, match="'stat' is in updates, and the graph updates it by itself"):
        sg.compile(y, [x], updates=[(s, s * 2)])


def test_a_failed_call_changes_no_state():
    x = sg.placeholder((None, 3), name="x")
    s = _state()
    m = sg.mean(x, axis=0)
    effects.add_update(m, s, lambda v: v + m, "running sum")
    f = sg.compile(m, [x])
    with pytest.raises(sg.FeedError):
        f(np.ones((2, 4)))
    assert np.all(s.value == 0)


def test_loop_bodies_refuse_state_updates():
    s = _state()

    def step(c, x):
        effects.add_update(c, s, lambda v: v + 1.0, "a counter")
        return c + x, None

    with pytest.raises(sg.StaticgradError, match="a counter inside a scan, cond or while_loop body"):
        sg.scan(step, sg.constant(np.zeros(3)), sg.placeholder((4, 3)))


def test_untrained_state_is_no_parameter_of_a_loss():
    w = sg.parameter(np.ones(3), name="w")
    s = _state()
    loss = sg.sum(w * s)
    assert [p.name for p in loss.parameters()] == ["w"]
    assert not s.requires_grad


def test_a_saved_function_keeps_its_state_update(tmp_path):
    x = sg.placeholder((None, 3), name="x")
    s = _state()
    m = sg.mean(x, axis=0)
    effects.add_update(m, s, lambda v: v + m, "running sum")
    path = sg.save(sg.compile(m, [x]), tmp_path / "f")
    loaded = sg.load(path)
    loaded(np.ones((2, 3)))
    (state,) = loaded.parameters()
    assert np.all(s.value == 0)                       # the loaded function has its own copy
    np.testing.assert_allclose(state.value, 1.0)


def test_a_step_is_built_in_the_name_scopes_open_at_its_anchor():
    x = sg.placeholder((3,), name="x")
    s = _state()
    with sg.name_scope("layer"):
        y = x * 2.0
        effects.add_update(y, s, lambda v: v * 0.5 + y, "a running value")
    ((param, expr, what),) = effects.implicit_updates({y.id: y})
    assert param is s and what == "a running value"
    assert expr.scope == "layer" and expr.inputs[0].scope == "layer"
