"""The codec of saved files: attribute values, dtypes, shapes and one-line texts to JSON values and back,
and the reading of a saved zip's members within size limits.

Encoding refuses what staticgrad does not store (TypeError, ValueError); decoding raises :class:`LoadError`.
"""
from __future__ import annotations

import json
import math
import os
import zipfile

import numpy as np

from .tensor import StaticgradError

MAX_TEXT = 4096


class LoadError(StaticgradError):
    """A file could not be loaded: unreadable, truncated, of another format, or describing a graph that
    staticgrad refuses to build (an unknown op, an attribute of a type it does not allow)."""


class LoadLimitError(LoadError):
    """A file needs more memory than the limits its loader was given (``max_array_bytes`` and the like):
    refused before anything is decompressed; a trusted file loads with larger limits."""


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


# ------------------------------------------------------------------ texts
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


def _check_text(value, what, optional=True):
    if value is None and optional:
        return None
    if not _one_line(value):
        raise LoadError(f"{what} must be a printable one-line string, got {value!r:.80}")
    return value


# ------------------------------------------------------------------ reading a saved zip
MAX_ARRAY_BYTES = 1 << 30       # one array of a file: 1 GiB
MAX_TOTAL_BYTES = 1 << 32       # all the arrays of a file together: 4 GiB
MAX_JSON_BYTES = 1 << 26        # its graph.json or parameters.json: 64 MiB
_CHUNK = 1 << 22


class Archive:
    """An open saved file: its JSON document, and its .npy members as a read-only mapping. A member is
    decompressed only when the document asks for it, and only after the sizes it declares (in the zip
    directory, then in its .npy header) are checked against the limits; reading stops one byte past what
    they declare, and nothing is unpickled."""

    def __init__(self, path, text_member, expected_format, version, limits):
        self.path = existing(path)
        self.max_array, self.max_total, max_json = limits
        self.total = 0
        self.zf = self._guard(zipfile.ZipFile, self.path)
        try:
            doc = self._guard(self._document, text_member, max_json)
            if not isinstance(doc, dict) or doc.get("format") != expected_format:
                raise LoadError(f"not a {expected_format} file")
            if doc.get("version") != version:
                raise LoadError(f"format version {doc.get('version')!r:.20}; this staticgrad reads {version}")
        except LoadError:
            self.zf.close()
            raise
        self.doc, self.names, self.arrays = doc, set(self.zf.namelist()), {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.zf.close()

    def __contains__(self, key):
        return isinstance(key, str) and key + ".npy" in self.names

    def __getitem__(self, key):
        if key not in self.arrays:
            self.arrays[key] = self._guard(self._array, key + ".npy")
        return self.arrays[key]

    def _guard(self, read, *args):
        try:
            return read(*args)
        except LoadError:
            raise
        except Exception as err:        # zipfile, numpy and json raise many kinds: all mean "unreadable"
            raise LoadError(f"the file is corrupt, truncated or not a staticgrad file "
                            f"({type(err).__name__}: {err})") from err

    def _document(self, name, limit):
        if name not in self.zf.namelist():
            raise LoadError(f"not a staticgrad file (no {name} inside)")
        self._fits(name, self.zf.getinfo(name).file_size, limit, "max_json_bytes")
        with self.zf.open(name) as fh:
            raw = fh.read(limit + 1)
        self._fits(name, len(raw), limit, "max_json_bytes")
        return json.loads(raw.decode("utf-8"))

    def _array(self, name):
        info = self.zf.getinfo(name)
        self._fits(name, info.file_size, self.max_array, "max_array_bytes")
        with self.zf.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            if version not in ((1, 0), (2, 0)):
                raise LoadError(f"member {name!r} is a .npy file of version {version}")
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(fh)
            if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
                raise LoadError(f"member {name!r} is not a numeric array (dtype {dtype})")
            size = math.prod(shape) * dtype.itemsize
            self._fits(name, size, self.max_array, "max_array_bytes")
            self._fits(name, self.total + size, self.max_total, "max_total_bytes", " with the arrays read before it")
            if size > info.file_size - fh.tell():
                raise LoadError(f"member {name!r} declares {size} bytes of data in its header, "
                                f"more than the {info.file_size} bytes the zip directory lists for it")
            value = np.empty(shape[::-1] if fortran else shape, dtype)
            self._fill(fh, value, name)
        self.total += size
        return value.T if fortran else value

    def _fill(self, fh, value, name):
        buffer, done = memoryview(value.reshape(-1).view(np.uint8)), 0
        while done < value.nbytes:
            chunk = fh.read(min(_CHUNK, value.nbytes - done))
            if not chunk:
                raise LoadError(f"member {name!r} ends before the {value.nbytes} bytes of data its "
                                f"header declares")
            buffer[done:done + len(chunk)] = chunk
            done += len(chunk)
        if fh.read(1):
            raise LoadError(f"member {name!r} holds more data than its header declares "
                            f"(shape {value.shape}, dtype {value.dtype})")

    def _fits(self, name, size, limit, keyword, what=""):
        if size > limit:
            raise LoadLimitError(f"member {name!r} needs {size:,} bytes{what}, over the limit "
                                 f"{keyword}={limit:,}; if you trust the file, pass a larger {keyword} to load it")


def existing(path):
    path = os.fspath(path)
    if not os.path.splitext(path)[1] and os.path.isfile(path + ".npz"):
        path += ".npz"          # saved under a name without extension, which saving completed
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {path!r}")
    return path
