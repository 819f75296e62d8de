"""staticgrad.nn.norm: BatchNorm1d/2d and LayerNorm against torch.nn, in graphs and eagerly, training and not."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager, nn, optim
from tests.explain.test_dot import dot_nodes

TOL = 1e-10
C = 3
BATCH_SHAPES = {"BatchNorm1d": [(6, C), (5, C, 4)], "BatchNorm2d": [(4, C, 3, 2)]}
CASES = [(kind, shape) for kind, shapes in BATCH_SHAPES.items() for shape in shapes]


def twins(kind, *args, **kwargs):
    """A staticgrad layer and a torch layer (float64) holding the same state, none of it at its default."""
    torch = pytest.importorskip("torch")
    theirs = getattr(torch.nn, kind)(*args, **kwargs).double()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in theirs.state_dict().values():
            if t.dtype == torch.float64:
                t.copy_(torch.rand(t.shape, generator=gen, dtype=torch.float64) + 0.5)
    ours = getattr(nn, kind)(*args, **kwargs)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def batches(rng, shape, n=3):
    return [rng.normal(1.0, 2.0, size=shape) for _ in range(n)], rng.uniform(0.5, 1.5, size=shape)


def torch_steps(layer, xs, proj):
    """torch's output of the last batch, the gradients of sum(out * proj) wrt it and the parameters, and the
    layer's state after every batch went through."""
    torch = pytest.importorskip("torch")
    for x in xs:
        xt = torch.tensor(x, requires_grad=True)
        out = layer(xt)
    (out * torch.tensor(proj)).sum().backward()
    grads = [p.grad.numpy() for p in layer.parameters()]
    return [out.detach().numpy(), xt.grad.numpy()] + grads, {k: v.numpy() for k, v in layer.state_dict().items()}


def static_steps(layer, xs, proj):
    """The same through one function compiled once (an input of unknown batch size), called per batch."""
    x = sg.placeholder((None,) + xs[0].shape[1:], name="x", requires_grad=True)
    out = layer(x)
    fn = sg.compile([out] + sg.grad(sg.sum(out * proj), [x] + layer.parameters()), inputs=[x])
    for value in xs:
        got = fn(value)
    return list(got), layer.state_dict()


def eager_steps(layer, xs, proj):
    twin = layer.to_eager()
    for value in xs:
        x = eager.tensor(value, requires_grad=True)
        out = twin(x)
    sg.sum(out * proj).backward()
    return [out.value, x.grad] + [p.grad for p in twin.parameters()], twin.state_dict()


def assert_same(got, want):
    (values, state), (values_t, state_t) = got, want
    assert len(values) == len(values_t)
    for k, (a, b) in enumerate(zip(values, values_t)):
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL, err_msg=f"output {k}")
    assert list(state) == list(state_t)
    for key in state:
        np.testing.assert_allclose(state[key], state_t[key], rtol=TOL, atol=TOL, err_msg=key)
        assert state[key].dtype == state_t[key].dtype, key


