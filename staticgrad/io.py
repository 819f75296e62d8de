"""Saving and loading compiled functions and parameter checkpoints, as JSON plus .npy arrays in a zip.

A saved function is one ``.npz`` file (any name): the member ``graph.json`` describes the optimized
graph (``unzip -p model.npz graph.json`` shows it), the other members are the parameter and constant
arrays, read back with ``np.load(..., allow_pickle=False)``. Nothing is ever pickled.

Loading treats the file as untrusted: every op must be a registered op, every attribute must decode
to a plain value (numbers, strings, tuples, slices, numeric dtypes, small integer arrays), attribute
keys must be identifiers and texts must be printable on one line, because the loaded graph is turned
into generated Python source. Anything else raises :class:`LoadError` before any code is generated.
Saving refuses the same texts (a ValueError naming the text) before it writes anything.
"""
from __future__ import annotations

import json
import keyword
import math
import os
import tempfile
import zipfile

import numpy as np

from .compiler import link
from .function import Function
from .graph import Graph, Node
from .ops.registry import REGISTRY
from .tensor import LEAVES, ROLES, VARIABLES, StaticgradError, Tensor, parameter, placeholder

FORMAT = "staticgrad.function"
CHECKPOINT_FORMAT = "staticgrad.parameters"
VERSION = 1
GRAPH_MEMBER = "graph.json"
CHECKPOINT_MEMBER = "parameters.json"
MAX_TEXT = 4096


class LoadError(StaticgradError):
    """A file could not be loaded: unreadable, truncated, of another format, or describing a graph that
    staticgrad refuses to build (an unknown op, an attribute of a type it does not allow)."""


