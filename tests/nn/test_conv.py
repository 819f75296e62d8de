"""staticgrad.nn.conv: Conv1d, Conv2d, the pooling layers and Flatten against torch.nn, in graphs and eagerly."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager, nn
from tests.explain.test_dot import dot_nodes

TOL = 1e-10


def twins(kind, *args, **kwargs):
    """A staticgrad layer and a torch layer (float64) with the torch layer's state copied over."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs = getattr(torch.nn, kind)(*args, **kwargs).double()
    ours = getattr(nn, kind)(*args, **kwargs)
    if hasattr(ours, "load_state_dict"):
        ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def torch_run(layer, x, proj):
    """torch's output, and the gradients of sum(out * proj) wrt x and each parameter."""
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x, requires_grad=True)
    out = layer(xt)
    (out * torch.tensor(proj)).sum().backward()
    return [out.detach().numpy(), xt.grad.numpy()] + [p.grad.numpy() for p in layer.parameters()]


def static_run(layer, x, proj):
    """The same through one compiled function of an input of unknown batch size."""
    xs = sg.placeholder((None,) + x.shape[1:], name="x", requires_grad=True)
    out = layer(xs)
    return list(sg.compile([out] + sg.grad(sg.sum(out * proj), [xs] + layer.parameters()), inputs=[xs])(x))


def eager_run(layer, x, proj):
    twin = layer.to_eager()
    xe = eager.tensor(x, requires_grad=True)
    out = twin(xe)
    sg.sum(out * proj).backward()
    return [out.value, xe.grad] + [p.grad for p in twin.parameters()]


def check_against_torch(ours, theirs, x, rng):
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        proj = rng.uniform(0.5, 1.5, size=theirs(torch.tensor(x)).shape)
    want = torch_run(theirs, x, proj)
    for run in (static_run, eager_run):
        got = run(ours, x, proj)
        assert len(got) == len(want)
        for k, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL, err_msg=f"{run.__name__}: output {k}")


CONV_CASES = [
    ("Conv2d", (3, 4, 3), {}, (2, 3, 6, 5)),
    ("Conv2d", (4, 6, (3, 2)), {"stride": 2, "padding": 1, "groups": 2}, (2, 4, 7, 6)),
    ("Conv2d", (2, 3, 3), {"dilation": 2, "padding": "same", "bias": False}, (2, 2, 7, 7)),
    ("Conv1d", (3, 4, 3), {}, (2, 3, 8)),
    ("Conv1d", (4, 2, 2), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}, (3, 4, 9)),
]


@pytest.mark.parametrize("kind, args, kwargs, shape", CONV_CASES, ids=[f"{c[0]}-{c[2]}" for c in CONV_CASES])
def test_conv_layers_match_torch_static_and_eager(kind, args, kwargs, shape, rng):
    ours, theirs = twins(kind, *args, **kwargs)
    check_against_torch(ours, theirs, rng.normal(size=shape), rng)


def test_a_conv_layer_takes_one_example_without_its_batch_axis(rng):
    ours, theirs = twins("Conv2d", 2, 3, 2)
    x = rng.normal(size=(2, 5, 4))
    out = sg.compile(ours(sg.placeholder(x.shape, name="x")))(x)
    assert out.shape == (3, 4, 3)
    np.testing.assert_allclose(out, theirs(pytest.importorskip("torch").tensor(x)).detach().numpy(), rtol=TOL)


