"""staticgrad.io on hostile files: what loading reads, the size limits, and graphs that would fail when called.

Each refusal has its own test; a file that loads must run (the last test tampers with every op's node).
"""
import copy
import io
import json
import shutil
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

import staticgrad as sg
from staticgrad import io as sgio
from staticgrad.io import LoadError, LoadLimitError
from tests.test_io import _first_specs, _node, _saved, _tamper


# ------------------------------------------------------------------ helpers: files written by hand
def _members(path):
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _rewrite(path, members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)
    return path


def _with_p0(tmp_path, raw):
    """The file of test_io's _saved with its parameter's member p0.npy replaced by ``raw``."""
    path = _saved(tmp_path)
    return _rewrite(path, dict(_members(path), **{"p0.npy": raw}))


def _npy(array):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def _header(shape, descr="<f8"):
    """A .npy header alone, declaring ``shape``: what follows it is up to the test."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def _append_zeros(path, name, nbytes):
    """Add a member of ``nbytes`` zero bytes (a few hundred KB once deflated), written in pieces."""
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as zf, zf.open(name, "w", force_zip64=True) as fh:
        piece = bytes(1 << 20)
        for _ in range(nbytes >> 20):
            fh.write(piece)


def _declare_size(path, name, size):
    """Make the zip directory (central and local headers) say member ``name`` holds ``size`` bytes."""
    raw = bytearray(open(path, "rb").read())
    encoded = name.encode()
    for signature, size_at, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        start = raw.find(signature)
        while start >= 0:
            if raw[start + name_at:start + name_at + len(encoded)] == encoded:
                raw[start + size_at:start + size_at + 4] = size.to_bytes(4, "little")
            start = raw.find(signature, start + 4)
    open(path, "wb").write(bytes(raw))


@pytest.fixture
def opened(monkeypatch):
    """The names of the zip members opened (decompressed) while the test runs."""
    names, original = [], zipfile.ZipFile.open

    def spy(self, name, *args, **kwargs):
        names.append(name if isinstance(name, str) else name.filename)
        return original(self, name, *args, **kwargs)
    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    return names


def _weights(tmp_path, *sizes):
    """A function of one parameter per size (float64 vectors), saved: p0.npy holds 8 * sizes[0] bytes, ..."""
    x = sg.placeholder((), name="x")
    params = [sg.parameter(np.arange(float(n)), name=f"w{k}") for k, n in enumerate(sizes)]
    fn = sg.compile(sum(sg.sum(p) for p in params) * x, inputs=[x])
    return sgio.save(fn, tmp_path / "weights.npz"), fn


# ------------------------------------------------------------------ only what the graph refers to is read
def test_an_unreferenced_member_is_never_decompressed(tmp_path, opened):
    path = _saved(tmp_path)
    _append_zeros(path, "unused.npy", 200 << 20)           # 200 MB of zeros: about 200 KB in the file
    opened.clear()
    tracemalloc.start()
    start = time.perf_counter()
    fn = sgio.load(path)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "unused.npy" not in opened and "p0.npy" in opened
    assert peak < 20 << 20, f"loading allocated {peak:,} bytes"
    assert elapsed < 5.0                                   # (decompressing it alone takes about a second)
    np.testing.assert_array_equal(fn(np.ones((1, 2))), np.tanh(np.ones((1, 2)) @ np.arange(6.0).reshape(2, 3))[:, 1:])


def test_an_unreferenced_member_of_a_checkpoint_is_never_decompressed(tmp_path, opened):
    W = sg.parameter(np.ones(3), name="W")
    path = sgio.save_parameters([W], tmp_path / "ckpt.npz")
    _append_zeros(path, "unused.npy", 50 << 20)
    opened.clear()
    sgio.load_parameters([W], path)
    assert "unused.npy" not in opened and "a0.npy" in opened


# ------------------------------------------------------------------ limits, checked before decompressing
def test_an_array_over_max_array_bytes_is_refused_before_it_is_read(tmp_path, opened):
    path, _ = _weights(tmp_path, 1000)                     # p0.npy: 8,000 bytes of data
    opened.clear()
    with pytest.raises(LoadLimitError, match=r"member 'p0\.npy' needs 8,\d{3} bytes, over the limit "
                                             r"max_array_bytes=4,000; .*pass a larger max_array_bytes"):
        sgio.load(path, max_array_bytes=4000)
    assert "p0.npy" not in opened                          # the zip directory's size was enough to refuse
    fn = sgio.load(path, max_array_bytes=9000)            # the caller can raise it
    assert fn(2.0) == 2 * sum(range(1000))


def test_arrays_over_max_total_bytes_are_refused(tmp_path):
    path, _ = _weights(tmp_path, 1000, 1000)               # two members of 8,000 bytes of data
    with pytest.raises(LoadLimitError, match=r"'p1\.npy' needs 16,000 bytes with the arrays read before it, "
                                             r"over the limit max_total_bytes=12,000"):
        sgio.load(path, max_total_bytes=12_000)
    assert sgio.load(path, max_total_bytes=16_000)(1.0) == 2 * sum(range(1000))


def test_a_graph_description_over_max_json_bytes_is_refused(tmp_path):
    path = _saved(tmp_path)
    with pytest.raises(LoadLimitError, match=r"member 'graph\.json' needs [\d,]+ bytes, over the limit "
                                             r"max_json_bytes=100"):
        sgio.load(path, max_json_bytes=100)


def test_load_parameters_takes_the_same_limits(tmp_path):
    W = sg.parameter(np.ones(1000), name="W")
    path = sgio.save_parameters([W], tmp_path / "ckpt.npz")
    with pytest.raises(LoadLimitError, match=r"'a0\.npy'.*max_array_bytes=1,000"):
        sgio.load_parameters([W], path, max_array_bytes=1000)
    sgio.load_parameters([W], path, max_array_bytes=10_000)


def test_a_header_declaring_a_huge_array_is_refused_before_allocating(tmp_path):
    path = _with_p0(tmp_path, _header((100_000, 100_000)) + bytes(48))  # says 80 GB, holds 48 bytes
    tracemalloc.start()
    with pytest.raises(LoadLimitError, match=r"'p0\.npy' needs 80,000,000,000 bytes, over the limit "
                                             r"max_array_bytes=1,073,741,824"):
        sgio.load(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10 << 20


def test_a_zip_directory_declaring_a_huge_member_is_refused(tmp_path, opened):
    path = _saved(tmp_path)
    _rewrite(path, _members(path))                         # (sizes in the directory itself, not in zip64 fields)
    _declare_size(path, "p0.npy", 0xFFFF_FFF0)              # about 4 GiB
    opened.clear()
    with pytest.raises(LoadLimitError, match=r"'p0\.npy' needs 4,294,967,280 bytes, over the limit max_array_bytes"):
        sgio.load(path)
    assert "p0.npy" not in opened


def test_a_header_declaring_more_data_than_the_zip_directory_is_refused(tmp_path):
    path = _with_p0(tmp_path, _header((1000, 1000)) + bytes(48))  # 8 MB: under the limits, not in the file
    with pytest.raises(LoadError, match=r"'p0\.npy' declares 8000000 bytes of data in its header, more than"):
        sgio.load(path)


def test_a_member_longer_than_its_header_declares_is_refused(tmp_path):
    path = _with_p0(tmp_path, _npy(np.arange(6.0).reshape(2, 3)) + bytes(8))
    with pytest.raises(LoadError, match=r"'p0\.npy' holds more data than its header declares"):
        sgio.load(path)


def test_a_zip_directory_understating_a_member_stops_at_the_size_it_states(tmp_path):
    stated = _npy(np.arange(6.0).reshape(2, 3))
    path = _with_p0(tmp_path, stated + bytes(100 << 20))   # 100 MB more than the directory will say
    _declare_size(path, "p0.npy", len(stated))
    tracemalloc.start()
    with pytest.raises(LoadError, match="corrupt, truncated"):      # the CRC of what was read is wrong
        sgio.load(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10 << 20, f"loading allocated {peak:,} bytes"


def test_an_object_array_member_is_refused_without_unpickling(tmp_path):
    buffer = io.BytesIO()
    np.save(buffer, np.array([print, None], dtype=object), allow_pickle=True)
    path = _with_p0(tmp_path, buffer.getvalue())
    with pytest.raises(LoadError, match=r"'p0\.npy' is not a numeric array \(dtype object\)"):
        sgio.load(path)


# ------------------------------------------------------------------ every node's shape rule runs on load
def _softmax_file(tmp_path):
    x = sg.placeholder((2, 3), name="x")
    return sgio.save(sg.compile(sg.softmax(x, axis=-1), inputs=[x]), tmp_path / "softmax.npz")


def test_softmax_over_an_axis_the_input_lacks_is_refused(tmp_path):
    edit = lambda doc: _node(doc, "softmax")["attrs"].update(axis={"t": "tuple", "v": [5]})   # noqa: E731
    path = _tamper(_softmax_file(tmp_path), edit)
    with pytest.raises(LoadError, match=r"node \d+ \(softmax\): its inputs and attributes do not fit the op: "
                                        r"ShapeError: axis 5 is out of range for a tensor of rank 2"):
        sgio.load(path)


def test_an_axis_not_in_the_stored_form_is_refused(tmp_path):
    # -1 works for numpy, but the compiler's passes and backends read the sorted non-negative form
    path = _tamper(_softmax_file(tmp_path), lambda doc: _node(doc, "softmax")["attrs"].update(axis=-1))
    with pytest.raises(LoadError, match=r"\(softmax\).*axis -1 is not a sorted tuple of distinct axes"):
        sgio.load(path)


def test_a_matmul_of_mismatched_inner_sizes_is_refused(tmp_path):
    def widen(doc):
        doc["placeholders"][0]["shape"] = [None, 5]
        _node(doc, "placeholder")["shape"] = [None, 5]
    path = _tamper(_saved(tmp_path), widen)
    with pytest.raises(LoadError, match=r"\(matmul\).*shapes \(None, 5\) and \(2, 3\) are not aligned"):
        sgio.load(path)


def test_an_attribute_of_the_wrong_type_is_refused(tmp_path):
    x = sg.placeholder((2, 3), name="x")
    path = sgio.save(sg.compile(sg.sum(x, axis=1), inputs=[x]), tmp_path / "sum.npz")
    path = _tamper(path, lambda doc: _node(doc, "sum")["attrs"].update(keepdims="yes"))
    with pytest.raises(LoadError, match=r"\(sum\).*TypeError: keepdims must be True or False, got 'yes'"):
        sgio.load(path)


def test_an_attribute_the_op_does_not_take_is_refused(tmp_path):
    # np.tanh(x, where=False) would return uninitialized memory
    path = _tamper(_saved(tmp_path), lambda doc: _node(doc, "tanh")["attrs"].update(where=False))
    with pytest.raises(LoadError, match=r"\(tanh\).*TypeError: got an unexpected keyword argument 'where'"):
        sgio.load(path)


def test_an_extra_input_is_refused(tmp_path):
    # np.add(a, b, c) writes the sum into c: here, into the caller's x
    x = sg.placeholder((3,), name="x")
    path = sgio.save(sg.compile(x + x, inputs=[x]), tmp_path / "add.npz")
    path = _tamper(path, lambda doc: _node(doc, "add")["inputs"].append(_node(doc, "add")["inputs"][0]))
    with pytest.raises(LoadError, match=r"\(add\).*TypeError: takes 2 inputs, got 3"):
        sgio.load(path)


# ------------------------------------------------------------------ updates and parameter arrays
def _training_file(tmp_path):
    x = sg.placeholder((4, 3), name="x")
    z = sg.placeholder((3, 2), dtype="complex128", name="z")
    W = sg.parameter(np.ones((3, 2)), name="W")
    y = x @ W
    loss = sg.sum(y * y)
    (g,) = sg.grad(loss, [W])
    fn = sg.compile([loss, y, z * 2], inputs=[x, z], updates={W: W - 0.1 * g}, optimize=False)
    return sgio.save(fn, tmp_path / "train.npz")


def _retarget_update(op, dtype="float64"):
    """Make W's update the first ``op`` node of ``dtype``."""
    def edit(doc):
        function = doc["function"]
        function["updates"][0][1] = next(n["id"] for n in function["nodes"] if n["op"] == op and n["dtype"] == dtype)
    return edit


