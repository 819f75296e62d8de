"""staticgrad.nn.sequence: Embedding, RNN, LSTM and GRU against torch.nn, finite differences and themselves."""
import numpy as np
import pytest

import staticgrad as sg
from staticgrad import eager, nn
from staticgrad.testing import check_grads

TOL = 1e-10
D, H = 4, 5


def _parts(state):
    return list(state) if isinstance(state, tuple) else [state]


def _loss(output, state, xp):
    """A scalar that reads every output and final state, not symmetrically (so gradients are all distinct)."""
    total = xp.sum(output * output)
    for k, s in enumerate(_parts(state)):
        total = total + xp.sum(s * s * s) * (k + 1)
    return total


class _Torch:
    sum = staticmethod(lambda x: x.sum())


def torch_run(layer, x, state=None):
    """torch's output, final state parts, loss gradient wrt x, state and every parameter (by name)."""
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x, requires_grad=True)
    st = None if state is None else tuple(torch.tensor(s, requires_grad=True) for s in _parts(state))
    output, final = layer(xt, None if st is None else (st if len(st) > 1 else st[0]))
    _loss(output, final, _Torch).backward()
    grads = {name: p.grad.numpy() for name, p in layer.named_parameters()}
    return {"output": output.detach().numpy(), "final": [f.detach().numpy() for f in _parts(final)],
            "dx": xt.grad.numpy(), "dstate": None if st is None else [s.grad.numpy() for s in st], "grads": grads}


def static_run(layer, x, state=None, fn_cache=None):
    """The same through one compiled function (x of unknown length and batch)."""
    xs = sg.placeholder((None,) * (x.ndim - 1) + (x.shape[-1],), name="x", requires_grad=True)
    holders = None if state is None else [sg.placeholder(np.shape(s), name=f"s{k}", requires_grad=True)
                                          for k, s in enumerate(_parts(state))]
    output, final = layer(xs, None if holders is None else (tuple(holders) if len(holders) > 1 else holders[0]))
    loss = _loss(output, final, sg)
    params = layer.parameters()
    wrt = [xs] + (holders or []) + params
    fn = sg.compile([output] + _parts(final) + sg.grad(loss, wrt), inputs=[xs] + (holders or []))
    values = fn(x, *([] if state is None else _parts(state)))
    n = len(_parts(final))
    got = values[1 + n:]
    return {"output": values[0], "final": values[1:1 + n], "dx": got[0],
            "dstate": None if state is None else got[1:1 + n],
            "grads": {p.name.split(".")[-1]: g for p, g in zip(params, got[1 + (0 if state is None else n):])}}


def eager_run(layer, x, state=None):
    twin = layer.to_eager()
    xe = eager.tensor(x, requires_grad=True)
    st = None if state is None else [eager.tensor(s, requires_grad=True) for s in _parts(state)]
    output, final = twin(xe, None if st is None else (tuple(st) if len(st) > 1 else st[0]))
    _loss(output, final, sg).backward()
    return {"output": output.value, "final": [f.value for f in _parts(final)], "dx": xe.grad,
            "dstate": None if st is None else [s.grad for s in st],
            "grads": {p.name.split(".")[-1]: p.grad for p in twin.parameters()}}


def assert_same(got, want):
    np.testing.assert_allclose(got["output"], want["output"], rtol=TOL, atol=TOL)
    for a, b in zip(got["final"], want["final"], strict=True):
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(got["dx"], want["dx"], rtol=TOL, atol=TOL)
    if want["dstate"] is not None:
        for a, b in zip(got["dstate"], want["dstate"], strict=True):
            np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)
    assert set(got["grads"]) == set(want["grads"])
    for name, g in want["grads"].items():
        np.testing.assert_allclose(got["grads"][name], g, rtol=TOL, atol=TOL, err_msg=name)