def test_conv_state_dict_repr_and_initialization_are_torch_s():
    torch = pytest.importorskip("torch")
    for kind, args, kwargs in [(c[0], c[1], c[2]) for c in CONV_CASES]:
        ours, theirs = getattr(nn, kind)(*args, **kwargs), getattr(torch.nn, kind)(*args, **kwargs)
        assert repr(ours) == repr(theirs)
        assert {k: v.shape for k, v in ours.state_dict().items()} == \
            {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    # U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * kh * kw, for the weight and the bias; seeded
    a, b, c = (nn.Conv2d(8, 64, 3, groups=2, seed=s) for s in (1, 1, 2))
    bound = 1 / np.sqrt(4 * 9)
    for (key, x), y, z in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert 0.9 * bound < np.abs(x).max() <= bound, key
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(x, z)
    assert [p.name for p in a.parameters()] == ["conv2d.weight", "conv2d.bias"]
    assert nn.Conv1d(2, 2, 1, dtype="float32").weight.dtype == np.float32


def test_conv_layers_refuse_bad_arguments_and_inputs():
    with pytest.raises(ValueError, match=r"Conv2d: groups=2 must divide in_channels \(3\)"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="kernel_size must be an int or 2 ints"):
        nn.Conv2d(3, 4, (3, 3, 3))
    with pytest.raises(sg.ShapeError, match=r"Conv2d: expected an input of 4 axes \(N, C, ...\) or 3 \(C, ...\), "
                                            r"got \(None, 3\) \(at test_conv.py:\d+\)"):
        nn.Conv2d(3, 4, 3)(sg.placeholder((None, 3)))
    with pytest.raises(sg.ShapeError, match="conv2d"):                         # channels: the op's own check
        nn.Conv2d(3, 4, 3)(sg.placeholder((None, 2, 5, 5)))


POOL_CASES = [
    ("MaxPool2d", (2,), {}, (2, 3, 6, 5)),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1, "dilation": 1, "ceil_mode": True}, (2, 2, 7, 6)),
    ("MaxPool2d", ((2, 3),), {"stride": (1, 2), "dilation": 2}, (1, 2, 7, 8)),
    ("AvgPool2d", (2,), {}, (2, 3, 6, 5)),
    ("AvgPool2d", (3, 2, 1), {"count_include_pad": False, "ceil_mode": True}, (2, 2, 7, 6)),
    ("AvgPool2d", ((2, 3),), {"divisor_override": 4}, (1, 2, 5, 6)),
]


@pytest.mark.parametrize("kind, args, kwargs, shape", POOL_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in POOL_CASES])
def test_pooling_layers_match_torch_static_and_eager(kind, args, kwargs, shape, rng):
    ours, theirs = twins(kind, *args, **kwargs)
    assert repr(ours) == repr(theirs)
    assert ours.parameters() == []
    check_against_torch(ours, theirs, rng.normal(size=shape), rng)


@pytest.mark.parametrize("args, shape", [((), (2, 3, 4, 5)), ((0, 2), (2, 3, 4, 5)), ((2, -1), (2, 3, 4, 5)),
                                         ((1, 1), (2, 3, 4))], ids=str)
def test_flatten_matches_torch(args, shape, rng):
    ours, theirs = twins("Flatten", *args)
    assert repr(ours) == repr(theirs)
    check_against_torch(ours, theirs, rng.normal(size=shape), rng)


def test_flatten_keeps_one_unknown_size_and_refuses_two():
    assert nn.Flatten()(sg.placeholder((None, 3, 4))).shape == (None, 12)
    assert nn.Flatten(0, 1)(sg.placeholder((None, 3, 4))).shape == (None, 4)
    with pytest.raises(sg.ShapeError, match=r"cannot flatten \(None, 3, None\) to \(None, None\)"):
        nn.Flatten()(sg.placeholder((None, 3, None)))
    x = sg.placeholder((None, 3, None))
    assert nn.Flatten(1, 1)(x) is x
    with pytest.raises(sg.ShapeError, match="start_dim=3, end_dim=-1 do not fit"):
        nn.Flatten(3)(sg.placeholder((None, 3)))


def test_a_collapsed_picture_of_a_cnn_draws_one_box_per_layer():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), sg.relu, nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, padding=1),
                          nn.BatchNorm2d(4), nn.AvgPool2d(2), nn.Flatten(), nn.Dropout(0.5, key=0),
                          nn.Linear(4, 3, seed=0))
    x, y = sg.placeholder((None, 1, 6, 6), name="x"), sg.placeholder((None,), dtype="int64", name="y")
    loss = nn.softmax_cross_entropy(model(x), y)
    fn = sg.compile(loss, updates=[(p, p - 0.1 * g) for p, g in zip(model.parameters(),
                                                                     sg.grad(loss, model.parameters()))])
    boxes = {k for k in dot_nodes(sg.to_dot(fn, collapse=True)) if k.startswith("scope_")}
    assert boxes == {"scope_0_conv2d", "scope_1_relu", "scope_2_maxpool2d", "scope_3_conv2d", "scope_4_batchnorm2d",
                     "scope_5_avgpool2d", "scope_6_flatten", "scope_7_dropout", "scope_8_linear",
                     "scope_softmax_cross_entropy"}       # (the loss: a box of its own)
