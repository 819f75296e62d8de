"""staticgrad.io: saving and loading compiled functions and parameter checkpoints."""
import builtins
import json
import os
import re
import zipfile

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import io as sgio
from staticgrad import nn, optim
from staticgrad.io import LoadError


def _classifier(dtype="float64"):
    x = sg.placeholder((None, 4), dtype=dtype, name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    model = nn.MLP([4, 6, 3], activation="tanh", seed=0, dtype=dtype)
    logits = model(x)
    loss = nn.softmax_cross_entropy(logits, t)
    opt = optim.Adam(model, lr=0.05)
    step = sg.compile([loss, logits], inputs=[x, t], updates=opt.updates(loss))
    predict = sg.compile(logits, inputs=[x])
    return step, predict, model, opt


def _batch(rng, n=8, dtype="float64"):
    return rng.normal(size=(n, 4)).astype(dtype), rng.integers(0, 3, size=n)


def test_loaded_functions_give_identical_outputs_through_training(tmp_path, rng):
    step, predict, _, _ = _classifier()
    X, T = _batch(rng)
    step(X, T)                                          # save mid-training: moments are not zero
    path = sgio.save({"step": step, "predict": predict}, tmp_path / "model.npz")
    loaded = sgio.load(path)
    assert set(loaded) == {"step", "predict"}
    for _ in range(5):
        X, T = _batch(rng)
        ours, theirs = step(X, T), loaded["step"](X, T)
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)
        # the loaded predict reads the parameters the loaded step trains
        np.testing.assert_array_equal(predict(X), loaded["predict"](X))


def test_a_single_function_loads_as_a_function_with_fresh_parameters(tmp_path, rng):
    _, predict, model, _ = _classifier()
    sgio.save(predict, tmp_path / "p.npz")
    loaded = sgio.load(tmp_path / "p.npz")
    assert isinstance(loaded, sg.Function)
    X, _ = _batch(rng)
    out = loaded({"x": X})                             # feeds by name still work
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, predict(X))
    model.layers[0].bias.value = np.ones(6)            # the loaded copy is independent
    assert not np.array_equal(predict(X), loaded(X))


def test_float32_stays_float32(tmp_path, rng):
    step, _, _, _ = _classifier("float32")
    loaded = sgio.load(sgio.save(step, tmp_path / "f32.npz"))
    X, T = _batch(rng, dtype="float32")
    loss, logits = loaded(X, T)
    assert logits.dtype == np.float32
    np.testing.assert_array_equal(logits, step(X, T)[1])


def test_attributes_of_every_kind_round_trip(tmp_path, rng):
    x = sg.placeholder((3, 3, 4), name="x")
    y = x[1:, ::2, np.array([0, 3])] + x[..., 0:1].sum(axis=(1, 2), keepdims=True)[1:]
    w = x[:, None, 0, :].mean(axis=1)
    z = sg.concatenate([sg.transpose(y, (0, 2, 1)), y.reshape(-1, 2, 2)], axis=2)
    out = sg.ops.cast(z > 0.0, "float32") * 2 + sg.max(x[np.array([True, False, True])], axis=-1).mean() + w[1:, None]
    fn = sg.compile(out, inputs=[x])
    loaded = sgio.load(sgio.save(fn, tmp_path / "attrs.npz"))
    X = rng.normal(size=(3, 3, 4))
    np.testing.assert_array_equal(loaded(X), fn(X))


@pytest.mark.parametrize("value", [
    None, True, 3, -2.5, float("inf"), float("nan"), "text", (), (1, None, -1), [1, 2],
    slice(None, 3, 2), Ellipsis, np.dtype("float32"), np.int64(7), np.float32(0.5), np.bool_(True),
    np.array([[1, 2], [3, 4]], dtype=np.int32), np.array([True, False]),
    (slice(1, None), None, Ellipsis, np.array([0, 2])), {"a": (1, 2)},
])
def test_attribute_encoding_is_exact(value):
    text = json.dumps(sgio.encode_attr(value), allow_nan=False)
    back = sgio.decode_attr(json.loads(text))
    assert type(back) is type(value)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and not back.flags.writeable
        np.testing.assert_array_equal(back, value)
    elif isinstance(value, float) and value != value:
        assert back != back
    elif isinstance(value, tuple):
        assert repr(back) == repr(value)
    else:
        assert back == value


