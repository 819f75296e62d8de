"""Saving and loading compiled functions and parameter checkpoints, as JSON plus .npy arrays in a zip.

A saved function is one ``.npz`` file (any name): the member ``graph.json`` describes the optimized
graph (``unzip -p model.npz graph.json`` shows it), the other members are the parameter and constant
arrays as ``.npy`` files (``np.load`` reads them too). Nothing is ever pickled.

Loading treats the file as untrusted: every op must be a registered op, every attribute must decode
to a plain value (numbers, strings, tuples, slices, numeric dtypes, small integer arrays), attribute
keys must be identifiers and texts must be printable on one line, because the loaded graph is turned
into generated Python source. Only the members the graph names are read, each after the sizes it
declares are checked against limits the caller can raise (:class:`LoadLimitError` past one), and every
node's shape rule and every update's fit are checked, so a file that would fail when called is refused.
The bodies of loop nodes are graphs nested in them (:mod:`staticgrad.graphdoc`), checked the same way.
Anything else raises :class:`LoadError` before any code is generated.
Saving refuses the same texts (a ValueError naming the text) before it writes anything.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile

import numpy as np

from .compiler import link, update_refusal
from .encoding import (
    MAX_ARRAY_BYTES,
    MAX_JSON_BYTES,
    MAX_TOTAL_BYTES,
    Archive,
    LoadError,
    LoadLimitError,  # noqa: F401  (sg.io.LoadLimitError, as sg.io.LoadError)
    _check_text,
    _dtype_name,
    _is_shape,
    _text,
    decode_attr,  # noqa: F401  (sg.io.decode_attr: the codec, as tests and users reach it)
    decode_dtype,
    encode_attr,  # noqa: F401
)
from .function import Function
from .graph import Graph
from .graphdoc import MULTI, Reader, encode_nodes
from .graphdoc import expect as _expect
from .tensor import Tensor, parameter, placeholder

FORMAT = "staticgrad.function"
CHECKPOINT_FORMAT = "staticgrad.parameters"
VERSION = 1
GRAPH_MEMBER = "graph.json"
CHECKPOINT_MEMBER = "parameters.json"


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
        # (a loop node spreads out: its bodies' nodes get a line each too)
        items = [inner + (_dumps(v, inner) if "bodies" in v else json.dumps(v, allow_nan=False)) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    return json.dumps(value, allow_nan=False)



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
                                    "shape": list(tensor.shape), "dtype": _dtype_name(tensor.dtype),
                                    "requires_grad": bool(tensor.requires_grad)})
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
    return {"single": fn.single, "inputs": list(graph.inputs), "positional": fn.positional,
            "outputs": list(graph.outputs), "updates": [[p, e] for p, e in graph.updates],
            "nodes": encode_nodes(graph, label, tables)}


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
        trained = entry.get("requires_grad", True)          # (state that is not trained stays so; older files: all)
        _expect(isinstance(trained, bool), f"parameter {key!r}: bad requires_grad {trained!r:.20}")
        params[key] = parameter(value, name=_check_text(entry.get("name"), "a parameter name"), requires_grad=trained)
    for entry in doc["placeholders"]:
        _expect(isinstance(entry, dict) and isinstance(entry.get("key"), str), f"bad placeholder entry {entry!r:.80}")
        key = entry["key"]
        _expect(key not in holders and _is_shape(entry.get("shape")) and isinstance(entry.get("requires_grad"), bool),
                f"bad placeholder entry {entry!r:.80}")
        dtype = decode_dtype(entry.get("dtype"))
        holders[key] = placeholder(entry["shape"], dtype, _check_text(entry.get("name"), "a placeholder name"),
                                   requires_grad=entry["requires_grad"] and dtype.kind in "fc")
    return params, holders


def _decode_function(doc, reader) -> Function:
    _expect(isinstance(doc, dict) and isinstance(doc.get("nodes"), list), "a function without a node list")
    nodes = reader.nodes(doc["nodes"])
    outputs, updates, inputs, single = (doc.get(k) for k in ("outputs", "updates", "inputs", "single"))
    positional = doc.get("positional", True)     # files written before the flag existed fed positionally
    _expect(isinstance(positional, bool), "bad 'positional' flag")
    _expect(isinstance(outputs, list) and all(type(i) is int and i in nodes and nodes[i].dtype != MULTI
                                              for i in outputs), "bad outputs")
    _expect(isinstance(single, bool) and (not single or len(outputs) == 1), "bad 'single' flag")
    _expect(isinstance(inputs, list) and len(set(map(str, inputs))) == len(inputs) and
            all(type(i) is int and i in nodes and nodes[i].op == "placeholder" for i in inputs), "bad inputs")
    _expect(isinstance(updates, list), "bad updates")
    seen = set()
    for pair in updates:
        _expect(isinstance(pair, list) and len(pair) == 2 and all(type(i) is int and i in nodes for i in pair)
                and nodes[pair[0]].op == "parameter" and pair[0] not in seen, f"bad update {pair!r:.80}")
        seen.add(pair[0])
        refusal = update_refusal(*(nodes[i] for i in pair))
        _expect(refusal is None, f"the update of parameter node {pair[0]} ({nodes[pair[0]].label()!r}) by "
                                 f"{nodes[pair[1]].op} node {pair[1]} {refusal}")
    fed = set(inputs)
    missing = [n.label() for n in nodes.values() if n.op == "placeholder" and n.id not in fed]
    _expect(not missing, f"placeholders {missing} are used but not inputs")
    graph = Graph(nodes, outputs, [tuple(p) for p in updates], inputs)
    try:
        return link(graph, single, rows=(), positional=positional)
    except (SyntaxError, KeyError, TypeError, ValueError) as err:
        raise LoadError(f"the loaded graph could not be linked: {type(err).__name__}: {err}") from err


def load(path: str | os.PathLike, *, max_array_bytes: int = MAX_ARRAY_BYTES, max_total_bytes: int = MAX_TOTAL_BYTES,
         max_json_bytes: int = MAX_JSON_BYTES) -> Function | dict[str, Function]:
    """The compiled function saved at ``path`` (a dict of them if a dict was saved), with fresh
    placeholders and parameters holding the saved values.

    The file is treated as untrusted. Only the arrays its graph refers to are read, and each only after
    the sizes it declares are checked: at most ``max_array_bytes`` for one array (1 GiB by default),
    ``max_total_bytes`` for all of them (4 GiB) and ``max_json_bytes`` for the graph description (64 MiB);
    over a limit is a :class:`LoadLimitError` naming it. Every node's shape rule runs, and every update
    must fit its parameter, so a file that would fail when called is refused here, with a :class:`LoadError`.
    """
    try:
        limits = (max_array_bytes, max_total_bytes, max_json_bytes)
        with Archive(path, GRAPH_MEMBER, FORMAT, VERSION, limits) as arrays:
            return _decode_file(arrays.doc, arrays)
    except LoadError as err:
        raise type(err)(f"cannot load {os.fspath(path)!r}: {err}") from err.__cause__


def _decode_file(doc, arrays):
    reader = Reader(arrays, *_leaf_tensors(doc, arrays))
    if "function" in doc:
        return _decode_function(doc["function"], reader)
    functions = doc.get("functions")
    _expect(isinstance(functions, dict), "the file holds no function")
    return {str(name): _decode_function(f, reader) for name, f in functions.items()}


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


def load_parameters(target, path: str | os.PathLike, strict: bool = True, *, max_array_bytes: int = MAX_ARRAY_BYTES,
                    max_total_bytes: int = MAX_TOTAL_BYTES, max_json_bytes: int = MAX_JSON_BYTES):
    """Set ``target``'s parameters from a checkpoint written by :func:`save_parameters`.

    Parameters are matched by key (dict keys, else position). With ``strict`` the names must agree too.
    Every value is checked before any is assigned, so a mismatch leaves the parameters unchanged. The
    limits are :func:`load`'s.
    """
    try:
        limits = (max_array_bytes, max_total_bytes, max_json_bytes)
        with Archive(path, CHECKPOINT_MEMBER, CHECKPOINT_FORMAT, VERSION, limits) as arrays:
            return _assign_checkpoint(target, arrays.doc, arrays, strict)
    except LoadError as err:
        raise type(err)(f"cannot load {os.fspath(path)!r}: {err}") from err.__cause__


def _assign_checkpoint(target, doc, arrays, strict):
    entries = doc.get("parameters")
    _expect(isinstance(entries, list) and all(isinstance(e, dict) and e.get("array") in arrays for e in entries),
            "bad parameter table")
    saved = {str(e.get("key")): e for e in entries}
    items = _parameter_list(target)
    _expect(set(saved) == {k for k, _ in items}, f"it holds {len(saved)} parameters "
            f"({', '.join(list(saved)[:8])}...), the target has {len(items)}")
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