@pytest.mark.parametrize("kind, shape", CASES, ids=str)
@pytest.mark.parametrize("run", [static_steps, eager_steps], ids=["static", "eager"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_layers_match_torch_over_three_steps(kind, shape, run, training, rng):
    ours, theirs = twins(kind, C, momentum=0.3)
    ours.train(training)
    theirs.train(training)
    xs, proj = batches(rng, shape)
    want = torch_steps(theirs, xs, proj)
    got = run(ours, xs, proj)
    assert_same(got, want)
    if training:
        assert want[1]["num_batches_tracked"] == 3
    if run is eager_steps:
        assert ours.num_batches_tracked.value == 0            # the eager copy has its own state


@pytest.mark.parametrize("kwargs", [{"affine": False}, {"track_running_stats": False}, {"bias": False},
                                    {"affine": False, "track_running_stats": False}], ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_options_match_torch(kwargs, training, rng):
    xs, proj = batches(rng, (4, C, 2, 2), n=2)
    for run in (static_steps, eager_steps):
        ours, theirs = twins("BatchNorm2d", C, **kwargs)
        ours.train(training)
        theirs.train(training)
        assert_same(run(ours, xs, proj), torch_steps(theirs, xs, proj))


@pytest.mark.parametrize("normalized, shape", [(4, (5, 4)), ((3, 4), (2, 3, 4))], ids=str)
@pytest.mark.parametrize("kwargs", [{}, {"elementwise_affine": False}, {"bias": False}], ids=str)
def test_layer_norm_matches_torch_static_and_eager(normalized, shape, kwargs, rng):
    ours, theirs = twins("LayerNorm", normalized, **kwargs)
    xs, proj = batches(rng, shape, n=1)
    want = torch_steps(theirs, xs, proj)
    assert_same(static_steps(ours, xs, proj), want)
    assert_same(eager_steps(ours, xs, proj), want)


def test_state_dict_keys_and_repr_are_torch_s():
    torch = pytest.importorskip("torch")
    for kind, args, kwargs in [("BatchNorm1d", (4,), {}), ("BatchNorm2d", (3,), {"eps": 1e-3, "momentum": 0.2}),
                               ("BatchNorm2d", (3,), {"affine": False, "track_running_stats": False}),
                               ("LayerNorm", ((3, 4),), {}), ("LayerNorm", (5,), {"elementwise_affine": False})]:
        ours, theirs = getattr(nn, kind)(*args, **kwargs), getattr(torch.nn, kind)(*args, **kwargs)
        assert repr(ours) == repr(theirs)
        assert list(ours.state_dict()) == list(theirs.state_dict())
        for key, value in theirs.state_dict().items():
            np.testing.assert_array_equal(ours.state_dict()[key], value.numpy())


def test_running_stats_are_buffers_not_parameters():
    bn = nn.BatchNorm2d(3, name="bn")
    assert [p.name for p in bn.parameters()] == ["bn.weight", "bn.bias"]
    assert [p.name for p in bn.buffers()] == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    model = nn.Sequential(bn, sg.relu, nn.BatchNorm1d(3, affine=False, name="bn1"))
    assert len(model.parameters()) == 2 and len(model.buffers()) == 6
    twin = model.to_eager()
    assert [p.requires_grad for p in twin.parameters()] == [True, True]
    assert len(twin.buffers()) == 6 and not any(b.requires_grad for b in twin.buffers())


def test_train_and_eval_build_two_functions_sharing_the_state(rng):
    model = nn.Sequential(nn.BatchNorm1d(2, momentum=0.5), sg.relu)
    bn = model.layers[0]
    assert model.eval() is model and not bn.training
    assert model.train() is model and bn.training
    x = sg.placeholder((None, 2), name="x")
    step = sg.compile(model(x))
    predict = sg.compile(model.eval()(x))
    X = rng.normal(3.0, 2.0, size=(50, 2))
    before = predict(X)
    np.testing.assert_allclose(before, np.maximum(X / np.sqrt(1 + 1e-5), 0))      # fresh stats: 0 and 1
    for _ in range(20):
        step(X)
    mean, var = X.mean(axis=0), X.var(axis=0, ddof=1)       # (the running variance is the unbiased one)
    np.testing.assert_allclose(bn.running_mean.value, mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.value, var, rtol=1e-5)
    after = predict(X)                                   # now normalized by the stats training moved
    np.testing.assert_allclose(after, np.maximum((X - mean) / np.sqrt(var + 1e-5), 0), rtol=1e-5, atol=1e-5)
    assert bn.num_batches_tracked.value == 20


def test_a_training_step_with_an_optimizer_updates_weights_and_stats_together(rng):
    model = nn.Sequential(nn.Linear(4, 3, seed=0), nn.BatchNorm1d(3))
    x, y = sg.placeholder((None, 4), name="x"), sg.placeholder((None,), dtype="int64", name="y")
    loss = nn.softmax_cross_entropy(model(x), y)
    opt = optim.SGD(model, lr=0.1)
    step = sg.compile(loss, inputs=[x, y], updates=opt.updates(loss))
    bn = model.layers[1]
    X, Y = rng.normal(size=(16, 4)), rng.integers(0, 3, size=16)
    w0, linear = bn.weight.value.copy(), model.layers[0]
    hidden = X @ linear.weight.value + linear.bias.value           # (with the weights before the step)
    step(X, Y)
    assert not np.array_equal(bn.weight.value, w0)
    np.testing.assert_allclose(bn.running_mean.value, 0.1 * hidden.mean(axis=0))


def test_save_and_load_parameters_keep_the_running_stats(tmp_path, rng):
    model = nn.Sequential(nn.Linear(3, 2, seed=0), nn.BatchNorm1d(2))
    x = sg.placeholder((None, 3))
    step = sg.compile(model(x))
    for _ in range(3):
        step(rng.normal(size=(8, 3)))
    path = sg.save_parameters(model, tmp_path / "model")
    fresh = nn.Sequential(nn.Linear(3, 2, seed=5), nn.BatchNorm1d(2))
    sg.load_parameters(fresh, path)
    for a, b in zip(model.parameters() + model.buffers(), fresh.parameters() + fresh.buffers(), strict=True):
        np.testing.assert_array_equal(a.value, b.value)
    assert fresh.layers[1].num_batches_tracked.value == 3
    X = rng.normal(size=(5, 3))
    np.testing.assert_array_equal(sg.compile(fresh.eval()(x))(X), sg.compile(model.eval()(x))(X))


def test_a_collapsed_picture_draws_one_box_per_layer():
    model = nn.Sequential(nn.BatchNorm1d(3), sg.tanh, nn.LayerNorm(3), nn.BatchNorm1d(3))
    x = sg.placeholder((None, 3), name="x")
    loss = sg.sum(model(x))
    fn = sg.compile(loss, updates=optim.SGD(model, lr=0.1).updates(loss))
    scopes = {d["scope"].split("/")[0] for _, d in fn.graph.nodes(data=True) if d["scope"]}
    assert scopes == {"0.batchnorm1d", "1.tanh", "2.layernorm", "3.batchnorm1d"}
    boxes = {k: v.get("label") for k, v in dot_nodes(sg.to_dot(fn, collapse=True)).items() if k.startswith("scope_")}
    assert set(boxes) == {"scope_0_batchnorm1d", "scope_1_tanh", "scope_2_layernorm", "scope_3_batchnorm1d"}
    assert "<B>2.layernorm</B>" in boxes["scope_2_layernorm"]
    # the running statistics' updates are built at compile time, in the layer's scope all the same
    fn = sg.compile(loss)
    updates = [d for _, d in fn.graph.nodes(data=True) if d["role"] == "update" and d["op"] != "parameter"]
    assert updates and all(d["scope"] in ("0.batchnorm1d", "3.batchnorm1d") for d in updates)


def test_wrong_input_ranks_are_refused_when_built():
    with pytest.raises(sg.ShapeError, match=r"BatchNorm2d: expected 4D input \(N, C, ...\), got \(None, 3\) "
                                            r"\(at test_norm.py:\d+\)"):
        nn.BatchNorm2d(3)(sg.placeholder((None, 3)))
    with pytest.raises(sg.ShapeError, match=r"BatchNorm1d: expected 2D or 3D input"):
        nn.BatchNorm1d(3)(sg.placeholder((None, 3, 2, 2)))
    with pytest.raises(ValueError, match="momentum=None"):
        nn.BatchNorm1d(3, momentum=None)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(sg.placeholder((1, 3)))
    nn.BatchNorm1d(3).eval()(sg.placeholder((1, 3)))         # evaluation reads the running statistics: fine


# ------------------------------------------------------------------ Dropout
def test_dropout_in_evaluation_passes_the_input_on_as_torch_s(rng):
    torch = pytest.importorskip("torch")
    layer = nn.Dropout(0.3)
    assert repr(layer) == repr(torch.nn.Dropout(0.3))
    x = sg.placeholder((None, 4))
    assert layer.eval()(x) is x
    X = rng.normal(size=(2, 4))
    np.testing.assert_array_equal(layer.to_eager()(eager.tensor(X)).value, torch.nn.Dropout(0.3).eval()(
        torch.tensor(X)).numpy())


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_in_training_zeroes_a_fraction_p_and_scales_the_rest_as_torch(p, rng):
    torch = pytest.importorskip("torch")
    layer = nn.Dropout(p, key=7)
    x = sg.placeholder((None, 500), name="x", requires_grad=True)
    out = layer(x)
    fn = sg.compile([out, sg.grad(sg.sum(out * 3.0), [x])[0]], inputs=[x])
    X = rng.uniform(1.0, 2.0, size=(40, 500))
    (first, grad), (second, _) = fn(X), fn(X)
    kept = first != 0
    assert abs(1 - kept.mean() - p) < 0.01 and not np.array_equal(first, second)     # a new mask each call
    np.testing.assert_allclose(first[kept], X[kept] / (1 - p), rtol=1e-15)
    np.testing.assert_allclose(grad, 3.0 * kept / (1 - p), rtol=1e-15)               # through the kept ones
    theirs = torch.nn.Dropout(p)(torch.tensor(X)).numpy()                            # (torch's stream differs)
    assert set(np.unique(np.round(theirs / X, 12))) == set(np.unique(np.round(first / X, 12)))
    np.testing.assert_array_equal(layer.key.value, [7, 2])                           # two calls, one draw each


def test_dropout_draws_the_same_masks_in_both_modes_and_keeps_its_key_as_a_buffer(tmp_path):
    layer = nn.Dropout(0.5, key=3)
    assert layer.parameters() == [] and layer.buffers() == [layer.key]
    twin = layer.to_eager()                                  # a copy of the key, at the same place
    f = sg.compile(layer(sg.placeholder((None, 8), name="x")))
    X = np.ones((4, 8))
    for _ in range(2):
        np.testing.assert_array_equal(twin(eager.tensor(X)).value, f(X))
    path = sg.save_parameters(layer, tmp_path / "dropout")
    expected = f(X)
    sg.load_parameters(layer, path)                          # back to where the stream stood when saved
    np.testing.assert_array_equal(f(X), expected)
    with pytest.raises(ValueError, match="p must be a probability between 0 and 1, got 1.5"):
        nn.Dropout(1.5)