def test_an_unstorable_attribute_is_an_error_at_save(tmp_path):
    x = sg.placeholder((2,), name="x")
    fn = sg.compile(sg.reshape(x, (1, 2)), inputs=[x])
    next(n for n in fn.ir.nodes.values() if n.op == "reshape").attrs["shape"] = object()
    with pytest.raises(TypeError, match="cannot store attribute of reshape"):
        sgio.save(fn, tmp_path / "bad.npz")
    assert not list(tmp_path.iterdir())                # no half-written file left behind


# ------------------------------------------------------------------ damaged and hostile files
def _saved(tmp_path):
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter(np.arange(6.0).reshape(2, 3), name="W")
    fn = sg.compile(sg.tanh(x @ W)[:, 1:], inputs=[x])
    return sgio.save(fn, tmp_path / "fn.npz")


def _tamper(path, edit):
    """Rewrite the file with graph.json passed through ``edit(doc)``; other members are copied."""
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    doc = json.loads(members["graph.json"])
    edit(doc)
    members["graph.json"] = json.dumps(doc).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)
    return path


def _node(doc, op):
    return next(n for n in doc["function"]["nodes"] if n["op"] == op)


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="POSIX file modes")
def test_saved_files_get_the_permissions_of_any_new_file(tmp_path):
    mask = os.umask(0o027)
    try:
        path = _saved(tmp_path)
        fresh = tmp_path / "fresh"
        fresh.touch()
    finally:
        os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == os.stat(fresh).st_mode & 0o777 == 0o640


def test_a_truncated_file_is_a_clear_error(tmp_path):
    path = _saved(tmp_path)
    raw = open(path, "rb").read()
    for size in (0, 10, len(raw) // 2, len(raw) - 30):
        open(path, "wb").write(raw[:size])
        with pytest.raises(LoadError, match="corrupt, truncated or not a staticgrad file"):
            sgio.load(path)


def test_flipped_bytes_and_foreign_files_are_clear_errors(tmp_path):
    path = _saved(tmp_path)
    raw = bytearray(open(path, "rb").read())
    raw[60] ^= 0xFF                                    # inside the compressed graph.json: the CRC check fails
    open(path, "wb").write(bytes(raw))
    with pytest.raises(LoadError):
        sgio.load(path)
    other = tmp_path / "plain.npz"
    np.savez(other, a=np.ones(3))
    with pytest.raises(LoadError, match="not a staticgrad file"):
        sgio.load(other)
    with pytest.raises(FileNotFoundError):
        sgio.load(tmp_path / "missing.npz")


def test_an_unknown_op_is_rejected(tmp_path):
    path = _tamper(_saved(tmp_path), lambda doc: _node(doc, "tanh").update(op="os.system"))
    with pytest.raises(LoadError, match="unknown op 'os.system'"):
        sgio.load(path)


@pytest.mark.parametrize("attr", [
    {"t": "pickle", "v": "cos\nsystem\n"},
    {"t": "dtype", "v": "object"},
    {"t": "array", "dtype": "float64", "shape": [1], "v": [1.5]},
    {"t": "slice", "v": [1, "x", None]},
    [1, 2],
])
def test_weird_attributes_are_rejected(tmp_path, attr):
    path = _tamper(_saved(tmp_path), lambda doc: _node(doc, "getitem")["attrs"].update(index=attr))
    with pytest.raises(LoadError):
        sgio.load(path)


def test_code_hidden_in_names_keys_or_sources_never_runs(tmp_path):
    payload = "__import__('builtins').__dict__.__setitem__('SG_TAMPERED', 1)"
    edits = [
        lambda doc: _node(doc, "getitem")["attrs"].update({f"index=0, x={payload}, y": 1}),
        lambda doc: _node(doc, "tanh").update(source="m.py:1\n    " + payload),
        lambda doc: _node(doc, "tanh").update(name="h\r" + payload),
        lambda doc: doc["parameters"][0].update(name="W\n" + payload),
    ]
    for k, edit in enumerate(edits):
        path = _tamper(_saved(tmp_path), edit)
        with pytest.raises(LoadError):
            fn = sgio.load(path)
            fn(np.ones((1, 2)))
        assert not hasattr(builtins, "SG_TAMPERED"), f"edit {k} ran code"


def test_structural_damage_is_rejected(tmp_path):
    def forward_reference(doc):
        nodes = doc["function"]["nodes"]
        nodes[0], nodes[-1] = nodes[-1], nodes[0]

    edits = {
        "inputs must be ids of earlier nodes": forward_reference,
        "bad outputs": lambda doc: doc["function"].update(outputs=[123456]),
        "has no .or a repeated. value": lambda doc: doc["parameters"].append(
            {"key": "p9", "name": "z", "shape": [], "dtype": "float64"}),
        "format version": lambda doc: doc.update(version=99),
        "bad role": lambda doc: _node(doc, "tanh").update(role="sideways"),
    }
    for message, edit in edits.items():
        path = _tamper(_saved(tmp_path), edit)
        with pytest.raises(LoadError, match=message):
            sgio.load(path)


def test_shapes_dtypes_and_attributes_must_agree_with_the_ops(tmp_path):
    edits = {
        "the file says shape .None, 99.": lambda doc: _node(doc, "matmul").update(shape=[None, 99]),
        "the file says shape \\(\\)": lambda doc: _node(doc, "tanh").update(shape=[]),
        "dtype int8": lambda doc: _node(doc, "tanh").update(dtype="int8"),
        "do not fit the op": lambda doc: _node(doc, "getitem")["attrs"].update(
            index={"t": "tuple", "v": [{"t": "slice", "v": [None, None, None]}] * 3}),
    }
    for message, edit in edits.items():
        path = _tamper(_saved(tmp_path), edit)
        with pytest.raises(LoadError, match=message):
            sgio.load(path)


# ------------------------------------------------------------------ checkpoints
def test_checkpoint_restores_model_and_optimizer_state(tmp_path, rng):
    step, _, _, _ = _classifier()
    batches = [_batch(rng) for _ in range(4)]
    step(*batches[0])
    sgio.save_parameters(step, tmp_path / "ckpt.npz")
    first = [step(*b)[0] for b in batches[1:]]
    sgio.load_parameters(step, tmp_path / "ckpt.npz")
    again = [step(*b)[0] for b in batches[1:]]
    assert first == again                               # Adam's moments and step count came back too


def test_checkpoint_into_a_model_a_list_or_a_dict(tmp_path, rng):
    a, b = nn.MLP([3, 4, 2], seed=0), nn.MLP([3, 4, 2], seed=1)
    sgio.save_parameters(a, tmp_path / "a.npz")
    sgio.load_parameters(b, tmp_path / "a.npz")
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.value, q.value)
    named = {"w": sg.parameter(np.ones(2), name="w")}
    sgio.save_parameters(named, tmp_path / "d.npz")
    target = {"w": sg.parameter(np.zeros(2), name="w")}
    sgio.load_parameters(target, tmp_path / "d.npz")
    assert target["w"].value.tolist() == [1.0, 1.0]


