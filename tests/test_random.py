"""staticgrad.random: streams whose state lives in the graph (keys as parameters), the same in eager mode,
saved with the model; and dropout."""
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager, nn
from staticgrad.io import LoadError
from tests.specs.random import bernoulli_ref, stream

THIS_FILE = os.path.basename(__file__)


def two_draws(x, key):
    """A model drawing twice per call, both of x's run-time shape (so both run at once on an eager x)."""
    return x * sg.random.normal(x.shape, key, like=x) + sg.random.uniform(x.shape, key, low=-1.0, high=2.0, like=x)


def compiled_two_draws(key, optimize=True):
    x = sg.placeholder((None, 3), name="x")
    return sg.compile(two_draws(x, key), [x], optimize=optimize)


X = np.arange(6.0).reshape(2, 3) + 1


# ------------------------------------------------------------------ streams: reproducible, new every call
def test_the_same_seed_gives_the_same_numbers_and_each_call_new_ones():
    f, g = compiled_two_draws(sg.random.key(3)), compiled_two_draws(sg.random.key(3))
    first = [f(X) for _ in range(3)]
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[1], first[2])
    for a in first:
        np.testing.assert_array_equal(g(X), a)


def test_a_call_reads_positions_p_to_p_plus_d_and_leaves_the_key_at_p_plus_d():
    k = sg.random.key(5)
    f = compiled_two_draws(k)
    assert sorted(n.attrs["index"] for n in f.ir.nodes.values() if n.op.startswith("random_")) == [0, 1]
    k.value = [5, 40]
    got = f(X)
    noise = np.random.Generator(stream([5, 40], 0)).standard_normal((2, 3))
    u = np.random.Generator(stream([5, 40], 1)).random((2, 3))
    np.testing.assert_allclose(got, X * noise + (-1.0 + 3.0 * u), rtol=1e-15)
    np.testing.assert_array_equal(k.value, [5, 42])


def test_different_keys_draw_independent_numbers():
    a = sg.compile(sg.random.normal((20000,), sg.random.key(1)))()
    b = sg.compile(sg.random.normal((20000,), sg.random.key(2)))()
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.03        # (fixed seeds: the same numbers every run)
    assert abs(a.mean()) < 0.03 and abs(a.std() - 1) < 0.03


def test_two_draws_of_one_key_are_never_merged_or_folded():
    k = sg.random.key(9)
    a, b = sg.random.uniform((4,), k), sg.random.uniform((4,), k)
    f = sg.compile([a, b, a - b])
    assert f.ir.count("random_uniform") == 2          # CSE: different indexes; folding: the key is a parameter
    x, y, d = f()
    assert not np.array_equal(x, y)
    np.testing.assert_array_equal(d, x - y)


def test_optimize_false_draws_the_same_numbers():
    f, g = compiled_two_draws(sg.random.key(4)), compiled_two_draws(sg.random.key(4), optimize=False)
    for _ in range(2):
        np.testing.assert_array_equal(f(X), g(X))


def test_the_default_key_and_seed():
    sg.random.seed(12)
    f = sg.compile(sg.random.normal((3,)))
    first = f()
    np.testing.assert_array_equal(sg.random.default_key().value, [12, 1])
    sg.random.seed(12)
    np.testing.assert_array_equal(f(), first)
    np.testing.assert_array_equal(first, np.random.Generator(stream([12, 0])).standard_normal(3))


def test_a_draw_whose_value_nothing_reads_still_moves_its_key_on():
    k = sg.random.key(1)
    x = sg.placeholder((None, 3), name="x")
    z = sg.random.normal(x.shape, k, like=x)          # only its shape is read: the plan does not draw it
    f = sg.compile(x + sg.zeros_like(z) + sg.random.uniform((3,), k), [x])
    got = f(np.zeros((2, 3)))
    assert "random_normal" not in f.source
    np.testing.assert_array_equal(got, np.broadcast_to(np.random.Generator(stream([1, 1])).random(3), (2, 3)))
    np.testing.assert_array_equal(k.value, [1, 2])