# ------------------------------------------------------------------ attribute values <-> JSON
def encode_attr(value, where="attribute"):
    """A JSON value for an attribute. Lists and containers are tagged so decoding restores their types."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"t": "float", "v": repr(value)}
    if isinstance(value, np.generic) and np.dtype(type(value)).kind in "biuf":
        return {"t": "scalar", "dtype": np.dtype(type(value)).str, "v": encode_attr(value.item(), where)}
    if isinstance(value, tuple):
        return {"t": "tuple", "v": [encode_attr(v, where) for v in value]}
    if isinstance(value, list):
        return {"t": "list", "v": [encode_attr(v, where) for v in value]}
    if isinstance(value, slice):
        return {"t": "slice", "v": [encode_attr(v, where) for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"t": "ellipsis"}
    if isinstance(value, np.dtype):
        return {"t": "dtype", "v": _dtype_name(value, where)}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biu":
        return {"t": "array", "dtype": _dtype_name(value.dtype, where), "shape": list(value.shape),
                "v": value.ravel().tolist()}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"t": "dict", "v": {k: encode_attr(v, where) for k, v in value.items()}}
    raise TypeError(f"save: cannot store {where} of type {type(value).__name__} ({value!r:.80})")


def _dtype_name(dtype, where="dtype"):
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        raise TypeError(f"save: {where} has dtype {dtype}, which staticgrad does not store")
    return dtype.name


def decode_dtype(text):
    if not isinstance(text, str) or len(text) > 32:
        raise LoadError(f"a dtype must be a short string, got {text!r:.80}")
    try:
        dtype = np.dtype(text)
    except TypeError:
        raise LoadError(f"unknown dtype {text!r}") from None
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        raise LoadError(f"dtype {text!r} is not a numeric dtype")
    return dtype


def decode_attr(value, depth=0):
    """The attribute value for a JSON value; only the types :func:`encode_attr` writes are accepted."""
    if depth > 32:
        raise LoadError("attribute nested too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LoadError("a bare non-finite number in an attribute")
        return value
    if not isinstance(value, dict) or not isinstance(value.get("t"), str):
        raise LoadError(f"attribute value {value!r:.80} is not of an allowed type")
    tag, items = value["t"], value.get("v")
    if tag == "float":
        if items not in ("nan", "inf", "-inf"):
            raise LoadError(f"bad float attribute {items!r:.80}")
        return float(items)
    if tag == "scalar":
        dtype = decode_dtype(value.get("dtype"))
        inner = decode_attr(items, depth + 1)
        if dtype.kind == "c" or not isinstance(inner, (bool, int, float)):
            raise LoadError(f"bad scalar attribute {value!r:.80}")
        return dtype.type(inner)
    if tag in ("tuple", "list", "slice"):
        if not isinstance(items, list):
            raise LoadError(f"a {tag} attribute must hold a list, got {items!r:.80}")
        decoded = [decode_attr(v, depth + 1) for v in items]
        if tag == "tuple":
            return tuple(decoded)
        if tag == "list":
            return decoded
        if len(decoded) != 3 or not all(v is None or type(v) is int for v in decoded):
            raise LoadError(f"bad slice attribute {items!r:.80}")
        return slice(*decoded)
    if tag == "ellipsis":
        return Ellipsis
    if tag == "dtype":
        return decode_dtype(items)
    if tag == "array":
        dtype, shape = decode_dtype(value.get("dtype")), value.get("shape")
        if dtype.kind not in "biu" or not _is_shape(shape, allow_none=False) or not isinstance(items, list):
            raise LoadError(f"bad array attribute {value!r:.80}")
        if not all(type(v) in (int, bool) for v in items) or len(items) != int(np.prod(shape, dtype=np.int64)):
            raise LoadError("an array attribute's entries do not match its shape and dtype")
        try:
            arr = np.array(items, dtype=dtype).reshape(shape)
        except (OverflowError, ValueError) as err:
            raise LoadError(f"bad array attribute: {err}") from None
        arr.setflags(write=False)
        return arr
    if tag == "dict":
        if not isinstance(items, dict):
            raise LoadError("a dict attribute must hold an object")
        return {k: decode_attr(v, depth + 1) for k, v in items.items()}
    raise LoadError(f"unknown attribute tag {tag!r:.40}")


def _is_shape(shape, allow_none=True):
    return isinstance(shape, list) and len(shape) <= 64 and all(
        (allow_none and d is None) or (type(d) is int and d >= 0) for d in shape)


# ------------------------------------------------------------------ writing
def _write_zip(path, text_member, doc, arrays):
    """Write ``doc`` as JSON and ``arrays`` as .npy members, atomically (a temp file, then a rename).

    A path without an extension gets ``.npz`` (numpy.savez adds it to any name not ending in .npz; a name
    with an extension of its own is kept here); the path written is returned.
    """
    path = os.fspath(path)
    if not os.path.splitext(path)[1] and not os.path.isdir(path):
        path += ".npz"
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".staticgrad-", suffix=".tmp", dir=folder)
    except OSError as err:
        raise _naming(err, path) from None
    try:
        if hasattr(os, "fchmod"):
            # mkstemp's file is private (0600); the saved file gets what any new file gets here.
            mask = os.umask(0)
            os.umask(mask)
            os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(text_member, _dumps(doc) + "\n")
            for key, arr in arrays.items():
                with zf.open(key + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asarray(arr, order="C"), allow_pickle=False)
        os.replace(tmp, path)
    except BaseException as err:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(err, OSError):
            raise _naming(err, path) from None
        raise
    return path


def _naming(err, path):
    # The temporary file is an implementation detail: the error names the path the user gave.
    if err.errno is None:
        return err
    return type(err)(err.errno, err.strerror, path)


def _dumps(value, indent=""):
    """JSON with one line per node or table entry: readable with ``unzip -p``, yet compact."""
    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {_dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}" if items else "{}"
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        items = [inner + json.dumps(v, allow_nan=False) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    return json.dumps(value, allow_nan=False)


def _one_line(value) -> bool:
    # Loading writes these texts into comments of generated source: a newline there could smuggle in
    # code, so saving and loading accept the same printable one-line strings of bounded length.
    return isinstance(value, str) and len(value) <= MAX_TEXT and value.isprintable()


def _text(value, what, one_line=True):
    if value is not None and not isinstance(value, str):
        raise TypeError(f"save: {what} must be a string, got {value!r:.80}")
    if value is not None and one_line and not _one_line(value):
        raise ValueError(f"save: {what} {value[:80]!r}{'...' if len(value) > 80 else ''} ({len(value)} characters) "
                         f"cannot be stored: names, scopes and sources must be printable one-line strings of at "
                         f"most {MAX_TEXT} characters (no tab, newline or control character), because loading "
                         f"writes them into the generated code; rename it")
    return value


class _Tables:
    """The parameters and placeholders of the functions being saved, each given one key, so functions
    saved together that share a parameter share it again once loaded."""

    def __init__(self):
        self.params, self.placeholders, self.arrays = {}, {}, {}
        self.param_docs, self.placeholder_docs = [], []

    def param(self, tensor):
        if tensor.id not in self.params:
            key = f"p{len(self.params)}"
            self.params[tensor.id] = key
            self.arrays[key] = tensor.value
            self.param_docs.append({"key": key, "name": _text(tensor.name, "a parameter name"),
                                    "shape": list(tensor.shape), "dtype": _dtype_name(tensor.dtype)})
        return self.params[tensor.id]

    def placeholder(self, tensor):
        if tensor.id not in self.placeholders:
            key = f"x{len(self.placeholders)}"
            self.placeholders[tensor.id] = key
            self.placeholder_docs.append({"key": key, "name": _text(tensor.name, "a placeholder name"),
                                          "shape": list(tensor.shape), "dtype": _dtype_name(tensor.dtype),
                                          "requires_grad": bool(tensor.requires_grad)})
        return self.placeholders[tensor.id]


def _encode_function(fn, label, tables):
    graph = fn.ir
    nodes = []
    for node in graph.nodes.values():
        where = f"attribute of {node.op} node {node.id}"
        entry = {"id": node.id, "op": node.op, "inputs": list(node.inputs),
                 "attrs": {k: encode_attr(v, f"{where} {k!r}") for k, v in node.attrs.items()},
                 "shape": list(node.shape), "dtype": _dtype_name(node.dtype, where),
                 "name": _text(node.name, f"the name of {node.op} node {node.id}"), "role": node.role,
                 "source": _text(node.source, f"the source of {node.op} node {node.id}"),
                 "scope": _text(node.scope, f"the scope of {node.op} node {node.id}"),
                 "adjoint_of": node.adjoint_of, "rule": node.rule,
                 "requires_grad": bool(node.requires_grad)}
        if node.op == "parameter":
            entry["ref"] = tables.param(node.tensor)
        elif node.op == "placeholder":
            entry["ref"] = tables.placeholder(node.tensor)
        elif node.op == "constant":
            key = f"c{label}_{len(tables.arrays)}"
            tables.arrays[key] = np.asarray(node.value)
            entry["value"] = key
        nodes.append(entry)
    return {"single": fn.single, "inputs": list(graph.inputs), "positional": fn.positional,
            "outputs": list(graph.outputs), "updates": [[p, e] for p, e in graph.updates], "nodes": nodes}


def save(fn: Function | dict[str, Function], path: str | os.PathLike) -> str:
    """Write the compiled function ``fn`` (or a dict {name: function}) and its parameter values to ``path``.

    Functions saved together in a dict keep sharing their parameters when loaded.
    """
    single = isinstance(fn, Function)
    functions = {"": fn} if single else fn
    if not isinstance(functions, dict) or not functions:
        raise TypeError(f"save: expected a compiled Function or a dict of them, got {type(fn).__name__}")
    tables, docs = _Tables(), {}
    for k, (name, f) in enumerate(functions.items()):
        if not isinstance(name, str) or not isinstance(f, Function):
            raise TypeError(f"save: expected {{name: Function}}, got {name!r}: {type(f).__name__}")
        docs[name] = _encode_function(f, k, tables)
    doc = {"format": FORMAT, "version": VERSION, "parameters": tables.param_docs,
           "placeholders": tables.placeholder_docs}
    if single:
        doc["function"] = docs[""]
    else:
        doc["functions"] = docs
    return _write_zip(path, GRAPH_MEMBER, doc, tables.arrays)


# ------------------------------------------------------------------ reading
def _read_zip(path, text_member, expected_format):
    path = os.fspath(path)
    if not os.path.splitext(path)[1] and os.path.isfile(path + ".npz"):
        path += ".npz"          # saved under a name without extension, which saving completed
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path!r}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not isinstance(archive, np.lib.npyio.NpzFile) or text_member not in archive.files:
                raise LoadError(f"{path!r} is not a staticgrad file (no {text_member} inside)")
            raw = archive[text_member]
            if not isinstance(raw, bytes):
                raise LoadError(f"{path!r}: {text_member} is not text")
            doc = json.loads(raw.decode("utf-8"))
            arrays = {k: archive[k] for k in archive.files if k != text_member}
    except LoadError:
        raise
    except Exception as err:        # zipfile, numpy and json raise many kinds: all mean "unreadable"
        raise LoadError(f"cannot read {path!r}: the file is corrupt, truncated or not a staticgrad file "
                        f"({type(err).__name__}: {err})") from err
    if not isinstance(doc, dict) or doc.get("format") != expected_format:
        raise LoadError(f"{path!r} is not a {expected_format} file")
    if doc.get("version") != VERSION:
        raise LoadError(f"{path!r} has format version {doc.get('version')!r}; this staticgrad reads {VERSION}")
    for key, arr in arrays.items():
        if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biufc" or arr.dtype.fields is not None:
            raise LoadError(f"{path!r}: member {key!r} is not a numeric array")
    return doc, arrays


def _check_text(value, what, optional=True):
    if value is None and optional:
        return None
    if not _one_line(value):
        raise LoadError(f"{what} must be a printable one-line string, got {value!r:.80}")
    return value


def _expect(cond, message):
    if not cond:
        raise LoadError(message)


def _leaf_tensors(doc, arrays):
    params, holders = {}, {}
    _expect(isinstance(doc.get("parameters"), list) and isinstance(doc.get("placeholders"), list),
            "the file lists no parameters/placeholders tables")
    for entry in doc["parameters"]:
        _expect(isinstance(entry, dict) and isinstance(entry.get("key"), str), f"bad parameter entry {entry!r:.80}")
        key = entry["key"]
        _expect(key in arrays and key not in params, f"parameter {key!r} has no (or a repeated) value")
        value, dtype = arrays[key], decode_dtype(entry.get("dtype"))
        _expect(dtype.kind in "fc" and value.dtype == dtype and _is_shape(entry.get("shape"), False)
                and value.shape == tuple(entry["shape"]), f"parameter {key!r}: value does not match its entry")
        params[key] = parameter(value, name=_check_text(entry.get("name"), "a parameter name"))
    for entry in doc["placeholders"]:
        _expect(isinstance(entry, dict) and isinstance(entry.get("key"), str), f"bad placeholder entry {entry!r:.80}")
        key = entry["key"]
        _expect(key not in holders and _is_shape(entry.get("shape")) and isinstance(entry.get("requires_grad"), bool),
                f"bad placeholder entry {entry!r:.80}")
        dtype = decode_dtype(entry.get("dtype"))
        holders[key] = placeholder(entry["shape"], dtype, _check_text(entry.get("name"), "a placeholder name"),
                                   requires_grad=entry["requires_grad"] and dtype.kind in "fc")
    return params, holders


def _decode_node(entry, nodes, arrays, params, holders):
    _expect(isinstance(entry, dict), f"a node must be an object, got {entry!r:.80}")
    nid, op = entry.get("id"), entry.get("op")
    _expect(type(nid) is int and nid >= 0 and nid not in nodes, f"bad or repeated node id {nid!r:.40}")
    _expect(isinstance(op, str) and (op in LEAVES or op in REGISTRY), f"node {nid}: unknown op {op!r:.80}")
    inputs, attrs = entry.get("inputs"), entry.get("attrs")
    _expect(isinstance(inputs, list) and all(type(i) is int and i in nodes for i in inputs),
            f"node {nid} ({op}): inputs must be ids of earlier nodes")
    _expect(isinstance(attrs, dict), f"node {nid} ({op}): attrs must be an object")
    for key in attrs:
        # Keys become keyword arguments in generated source.
        _expect(isinstance(key, str) and key.isidentifier() and not keyword.iskeyword(key),
                f"node {nid} ({op}): attribute name {key!r:.80} is not an identifier")
    attrs = {k: decode_attr(v) for k, v in attrs.items()}
    _expect(_is_shape(entry.get("shape")), f"node {nid} ({op}): bad shape {entry.get('shape')!r:.80}")
    _expect(entry.get("role") in ROLES, f"node {nid} ({op}): bad role {entry.get('role')!r:.40}")
    adjoint_of = entry.get("adjoint_of")
    _expect(adjoint_of is None or type(adjoint_of) is int, f"node {nid}: bad adjoint_of")
    _expect(isinstance(entry.get("requires_grad"), bool), f"node {nid}: bad requires_grad")
    node = Node(op, inputs, attrs, tuple(entry["shape"]), decode_dtype(entry.get("dtype")),
                _check_text(entry.get("name"), f"node {nid}'s name"), entry["role"], None,
                _check_text(entry.get("source"), f"node {nid}'s source", optional=False),
                _check_text(entry.get("scope"), f"node {nid}'s scope", optional=False), adjoint_of,
                _check_text(entry.get("rule"), f"node {nid}'s rule"), entry["requires_grad"], id=nid)
    if op in LEAVES:
        _expect(not inputs and not attrs, f"node {nid} ({op}): a leaf has no inputs or attributes")
    else:
        # The op's own shape rule must agree with what the file says: an edited shape, dtype or attribute
        # is refused here, not found out (or not) when the function runs.
        try:
            shape, dtype = REGISTRY[op].infer([nodes[i] for i in inputs], **attrs)
        except (ValueError, TypeError, IndexError, KeyError) as err:
            raise LoadError(f"node {nid} ({op}): its inputs and attributes do not fit the op: {err}") from None
        _expect(tuple(shape) == node.shape and np.dtype(dtype) == node.dtype,
                f"node {nid} ({op}): the file says shape {node.shape} and dtype {node.dtype}, its inputs give "
                f"{tuple(shape)} and {np.dtype(dtype)}")
    if op == "constant":
        key = entry.get("value")
        _expect(isinstance(key, str) and key in arrays, f"constant node {nid}: no value in the file")
        value = np.array(arrays[key], copy=True)
        _expect(value.shape == node.shape and value.dtype == node.dtype,
                f"constant node {nid}: its value does not match its shape/dtype")
        value.setflags(write=False)
        node.value = value
    elif op in VARIABLES:
        table = params if op == "parameter" else holders
        tensor = table.get(entry.get("ref"))
        _expect(tensor is not None, f"{op} node {nid}: unknown reference {entry.get('ref')!r:.40}")
        _expect(tensor.shape == node.shape and tensor.dtype == node.dtype,
                f"{op} node {nid}: shape/dtype differ from its table entry")
        tensor.source, tensor.scope = node.source, node.scope
        node.tensor = tensor
    return node


def _decode_function(doc, arrays, params, holders) -> Function:
    _expect(isinstance(doc, dict) and isinstance(doc.get("nodes"), list), "a function without a node list")
    nodes = {}
    for entry in doc["nodes"]:
        node = _decode_node(entry, nodes, arrays, params, holders)
        nodes[node.id] = node
    outputs, updates, inputs, single = (doc.get(k) for k in ("outputs", "updates", "inputs", "single"))
    positional = doc.get("positional", True)     # files written before the flag existed fed positionally
    _expect(isinstance(positional, bool), "bad 'positional' flag")
    _expect(isinstance(outputs, list) and all(type(i) is int and i in nodes for i in outputs), "bad outputs")
    _expect(isinstance(single, bool) and (not single or len(outputs) == 1), "bad 'single' flag")
    _expect(isinstance(inputs, list) and len(set(map(str, inputs))) == len(inputs) and
            all(type(i) is int and i in nodes and nodes[i].op == "placeholder" for i in inputs), "bad inputs")
    _expect(isinstance(updates, list), "bad updates")
    seen = set()
    for pair in updates:
        _expect(isinstance(pair, list) and len(pair) == 2 and all(type(i) is int and i in nodes for i in pair)
                and nodes[pair[0]].op == "parameter" and pair[0] not in seen, f"bad update {pair!r:.80}")
        seen.add(pair[0])
    fed = set(inputs)
    missing = [n.label() for n in nodes.values() if n.op == "placeholder" and n.id not in fed]
    _expect(not missing, f"placeholders {missing} are used but not inputs")
    graph = Graph(nodes, outputs, [tuple(p) for p in updates], inputs)
    try:
        return link(graph, single, rows=(), positional=positional)
    except (SyntaxError, KeyError, TypeError, ValueError) as err:
        raise LoadError(f"the loaded graph could not be linked: {type(err).__name__}: {err}") from err


def load(path: str | os.PathLike) -> Function | dict[str, Function]:
    """The compiled function saved at ``path`` (a dict of them if a dict was saved), with fresh
    placeholders and parameters holding the saved values."""
    doc, arrays = _read_zip(path, GRAPH_MEMBER, FORMAT)
    try:
        params, holders = _leaf_tensors(doc, arrays)
        if "function" in doc:
            return _decode_function(doc["function"], arrays, params, holders)
        functions = doc.get("functions")
        _expect(isinstance(functions, dict), "the file holds no function")
        return {str(name): _decode_function(f, arrays, params, holders) for name, f in functions.items()}
    except LoadError as err:
        raise LoadError(f"cannot load {os.fspath(path)!r}: {err}") from None


# ------------------------------------------------------------------ parameter checkpoints
def _parameter_list(target):
    """[(key, parameter tensor)] for a Function, a dict, something with .parameters(), or a list."""
    if isinstance(target, dict):
        return [(str(k), v) for k, v in target.items()]
    elif hasattr(target, "parameters") and callable(target.parameters):
        items = list(target.parameters())
    elif isinstance(target, Tensor):
        items = [target]
    else:
        items = list(target)
    return [(str(k), p) for k, p in enumerate(items)]


def save_parameters(target, path: str | os.PathLike) -> str:
    """Write the current values of ``target``'s parameters (a compiled function, a model, an optimizer,
    a list or a dict of parameters) to ``path``, atomically."""
    items = _parameter_list(target)
    entries, arrays = [], {}
    for k, (key, p) in enumerate(items):
        if not isinstance(p, Tensor) or p.op != "parameter":
            raise TypeError(f"save_parameters: {key!r} is not a parameter: {p!r}")
        arrays[f"a{k}"] = p.value
        entries.append({"key": key, "name": _text(p.name, "a parameter name", one_line=False), "array": f"a{k}",
                        "shape": list(p.shape), "dtype": _dtype_name(p.dtype)})
    return _write_zip(path, CHECKPOINT_MEMBER, {"format": CHECKPOINT_FORMAT, "version": VERSION,
                                                "parameters": entries}, arrays)


def load_parameters(target, path: str | os.PathLike, strict: bool = True):
    """Set ``target``'s parameters from a checkpoint written by :func:`save_parameters`.

    Parameters are matched by key (dict keys, else position). With ``strict`` the names must agree too.
    Every value is checked before any is assigned, so a mismatch leaves the parameters unchanged.
    """
    doc, arrays = _read_zip(path, CHECKPOINT_MEMBER, CHECKPOINT_FORMAT)
    entries = doc.get("parameters")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and e.get("array") in arrays for e in entries):
        raise LoadError(f"cannot load {os.fspath(path)!r}: bad parameter table")
    saved = {str(e.get("key")): e for e in entries}
    items = _parameter_list(target)
    if set(saved) != {k for k, _ in items}:
        raise LoadError(f"{os.fspath(path)!r} holds {len(saved)} parameters ({', '.join(list(saved)[:8])}...), "
                        f"the target has {len(items)}")
    checked = []
    for key, p in items:
        entry, value = saved[key], arrays[saved[key]["array"]]
        if strict and entry.get("name") != p.name:
            raise LoadError(f"parameter {key}: the checkpoint has {entry.get('name')!r}, the target {p.name!r} "
                            f"(pass strict=False to match by position only)")
        if value.shape != p.shape or not np.can_cast(value.dtype, p.dtype, "same_kind"):
            raise LoadError(f"parameter {key} ({p.label()!r}): the checkpoint holds shape {value.shape} "
                            f"dtype {value.dtype}, the target expects {p.shape} {p.dtype}")
        checked.append((p, value))
    for p, value in checked:
        p.value = value
    return target