def test_a_mismatched_checkpoint_changes_nothing(tmp_path):
    sgio.save_parameters(nn.MLP([3, 4, 2], seed=0, name="a"), tmp_path / "a.npz")
    other = nn.MLP([3, 4, 2], seed=1, name="b")
    before = [p.value.copy() for p in other.parameters()]
    with pytest.raises(LoadError, match="strict=False"):
        sgio.load_parameters(other, tmp_path / "a.npz")
    sgio.load_parameters(other, tmp_path / "a.npz", strict=False)   # same shapes: fine by position
    wider = nn.MLP([3, 5, 2], seed=0, name="a")
    kept = [p.value.copy() for p in wider.parameters()]
    with pytest.raises(LoadError, match="shape"):
        sgio.load_parameters(wider, tmp_path / "a.npz")
    for p, v in zip(wider.parameters(), kept):
        np.testing.assert_array_equal(p.value, v)
    assert not all(np.array_equal(p.value, v) for p, v in zip(other.parameters(), before))
    with pytest.raises(LoadError, match="holds 4 parameters"):
        sgio.load_parameters(nn.MLP([3, 2], seed=0, name="a"), tmp_path / "a.npz")


def test_a_function_file_is_not_a_checkpoint(tmp_path):
    path = _saved(tmp_path)
    with pytest.raises(LoadError, match="not a staticgrad"):
        sgio.load_parameters([sg.parameter(np.ones(2))], path)


def test_a_loaded_function_saves_and_loads_again(tmp_path, rng):
    step, _, _, _ = _classifier()
    once = sgio.load(sgio.save(step, tmp_path / "once.npz"))
    twice = sgio.load(sgio.save(once, tmp_path / "twice.npz"))
    X, T = _batch(rng)
    for a, b in zip(once(X, T), twice(X, T)):
        np.testing.assert_array_equal(a, b)