def test_normal_uniform_and_bernoulli_follow_numpy_from_the_same_stream():
    k = sg.random.key(21)
    f = sg.compile([sg.random.normal((2, 2), k, mean=1.0, std=3.0), sg.random.uniform((5,), k, low=2.0, high=4.0),
                    sg.random.bernoulli((3, 3), k, p=0.25)])
    n, u, b = f()
    np.testing.assert_allclose(n, 1.0 + 3.0 * np.random.Generator(stream([21, 0])).standard_normal((2, 2)), rtol=1e-15)
    np.testing.assert_allclose(u, 2.0 + 2.0 * np.random.Generator(stream([21, 1])).random(5), rtol=1e-15)
    np.testing.assert_array_equal(b, bernoulli_ref([21, 2], (3, 3), 0.25, np.float64))


def test_float32_draws():
    k = sg.random.key(2)
    x = sg.placeholder((None, 4), dtype="float32", name="x")
    outs = [sg.random.normal(x.shape, k, dtype="float32", like=x), sg.random.uniform((3,), k, dtype="float32"),
            sg.random.bernoulli((3,), k, p=0.5, dtype="float32"), sg.dropout(x, 0.5, key=k)]
    for value in sg.compile(outs, [x])(np.ones((2, 4), np.float32)):
        assert value.dtype == np.float32
    np.testing.assert_array_equal(sg.compile(outs[0], [x])(np.ones((2, 4), np.float32)),
                                  np.random.Generator(stream([2, 4])).standard_normal((2, 4), dtype=np.float32))


# ------------------------------------------------------------------ eager mode: the same stream
def test_eager_code_draws_what_the_compiled_function_draws():
    f = compiled_two_draws(sg.random.key(7))
    static = [f(X) for _ in range(3)]
    symbolic_key, eager_key = sg.random.key(7), eager.tensor(sg.random.key(7).value)
    for key in (symbolic_key, eager_key):              # a parameter used eagerly, or an eager copy of one
        for want in static:
            np.testing.assert_array_equal(two_draws(eager.tensor(X), key).numpy(), want)
        np.testing.assert_array_equal(key.value, [7, 6])


def test_a_draw_of_an_eager_key_alone_runs_at_once():
    k = eager.tensor(sg.random.key(3).value)
    z = sg.random.normal((2,), k)
    assert eager.is_eager(z)
    np.testing.assert_array_equal(z.numpy(), np.random.Generator(stream([3, 0])).standard_normal(2))
    np.testing.assert_array_equal(k.value, [3, 1])
    # a symbolic key and no eager input: a symbolic draw; met by an eager value it is drawn then, once, and
    # the key (a parameter: eager mode's state too) moves on
    key = sg.random.key(3)
    symbolic = sg.random.normal((2,), key)
    assert not eager.is_eager(symbolic)
    np.testing.assert_array_equal((z * 0 + symbolic).numpy(), np.random.Generator(stream([3, 0])).standard_normal(2))
    np.testing.assert_array_equal(key.value, [3, 1])
    with pytest.raises(TypeError, match="cannot mix eager tensors with the symbolic placeholder 'x'"):
        z + sg.placeholder((2,), name="x")


class _DropoutNet(nn.Module):
    def __init__(self):
        self.layer = nn.Linear(4, 8, seed=0)
        self.key = sg.random.key(11, name="net.key")

    def __call__(self, x):
        return sg.dropout(sg.tanh(self.layer(x)), 0.5, key=self.key)


def test_a_model_with_dropout_runs_the_same_compiled_and_eagerly():
    net = _DropoutNet()
    twin = net.to_eager()
    assert not twin.key.requires_grad
    x = sg.placeholder((None, 4), name="x")
    y = net(x)
    (gw,) = sg.grad(sg.sum(y * y), [net.layer.weight])
    f = sg.compile([y, gw], [x])
    data = np.random.default_rng(0).standard_normal((5, 4))
    for _ in range(3):
        want, want_gw = f(data)
        got = twin(eager.tensor(data))
        twin.layer.weight.grad = None
        sg.sum(got * got).backward()
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-13)
        np.testing.assert_allclose(twin.layer.weight.grad, want_gw, rtol=1e-12)
    np.testing.assert_array_equal(net.key.value, twin.key.value)