def twins(kind, **kwargs):
    """A staticgrad layer and a torch layer (float64) with the torch layer's weights copied over."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs = getattr(torch.nn, kind)(D, H, **kwargs).double()
    ours = getattr(nn, kind)(D, H, **kwargs)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


CASES = [
    ("RNN", {}), ("RNN", {"nonlinearity": "relu", "num_layers": 2}), ("RNN", {"bias": False, "batch_first": True}),
    ("LSTM", {}), ("LSTM", {"num_layers": 2, "bidirectional": True}), ("LSTM", {"bias": False, "batch_first": True}),
    ("GRU", {}), ("GRU", {"num_layers": 2, "bidirectional": True}), ("GRU", {"bias": False, "batch_first": True}),
]


@pytest.mark.parametrize("kind, kwargs", CASES, ids=[f"{k}-{'-'.join(map(str, kw.items())) or 'default'}"
                                                    for k, kw in CASES])
def test_matches_torch_static_and_eager(kind, kwargs, rng):
    ours, theirs = twins(kind, **kwargs)
    x = rng.normal(size=(3, 6, D) if kwargs.get("batch_first") else (6, 3, D))
    want = torch_run(theirs, x)
    assert_same(static_run(ours, x), want)
    assert_same(eager_run(ours, x), want)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_an_initial_state_and_its_gradient_match_torch(kind, rng):
    ours, theirs = twins(kind, num_layers=2)
    x = rng.normal(size=(4, 2, D))
    state = tuple(rng.normal(size=(2, 2, H)) for _ in range(2 if kind == "LSTM" else 1))
    state = state if kind == "LSTM" else state[0]
    want = torch_run(theirs, x, state)
    assert_same(static_run(ours, x, state), want)
    assert_same(eager_run(ours, x, state), want)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_an_unbatched_sequence_matches_torch(kind, rng):
    ours, theirs = twins(kind)
    x = rng.normal(size=(5, D))
    want = torch_run(theirs, x)
    assert want["output"].shape == (5, H) and want["final"][0].shape == (1, H)
    assert_same(static_run(ours, x), want)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_one_compiled_function_runs_sequences_of_any_length(kind, rng):
    ours, theirs = twins(kind)
    x = sg.placeholder((None, 2, D), name="x")
    output, final = ours(x)
    assert output.shape == (None, 2, H)
    fn = sg.compile([output] + _parts(final), inputs=[x])
    for T in (3, 7):
        xv = rng.normal(size=(T, 2, D))
        got = fn(xv)
        want = torch_run(theirs, xv)
        assert got[0].shape == (T, 2, H)
        np.testing.assert_allclose(got[0], want["output"], rtol=TOL, atol=TOL)
        for a, b in zip(got[1:], want["final"], strict=True):
            np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_gradients_match_finite_differences(kind, rng):
    layer = getattr(nn, kind)(2, 2, seed=0)
    names = list(layer.state_dict())

    def f(x, *weights):
        for name, w in zip(names, weights):
            setattr(layer, name, w)           # the layer reads its weights when called: feed them as inputs
        output, final = layer(x)
        return sg.sum(output * output) + sg.sum(_parts(final)[-1])

    values = [rng.normal(size=(3, 2, 2))] + [v for v in layer.state_dict().values()]
    assert check_grads(f, values)


def test_parameters_are_named_shaped_and_ordered_as_torch():
    torch = pytest.importorskip("torch")
    for kind, kwargs in CASES:
        ours, theirs = getattr(nn, kind)(D, H, **kwargs), getattr(torch.nn, kind)(D, H, **kwargs)
        mine = ours.state_dict()
        assert list(mine) == list(theirs.state_dict())
        assert [v.shape for v in mine.values()] == [tuple(v.shape) for v in theirs.state_dict().values()]
        assert [p.name.split(".", 1)[1] for p in ours.parameters()] == list(mine)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_initialization_is_uniform_within_one_over_root_hidden_and_seeded(kind):
    a, b, c = (getattr(nn, kind)(30, 100, seed=s) for s in (1, 1, 2))
    bound = 1 / np.sqrt(100)
    for (name, x), y, z in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert bound * 0.95 < np.abs(x).max() <= bound, name
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(x, z)
    assert nn.GRU(2, 3, dtype="float32").weight_hh_l0.dtype == np.float32


def test_embedding_matches_torch_for_integer_ids_static_and_eager(rng):
    torch = pytest.importorskip("torch")
    theirs = torch.nn.Embedding(7, 3).double()
    ours = nn.Embedding(7, 3)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    ids_value = np.array([[0, 6, 2], [2, 2, 5]])              # repeats: their gradients add up
    weights = rng.normal(size=(2, 3, 3))
    out_t = theirs(torch.tensor(ids_value))
    (out_t * torch.tensor(weights)).sum().backward()
    ids = sg.placeholder((None, None), dtype="int64", name="ids")
    out = ours(ids)
    assert out.shape == (None, None, 3)
    got = sg.compile([out, sg.grad(sg.sum(out * weights), [ours.weight])[0]], inputs=[ids])(ids_value)
    twin = ours.to_eager()
    out_e = twin(eager.tensor(ids_value))
    sg.sum(out_e * weights).backward()
    for value, grad in (got, (out_e.value, twin.weight.grad)):
        np.testing.assert_array_equal(value, out_t.detach().numpy())       # rows picked exactly
        np.testing.assert_allclose(grad, theirs.weight.grad.numpy(), rtol=TOL, atol=TOL)


def test_embedding_initializes_standard_normal():
    w = nn.Embedding(300, 200, seed=0).weight.value
    assert abs(w.mean()) < 0.01 and w.std() == pytest.approx(1.0, rel=0.01)


def test_wrong_inputs_say_what_was_expected():
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(sg.ShapeError, match=r"expected input of shape \(T, B, input_size\).*input_size 3.*\(5, 2, 6\)"):
        lstm(sg.placeholder((5, 2, 6)))
    with pytest.raises(sg.ShapeError, match=r"initial state of shape \(2, 2, 4\), got \(1, 2, 4\)"):
        lstm(sg.placeholder((5, 2, 3)), (sg.placeholder((1, 2, 4)), sg.placeholder((2, 2, 4))))
    with pytest.raises(TypeError, match="LSTM: input of dtype float32 into a layer of dtype float64"):
        lstm(sg.placeholder((5, 2, 3), dtype="float32"))
    with pytest.raises(TypeError, match="ids must be integers"):
        nn.Embedding(5, 2)(sg.placeholder((3,)))
    ids = sg.placeholder((None,), dtype="int64")
    with pytest.raises(sg.ExecutionError, match=r"must lie in \[0, 5\), got values in \[1, 5\]"):
        sg.compile(nn.Embedding(5, 2)(ids), inputs=[ids])(np.array([1, 5]))
    with pytest.raises(KeyError, match=r"missing \['bias_hh_l0'\], unexpected \['bias'\]"):
        nn.RNN(2, 2).load_state_dict({"weight_ih_l0": np.zeros((2, 2)), "weight_hh_l0": np.zeros((2, 2)),
                                      "bias_ih_l0": np.zeros(2), "bias": np.zeros(2)})
    with pytest.raises(ValueError, match="nonlinearity must be 'tanh' or 'relu'"):
        nn.RNN(2, 2, nonlinearity="sigmoid")
    with pytest.raises(sg.ShapeError, match="weight_hh_l0"):
        nn.GRU(2, 2).load_state_dict({**nn.GRU(2, 2).state_dict(), "weight_hh_l0": np.zeros((2, 2))})


def test_repr_names_what_differs_from_the_defaults():
    assert repr(nn.LSTM(3, 4)) == "LSTM(3, 4)"
    assert repr(nn.GRU(3, 4, num_layers=2, batch_first=True)) == "GRU(3, 4, num_layers=2, batch_first=True)"
    assert repr(nn.Embedding(10, 3)) == "Embedding(10, 3)"


def test_each_layer_builds_in_its_name_scope():
    ids = sg.placeholder((None,), dtype="int64")
    assert nn.Embedding(5, 3, seed=0, name="words")(ids).scope == "words"
    out, h = nn.GRU(3, 4, seed=0)(sg.placeholder((None, None, 3)))
    assert out.scope == "gru" and h.scope == "gru"