def test_a_loaded_function_lists_its_parameters(tmp_path):
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter(np.arange(6.0).reshape(2, 3), name="W")
    b = sg.parameter(np.zeros(3), name="b")
    fn = sg.compile(sg.sum(x @ W + b), inputs=[x])
    assert fn.parameters() == [W, b]
    loaded = sgio.load(sgio.save(fn, tmp_path / "fn.npz"))
    names = [p.name for p in loaded.parameters()]
    assert names == ["W", "b"] and all(p is not q for p, q in zip(loaded.parameters(), [W, b]))
    np.testing.assert_array_equal(loaded.parameters()[0].value, W.value)


@pytest.mark.parametrize("name", ["tab\there", "new\nline", "nul\x00", "x" * 5000])
def test_a_name_load_would_refuse_is_refused_at_save(tmp_path, name):
    x = sg.placeholder((2,), name="x")
    W = sg.parameter(np.ones(2), name=name)
    message = "save: the name of parameter node .*" + re.escape(repr(name[:20])[:-1])
    with pytest.raises(ValueError, match=message) as info:
        sgio.save(sg.compile(x * W, inputs=[x]), tmp_path / "f.npz")
    assert not isinstance(info.value, LoadError)
    with pytest.raises(ValueError, match="printable one-line"):
        sgio.save(sg.compile(sg.placeholder((2,), name=name) * 2.0), tmp_path / "f.npz")
    with sg.name_scope(name):
        y = x * 3.0
    with pytest.raises(ValueError, match="the scope of (constant|mul) node"):
        sgio.save(sg.compile(y, inputs=[x]), tmp_path / "f.npz")
    assert not list(tmp_path.iterdir())                # refused before anything was written
    sgio.save_parameters([W], tmp_path / "w.npz")       # a checkpoint's names never reach generated code
    sgio.load_parameters([W], tmp_path / "w.npz")


def test_a_path_that_cannot_be_written_is_named_in_the_error(tmp_path):
    x = sg.placeholder((2,), name="x")
    fn = sg.compile(x * 2.0, inputs=[x])
    for path, error in [(tmp_path / "missing" / "f.npz", FileNotFoundError), (tmp_path, IsADirectoryError)]:
        with pytest.raises(error) as info:
            sgio.save(fn, path)
        assert info.value.filename == str(path) and ".staticgrad-" not in str(info.value)
    with pytest.raises(FileNotFoundError, match="missing"):
        sgio.save_parameters([sg.parameter(np.ones(2))], tmp_path / "missing" / "w.npz")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staticgrad-")]


def test_a_path_without_extension_gets_npz_as_numpy_gives_it(tmp_path):
    x = sg.placeholder((2,), name="x")
    W = sg.parameter(np.array([1.0, 2.0]), name="W")
    fn = sg.compile(x * W, inputs=[x])
    written = sg.save(fn, tmp_path / "model")
    assert written == str(tmp_path / "model.npz") and (tmp_path / "model.npz").exists()
    for path in (tmp_path / "model", tmp_path / "model.npz"):
        np.testing.assert_array_equal(sg.load(path)(np.ones(2)), [1.0, 2.0])
    assert sg.save_parameters([W], tmp_path / "ckpt") == str(tmp_path / "ckpt.npz")
    sg.load_parameters([W], tmp_path / "ckpt")


def test_loading_a_name_without_extension_prefers_the_npz_saving_wrote(tmp_path):
    W = sg.parameter(np.zeros(2), name="W")
    (tmp_path / "ck").write_bytes(b"an older file of that name")
    W.value = np.ones(2)
    sg.save_parameters([W], tmp_path / "ck")          # writes ck.npz
    W.value = np.zeros(2)
    sg.load_parameters([W], tmp_path / "ck")
    np.testing.assert_array_equal(W.value, [1.0, 1.0])


def _first_specs():
    from tests.op_specs import OP_SPECS
    first = {}
    for spec in OP_SPECS:
        first.setdefault(spec.op, spec)
    return list(first.values())


@pytest.mark.parametrize("spec", _first_specs(), ids=lambda s: s.op)
def test_every_registered_op_saves_and_loads(spec, tmp_path):
    # (the registry is all a file needs: an op registered anywhere is saved, checked and rebuilt on load)
    arrays = spec.draw()
    phs = [sg.placeholder(a.shape, dtype=a.dtype, name=f"in{k}") for k, a in enumerate(arrays)]
    fn = sg.compile(spec.build(*phs), inputs=phs, optimize=False)
    loaded = sg.load(sg.save(fn, tmp_path / "op"))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(loaded(*arrays), fn(*arrays))