# ------------------------------------------------------------------ dropout
def test_dropout_keeps_the_mean_and_zeroes_a_fraction_p():
    x = sg.placeholder((None, 1000), name="x")
    for p in (0.1, 0.5, 0.9):
        y = sg.compile(sg.dropout(x, p, key=sg.random.key(0)), [x])(np.ones((1000, 1000)))
        # (fixed seed: the same numbers every run; the bounds are 6 standard deviations for 10**6 draws)
        sd = np.sqrt(p * (1 - p) / 1e6)
        assert abs((y == 0).mean() - p) < 6 * sd
        assert abs(y.mean() - 1) < 6 * sd / (1 - p)
        np.testing.assert_allclose(y[y != 0], 1 / (1 - p), rtol=1e-15)


def test_dropout_gradient_is_the_scaled_mask():
    x = sg.placeholder((None, 6), name="x", requires_grad=True)
    g = sg.placeholder((None, 6), name="g")
    y = sg.dropout(x, 0.3, key=sg.random.key(8))
    (gx,) = sg.grad(sg.sum(y * g), [x])
    rng = np.random.default_rng(1)
    X, G = rng.uniform(0.5, 1.5, (4, 6)), rng.standard_normal((4, 6))
    Y, GX = sg.compile([y, gx], [x, g])(X, G)
    mask = Y != 0
    assert 0 < mask.sum() < mask.size
    np.testing.assert_allclose(Y, X * mask / 0.7, rtol=1e-15)
    np.testing.assert_allclose(GX, G * mask / 0.7, rtol=1e-15)


def test_dropout_off_none_and_all():
    x = sg.placeholder((None, 3), name="x")
    assert sg.dropout(x, 0.5, training=False) is x and sg.dropout(x, 0.0) is x
    X = np.array([[1.0, -2.0, 3.0]])
    np.testing.assert_array_equal(sg.compile(sg.dropout(x, 1.0), [x])(X), np.zeros((1, 3)))
    e = eager.tensor(X)
    assert sg.dropout(e, 0.2, training=False) is e


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_dropout_refuses_a_probability_outside_0_1_naming_the_line(p):
    x = sg.placeholder((None, 3), name="x")
    with pytest.raises(ValueError, match=f"dropout: p must be .*{THIS_FILE}"):
        sg.dropout(x, p)


def test_dropout_refuses_integers_and_a_tensor_training_flag():
    with pytest.raises(TypeError, match="dropout: x must be a floating tensor"):
        sg.dropout(sg.placeholder((3,), dtype="int64"), 0.5)
    with pytest.raises(TypeError, match="training must be True or False"):
        sg.dropout(sg.placeholder((3,)), 0.5, training=sg.placeholder(()))


# ------------------------------------------------------------------ what is refused
def test_bad_shapes_keys_and_numbers_are_refused_at_build():
    x = sg.placeholder((None, 3), name="x")
    with pytest.raises(sg.ShapeError, match=f"random_normal: shape .* like=.*{THIS_FILE}"):
        sg.random.normal(x.shape)
    with pytest.raises(sg.ShapeError, match=r"normal: shape \(None, 4\) does not match like's shape"):
        sg.random.normal((None, 4), like=x)
    with pytest.raises(TypeError, match="uniform: key must be a key"):
        sg.random.uniform((3,), sg.random.key(1) * 1.0)
    with pytest.raises(TypeError, match="random_normal: a key is a float64 tensor of shape"):
        sg.random.normal((3,), sg.parameter(np.zeros(3), requires_grad=False))
    with pytest.raises(ValueError, match="bernoulli: p must be between 0 and 1"):
        sg.random.bernoulli((3,), p=1.5)
    with pytest.raises(TypeError, match="bernoulli: the second argument is the key; give the probability as p=0.25"):
        sg.random.bernoulli((3,), 0.25)
    with pytest.raises(ValueError, match="normal: std must be >= 0"):
        sg.random.normal((3,), std=-1.0)
    with pytest.raises(TypeError, match="normal: mean must be a number"):
        sg.random.normal((3,), mean=x)
    with pytest.raises(TypeError, match="random_uniform: dtype must be float32 or float64"):
        sg.random.uniform((3,), dtype="int32")
    with pytest.raises(ValueError, match="random.key: a seed is an integer"):
        sg.random.key(-1)


