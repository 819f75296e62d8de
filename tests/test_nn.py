"""staticgrad.nn: initializers, layers and losses."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager, nn


# ------------------------------------------------------------------ initializers
@pytest.mark.parametrize("name, bound", [
    ("glorot_uniform", lambda i, o: np.sqrt(6 / (i + o))),
    ("he_uniform", lambda i, o: np.sqrt(6 / i)),
])
def test_uniform_initializers_stay_within_their_bound(name, bound):
    w = nn.INITIALIZERS[name]((300, 200), seed=1)
    limit = bound(300, 200)
    assert np.abs(w).max() <= limit
    assert np.abs(w).max() > 0.95 * limit          # uses the whole range, not a narrower one


@pytest.mark.parametrize("name, std", [
    ("glorot_normal", lambda i, o: np.sqrt(2 / (i + o))),
    ("he_normal", lambda i, o: np.sqrt(2 / i)),
])
def test_normal_initializers_have_their_spread(name, std):
    w = nn.INITIALIZERS[name]((400, 300), seed=2)
    assert w.std() == pytest.approx(std(400, 300), rel=0.02)
    assert abs(w.mean()) < 0.1 * std(400, 300)


@pytest.mark.parametrize("name", ["he_normal", "he_uniform", "glorot_normal", "glorot_uniform"])
def test_initializers_of_a_four_axis_weight_count_its_receptive_field(name):
    # a 3x3 kernel's 9 positions are all inputs of each output: He's fan_in is 64 * 9 (std 0.059), not 64
    # (0.177); 64 whichever of the first two axes is read as the inputs. (A uniform's std is its bound/√3.)
    shape = (64, 32, 3, 3) if name.startswith("glorot") else (64, 64, 3, 3)
    std = np.sqrt(2 / ((64 + 32) * 9)) if name.startswith("glorot") else np.sqrt(2 / (64 * 9))
    w = nn.INITIALIZERS[name](shape, seed=3)
    assert w.shape == shape
    assert w.std() == pytest.approx(std, rel=0.03)


def test_initializers_are_reproducible_from_a_seed():
    a = nn.he_normal((4, 5), seed=7)
    b = nn.he_normal((4, 5), seed=7)
    c = nn.he_normal((4, 5), seed=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert nn.glorot_uniform((3, 2), seed=0, dtype="float32").dtype == np.float32


def test_unknown_initializer_and_activation_are_errors():
    with pytest.raises(ValueError, match="unknown initializer 'nope'"):
        nn.Linear(2, 3, init="nope")
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        nn.MLP([2, 3], activation="swishy")
    with pytest.raises(ValueError, match=r"MLP needs at least an input and an output size, got \[3\]"):
        nn.MLP([3])


# ------------------------------------------------------------------ layers
def test_linear_computes_x_at_w_plus_b_and_lists_its_parameters(rng):
    layer = nn.Linear(3, 4, seed=0, name="fc")
    assert [p.name for p in layer.parameters()] == ["fc.weight", "fc.bias"]
    assert layer.weight.shape == (3, 4) and layer.bias.shape == (4,)
    layer.bias.value = rng.normal(size=4)
    x = sg.placeholder((None, 3), name="x")
    X = rng.normal(size=(5, 3))
    out = sg.compile(layer(x), inputs=[x])(X)
    np.testing.assert_allclose(out, X @ layer.weight.value + layer.bias.value, rtol=1e-12)


def test_linear_without_bias_and_in_float32():
    layer = nn.Linear(2, 2, bias=False, seed=0, dtype="float32")
    assert layer.parameters() == [layer.weight]
    x = sg.placeholder((None, 2), dtype="float32")
    assert sg.compile(layer(x))({x: np.ones((1, 2), np.float32)}).dtype == np.float32


def test_mlp_matches_a_numpy_forward_pass(rng):
    mlp = nn.MLP([2, 5, 3, 1], activation="tanh", seed=3)
    assert [layer.weight.shape for layer in mlp.layers] == [(2, 5), (5, 3), (3, 1)]
    assert len(mlp.parameters()) == 6
    x = sg.placeholder((None, 2))
    X = rng.normal(size=(7, 2))
    h = X
    for k, layer in enumerate(mlp.layers):
        h = h @ layer.weight.value + layer.bias.value
        if k < 2:
            h = np.tanh(h)
    np.testing.assert_allclose(sg.compile(mlp(x), inputs=[x])(X), h, rtol=1e-12)


def test_mlp_seed_makes_the_model_reproducible():
    a, b = nn.MLP([3, 4, 2], seed=5), nn.MLP([3, 4, 2], seed=5)
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.value, q.value)
    c = nn.MLP([3, 4, 2], seed=6)
    assert not np.array_equal(a.parameters()[0].value, c.parameters()[0].value)
    # each layer draws fresh numbers from the one generator
    d = nn.MLP([4, 4, 4], seed=0)
    assert not np.array_equal(d.layers[0].weight.value, d.layers[1].weight.value)


def test_mlp_output_activation_and_sequential(rng):
    x = sg.placeholder((None, 2))
    mlp = nn.MLP([2, 3], output_activation="sigmoid", seed=0)
    out = sg.compile(mlp(x), inputs=[x])(rng.normal(size=(4, 2)))
    assert ((out > 0) & (out < 1)).all()
    a, b = nn.Linear(2, 3, seed=0), nn.Linear(3, 1, seed=1)
    seq = nn.Sequential(a, sg.relu, b)
    assert seq.parameters() == a.parameters() + b.parameters()
    X = rng.normal(size=(4, 2))
    expected = np.maximum(X @ a.weight.value, 0) @ b.weight.value
    np.testing.assert_allclose(sg.compile(seq(x), inputs=[x])(X), expected, rtol=1e-12)


def test_module_parameters_are_not_repeated_when_shared():
    layer = nn.Linear(2, 2, seed=0)
    assert len(nn.Sequential(layer, layer).parameters()) == 2


def test_to_eager_copies_the_parameters_into_eager_leaves_that_take_gradients(rng):
    shared = nn.Linear(3, 3, seed=0)
    model = nn.Sequential(shared, sg.tanh, shared, nn.MLP([3, 2], seed=1))
    twin = model.to_eager()
    params, eager_params = model.parameters(), twin.parameters()
    assert len(eager_params) == len(params) == 4               # the shared layer's two stay one pair
    assert all(eager.is_eager(p) and p.requires_grad for p in eager_params)
    assert [p.name for p in eager_params] == [p.name for p in params]
    X = rng.normal(size=(5, 3))
    x = sg.placeholder((None, 3))
    loss = sg.sum(model(x) ** 2)
    want = sg.compile([loss] + sg.grad(loss, params), inputs=[x])(X)
    eager_loss = sg.sum(twin(eager.tensor(X)) ** 2)
    eager_loss.backward()
    np.testing.assert_allclose(eager_loss.value, want[0], rtol=1e-12)
    for p, g in zip(eager_params, want[1:]):
        np.testing.assert_allclose(p.grad, g, rtol=1e-12, atol=1e-14)
    eager_params[0].value = np.zeros((3, 3))                   # the copy's values are its own
    assert np.abs(params[0].value).max() > 0


class _Scaled(nn.Module):
    """A module with a trained weight, a buffer, and sub-modules in a list (for train/eval/buffers)."""

    def __init__(self, *inner):
        self.weight = sg.parameter(np.ones(3), name="weight")
        self.count = sg.parameter(np.zeros(()), name="count", requires_grad=False)
        self.inner = list(inner)

    def __call__(self, x):
        for layer in self.inner:
            x = layer(x)
        return x * self.weight * (2.0 if self.training else 1.0)


def test_train_and_eval_reach_every_sub_module_and_return_the_module():
    leaf = _Scaled()
    model = nn.Sequential(_Scaled(leaf), nn.Linear(3, 3, seed=0))
    assert model.training and leaf.training                    # modules start in training, as torch's
    assert model.eval() is model
    assert not any(m.training for m in (model, model.layers[0], leaf, model.layers[1]))
    assert model.train() is model and leaf.training
    x = sg.placeholder((None, 3))
    train_out = sg.compile(model(x))(np.ones((1, 3)))
    eval_out = sg.compile(model.eval()(x))(np.ones((1, 3)))          # read when called: a graph of its own
    np.testing.assert_allclose(train_out, 4 * eval_out)


def test_buffers_are_the_untrained_state_kept_apart_from_parameters(tmp_path):
    model = nn.Sequential(_Scaled(_Scaled()), nn.Linear(3, 2, seed=0))
    assert [p.name for p in model.parameters()] == ["weight", "weight", "linear.weight", "linear.bias"]
    assert [b.name for b in model.buffers()] == ["count", "count"]
    twin = model.to_eager()
    assert all(p.requires_grad for p in twin.parameters()) and not any(b.requires_grad for b in twin.buffers())
    model.buffers()[1].value = 7.0
    path = sg.save_parameters(model, tmp_path / "ckpt")
    model.buffers()[1].value = 0.0
    sg.load_parameters(model, path)
    assert model.buffers()[1].value == 7.0


def test_sequential_builds_each_layer_in_a_scope_of_its_own():
    model = nn.Sequential(nn.Linear(2, 2, seed=0), sg.tanh, nn.Linear(2, 1, seed=1))
    out = model(sg.placeholder((None, 2)))
    scopes, stack = set(), [out]
    while stack:
        t = stack.pop()
        scopes.add((t.op, t.scope) if t.is_leaf else t.scope)
        stack.extend(t.inputs)
    assert {s for s in scopes if isinstance(s, str)} == {"0.linear", "1.tanh", "2.linear"}
    assert repr(model) == ("Sequential(\n  (0): Linear(2, 2, bias=True)\n  (1): tanh\n"
                           "  (2): Linear(2, 1, bias=True)\n)")


def _scopes(out) -> set:
    """The name scopes of the non-leaf tensors ``out`` is computed from."""
    scopes, stack, seen = set(), [out], set()
    while stack:
        t = stack.pop()
        if t.id not in seen:
            seen.add(t.id)
            scopes |= set() if t.is_leaf else {t.scope}
            stack.extend(t.inputs)
    return scopes


def test_linear_mlp_and_losses_build_in_scopes_named_as_their_parameters():
    x = sg.placeholder((None, 2))
    assert _scopes(nn.Linear(2, 3, name="enc/in")(x)) == {"enc.in"}       # ('/' would nest scopes)
    model = nn.MLP([2, 4, 4, 1], activation="tanh")
    y = model(x)
    # each layer's activation in its scope, and no "mlp" around them: a collapsed picture, one box per layer
    assert _scopes(y) == {"mlp.0", "mlp.1", "mlp.2"} and y.scope == "mlp.2"
    assert [p.name for p in model.parameters()][:2] == ["mlp.0.weight", "mlp.0.bias"]
    assert _scopes(nn.binary_cross_entropy_with_logits(y, 1.0)) - _scopes(y) == {"binary_cross_entropy"}
    assert nn.mse(y, 0.0).scope == "mse"
    with sg.name_scope("model"):
        assert _scopes(model(x)) == {"model/mlp.0", "model/mlp.1", "model/mlp.2"}
    # in a Sequential, whose "k.name" scope already names the layer, a Linear opens none of its own
    assert _scopes(nn.Sequential(nn.Linear(2, 2, seed=0))(x)) == {"0.linear"}


# ------------------------------------------------------------------ losses
def _value(loss_fn, *arrays):
    holders = [sg.placeholder(a.shape, dtype=a.dtype) for a in arrays]
    return float(sg.compile(loss_fn(*holders), inputs=holders)(*arrays))


def test_mse(rng):
    p, t = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    assert _value(nn.mse, p, t) == pytest.approx(np.mean((p - t) ** 2), rel=1e-12)


def test_binary_cross_entropy_with_logits_matches_the_textbook_formula(rng):
    z, t = rng.normal(size=10) * 3, (rng.random(10) > 0.5).astype(float)
    s = 1 / (1 + np.exp(-z))
    expected = -np.mean(t * np.log(s) + (1 - t) * np.log(1 - s))
    assert _value(nn.binary_cross_entropy_with_logits, z, t) == pytest.approx(expected, rel=1e-12)


def test_binary_cross_entropy_with_logits_is_finite_for_huge_logits():
    z = np.array([800.0, -800.0])
    t = np.array([0.0, 1.0])
    assert _value(nn.binary_cross_entropy_with_logits, z, t) == pytest.approx(800.0)


def test_loss_gradients_are_finite_and_right(rng):
    z = sg.placeholder((3,), requires_grad=True)
    t = np.array([1.0, 0.0, 1.0])
    loss = nn.binary_cross_entropy_with_logits(z, t)
    (gz,) = sg.grad(loss, [z])
    Z = np.array([900.0, 0.3, -900.0])
    expected = (0.5 * (1 + np.tanh(Z / 2)) - t) / 3      # sigmoid without overflow
    np.testing.assert_allclose(sg.compile(gz, inputs=[z])(Z), expected, rtol=1e-12)


def test_softmax_cross_entropy_loss(rng):
    logits, labels = rng.normal(size=(5, 4)), rng.integers(0, 4, size=5)
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    expected = -np.mean(logp[np.arange(5), labels])
    assert _value(nn.softmax_cross_entropy, logits, labels) == pytest.approx(expected, rel=1e-12)


def test_accuracy_helper():
    assert nn.accuracy(np.array([[0.1, 2.0], [3.0, 1.0]]), np.array([1, 1])) == 0.5
    assert nn.accuracy(np.array([-1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.0])) == pytest.approx(2 / 3)
    assert nn.accuracy(np.array([0.5, -0.5, 0.0]), np.array([1, 0, 0])) == 1.0     # above 0, not above 1
    # the classes are the last axis, also when there are more examples than classes
    logits = np.array([[0.1, 2.0, 0.3], [3.0, 1.0, 0.0], [0.0, 0.0, 5.0], [1.0, 0.0, 0.0]])
    assert nn.accuracy(logits, np.array([1, 0, 2, 2])) == 0.75


def test_accuracy_of_a_one_column_output_is_binary():
    logits, labels = np.array([[2.0], [-2.0], [3.0], [-1.0]]), np.array([1.0, 0.0, 1.0, 1.0])
    assert nn.accuracy(logits, labels) == pytest.approx(3 / 4)
    assert nn.accuracy(logits, labels[:, None]) == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match=r"accuracy: logits of shape \(4,\) do not fit labels of shape \(4, 1\)"):
        nn.accuracy(logits[:, 0], labels[:, None])
    with pytest.raises(ValueError, match="accuracy"):
        nn.accuracy(np.zeros((4, 3)), np.zeros(5))


@pytest.mark.parametrize("loss, what", [(nn.mse, "prediction"), (nn.binary_cross_entropy_with_logits, "logits")])
def test_elementwise_losses_refuse_shapes_that_would_broadcast(loss, what):
    out, t = sg.placeholder((None, 1)), sg.placeholder((None,))
    with pytest.raises(sg.ShapeError) as info:
        loss(out, t)                                     # the line the error must name
    line = info.traceback[0].lineno + 1                  # pytest counts lines from 0
    message = str(info.value)
    assert message.startswith(loss.__name__ + ": ") and f"{what} of shape (None, 1)" in message
    assert "(None,)" in message and f"test_nn.py:{line}" in message
    with pytest.raises(sg.ShapeError):
        loss(sg.placeholder((3,)), np.zeros(4))
    loss(sg.placeholder((None, 2)), sg.placeholder((5, None)))     # None matches any size
    # one number against every element pairs nothing wrongly (a GAN's "all real" target)
    z = sg.placeholder((None, 1), name="z")
    fn = sg.compile(loss(z, 1.0), inputs=[z])
    assert float(fn(np.array([[0.5], [-2.0]]))) == float(sg.compile(loss(z, np.ones((2, 1))), inputs=[z])(
        np.array([[0.5], [-2.0]])))


def test_losses_expose_the_parameters_they_depend_on():
    model = nn.MLP([2, 4, 1], seed=0)
    x, t = sg.placeholder((None, 2), name="x"), sg.placeholder((None, 1), name="t")
    out = model(x)
    for loss in (nn.mse(out, t), nn.binary_cross_entropy_with_logits(out, t)):
        assert [p.id for p in loss.parameters()] == [p.id for p in model.parameters()]
    labels = sg.placeholder((None,), dtype="int64", name="labels")
    head = nn.Linear(2, 3, seed=1)
    assert [p.id for p in nn.softmax_cross_entropy(head(x), labels).parameters()] == [p.id for p in head.parameters()]
    assert x.parameters() == []