def test_an_update_of_another_shape_is_refused(tmp_path):
    path = _tamper(_training_file(tmp_path), _retarget_update("matmul"))                # y = x @ W
    with pytest.raises(LoadError, match=r"update of parameter node \d+ \('W'\) by matmul node \d+ has shape "
                                        r"\(4, 2\), expected \(3, 2\)"):
        sgio.load(path)


def test_an_update_of_another_dtype_is_refused(tmp_path):
    sgio.load(_training_file(tmp_path))                     # as saved, it loads
    path = _tamper(_training_file(tmp_path), _retarget_update("mul", "complex128"))     # z * 2, of shape (3, 2)
    with pytest.raises(LoadError, match=r"by mul node \d+ has dtype complex128, which cannot become float64"):
        sgio.load(path)


@pytest.mark.parametrize("stored", [np.ones((2, 3), dtype=np.float32), np.ones((3, 2)), np.ones(6)],
                         ids=["float32", "transposed", "flat"])
def test_a_parameter_array_unlike_its_declared_one_is_refused(tmp_path, stored):
    path = _with_p0(tmp_path, _npy(stored))
    with pytest.raises(LoadError, match=r"parameter 'p0': value does not match its entry"):
        sgio.load(path)


# ------------------------------------------------------------------ every op: refused at load, or it runs
_VALUES = [5, -1, "x", 1.5, None, True, {"t": "tuple", "v": []}, {"t": "tuple", "v": [5]},
           {"t": "tuple", "v": [0, 0]}, {"t": "tuple", "v": [1, 0]}, {"t": "dtype", "v": "int8"},
           {"t": "slice", "v": [None, None, None]}, {"t": "ellipsis"}]