def test_a_draw_in_a_loop_body_is_refused():
    k = sg.random.key(0)

    def step(c, x):
        return c + x * sg.random.normal((3,), k), None

    with pytest.raises(sg.StaticgradError, match="random_normal inside a scan, cond or while_loop body"):
        sg.scan(step, sg.constant(np.zeros(3)), sg.placeholder((4, 3)))


def test_a_key_set_to_a_bad_value_fails_the_call_and_moves_nothing():
    k = sg.random.key(0)
    f = sg.compile(sg.random.normal((3,), k))
    k.value = [1.5, 0.0]
    with pytest.raises(sg.ExecutionError, match="two integers"):
        f()
    np.testing.assert_array_equal(k.value, [1.5, 0.0])


# ------------------------------------------------------------------ saved and loaded
def test_a_saved_function_draws_on_from_where_it_stood(tmp_path):
    k = sg.random.key(6)
    f = compiled_two_draws(k)
    f(X)
    loaded = sg.load(sg.save(f, tmp_path / "f"))
    (key,) = [p for p in loaded.parameters() if p.name == k.name]
    assert not key.requires_grad
    np.testing.assert_array_equal(loaded(X), f(X))
    np.testing.assert_array_equal(loaded(X), f(X))


def test_a_checkpoint_restores_the_stream_position(tmp_path):
    k = sg.random.key(6)
    f = compiled_two_draws(k)
    f(X)
    sg.save_parameters(f, tmp_path / "ck")
    after = [f(X), f(X)]
    sg.load_parameters(f, tmp_path / "ck")
    for want in after:
        np.testing.assert_array_equal(f(X), want)


@pytest.mark.parametrize("attrs, message", [
    ({"index": -1}, "index must be >= 0"),
    ({"p": 1.5}, "p must be a float between 0 and 1"),
    ({"dtype": "int8"}, "dtype must be bool or a float dtype"),
    ({"shape": [3]}, "shape must be None"),
])
def test_a_file_with_bad_draw_attributes_is_refused(tmp_path, attrs, message):
    x = sg.placeholder((None, 3), name="x")
    path = str(sg.save(sg.compile(sg.dropout(x, 0.5, key=sg.random.key(1)), [x]), tmp_path / "f"))
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    doc = json.loads(members["graph.json"])
    node = next(n for n in doc["function"]["nodes"] if n["op"] == "random_bernoulli")
    encoded = {"index": attrs.get("index"), "p": attrs.get("p"), "dtype": {"t": "dtype", "v": attrs.get("dtype")},
               "shape": {"t": "tuple", "v": attrs.get("shape")}}
    node["attrs"].update({name: encoded[name] for name in attrs})
    members["graph.json"] = json.dumps(doc).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)
    with pytest.raises(LoadError, match=message):
        sg.load(path)


def test_the_readme_snippet_runs_as_written():
    text = (Path(__file__).parents[1] / "README.md").read_text()
    start = text.index("key = sg.random.key(7)")
    space = {"np": np, "sg": sg}
    exec(compile(text[start:text.index("```", start)], "README.md", "exec"), space)
    np.testing.assert_array_equal(space["key"].value, [7, 2])           # one call, two draws
    first = space["f"](np.ones((32, 784)))
    assert first.shape == (32, 256) and not np.array_equal(first, space["f"](np.ones((32, 784))))
