"""A module's layers without a graph: one row per sub-module that holds parameters or has no sub-modules,
named as the name scopes its call builds in (Sequential's k-th layer "k.name"; otherwise the layer's
``name``, else the prefix of its parameters' names, "mlp.0"), nested ones joined with '/'."""
from __future__ import annotations

import math

from ..nn.layers import Module, Sequential, _layer_name
from ..tensor import format_shape


def module_rows(model) -> list:
    rows = []
    _walk(model, "", rows)
    return rows


def module_types(model) -> dict:
    """{layer name: its class name}, by path and, where one layer alone has it, by the path's last part
    too (a layer whose scope sits inside another's: "mlp/mlp.0")."""
    types, last = {}, {}
    for row in module_rows(model):
        types[row["layer"]] = row["type"]
        last.setdefault(row["layer"].rsplit("/", 1)[-1], set()).add(row["type"])
    for name, found in last.items():
        if len(found) == 1:
            types.setdefault(name, found.pop())
    return types


def _walk(module, path, rows):
    children = _named_children(module)
    inner = {t.id for _, child in children if isinstance(child, Module) for t in child.parameters() + child.buffers()}
    params = [p for p in module.parameters() if p.id not in inner]
    buffers = [b for b in module.buffers() if b.id not in inner]
    if params or buffers or not children:
        prefix = _name_of(module) + "."
        weights = ", ".join(f"{_short(t.label(), prefix)} {format_shape(t.shape)}" for t in params)
        rows.append({"layer": path or _name_of(module), "type": type(module).__name__, "weights": weights,
                     "params": sum(math.prod(p.shape) for p in params),
                     "buffers": sum(math.prod(b.shape) for b in buffers)})
    for name, child in children:
        full = f"{path}/{name}" if path else name
        if isinstance(child, Module):
            _walk(child, full, rows)
        else:       # (a plain function in a Sequential: a layer without parameters)
            rows.append({"layer": full, "type": "function", "weights": "", "params": 0, "buffers": 0})


def _named_children(module) -> list:
    if isinstance(module, Sequential):
        return [(f"{k}.{_layer_name(layer)}", layer) for k, layer in enumerate(module.layers)]
    return [(_name_of(child), child) for child in module.children()]


def _name_of(module) -> str:
    """The layer's ``name``; else the part its parameters' names share before the last dot; else its class."""
    name = getattr(module, "name", None)
    if isinstance(name, str) and name:
        return name
    labels = [t.label() for t in module.parameters() + module.buffers()]
    prefixes = {label.rsplit(".", 1)[0] for label in labels if "." in label}
    if len(prefixes) == 1:
        return prefixes.pop()
    return type(module).__name__.lower()


def _short(label, prefix) -> str:
    return label[len(prefix):] if label.startswith(prefix) else label