def _edits(node):
    for key in node["attrs"]:
        yield lambda n, key=key: n["attrs"].pop(key)
        for value in _VALUES:
            yield lambda n, key=key, value=value: n["attrs"].__setitem__(key, copy.deepcopy(value))
    yield lambda n: n["attrs"].__setitem__("out", None)
    if node["inputs"]:
        yield lambda n: n["inputs"].pop()
        yield lambda n: n["inputs"].append(n["inputs"][0])
        yield lambda n: n["inputs"].reverse()


@pytest.mark.parametrize("spec", _first_specs(), ids=lambda s: s.op)
def test_a_tampered_node_is_refused_at_load_or_runs(spec, tmp_path):
    arrays = spec.draw()
    phs = [sg.placeholder(a.shape, dtype=a.dtype, name=f"in{k}") for k, a in enumerate(arrays)]
    path = sgio.save(sg.compile(spec.build(*phs), inputs=phs, optimize=False), tmp_path / "op.npz")
    doc = json.loads(_members(path)["graph.json"])
    for k, node in enumerate(doc["function"]["nodes"]):
        if node["op"] == spec.op:
            for edit in _edits(node):
                def tampered(doc, k=k, edit=edit):
                    edit(doc["function"]["nodes"][k])
                copied = shutil.copy(path, tmp_path / "copy.npz")
                try:
                    fn = sgio.load(_tamper(copied, tampered))
                except LoadError:
                    continue
                with np.errstate(all="ignore"):
                    fn(*[a.copy() for a in arrays])         # any exception here fails the test
