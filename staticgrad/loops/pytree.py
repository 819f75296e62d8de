"""Pytrees: nested tuples, lists and dicts whose leaves are tensors (or values that become tensors).

A loop carries state as a pytree; it is flattened to a list of leaves to become graph inputs and outputs,
and unflattened again to hand the user's function what it gave.
"""
from __future__ import annotations


class TreeDef:
    """The shape of a pytree without its leaves: ``kind`` ("leaf", "none", "tuple", "list", "dict"),
    ``keys`` (a dict's, sorted), ``children`` (TreeDefs), ``cls`` (a named tuple's class, rebuilt as such)."""

    __slots__ = ("kind", "keys", "children", "cls")

    def __init__(self, kind, keys=(), children=(), cls=None):
        self.kind, self.keys, self.children, self.cls = kind, tuple(keys), tuple(children), cls

    @property
    def size(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.size for c in self.children)

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and (self.kind, self.keys, self.children, self.cls)
                == (other.kind, other.keys, other.children, other.cls))

    __hash__ = None

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = [repr(c) if self.kind != "dict" else f"{k!r}: {c!r}" for k, c in zip(self.keys or [None] *
                                                                                         len(self.children),
                                                                                         self.children)]
        opened, closed = {"tuple": "()", "list": "[]", "dict": "{}"}[self.kind]
        if self.cls is not None:
            opened = self.cls.__name__ + opened
        return opened + ", ".join(inner) + closed


def flatten(tree) -> tuple[list, TreeDef]:
    """(the leaves of ``tree`` in order, its TreeDef). None is an empty subtree (no leaf)."""
    leaves = []
    treedef = _flatten(tree, leaves)
    return leaves, treedef


def _flatten(tree, leaves):
    # (pytrees in loops are a few levels deep at most: recursion is safe here)
    if tree is None:
        return TreeDef("none")
    if isinstance(tree, (tuple, list)):
        kind = "tuple" if isinstance(tree, tuple) else "list"
        named = type(tree) if kind == "tuple" and hasattr(type(tree), "_fields") else None
        return TreeDef(kind, (), [_flatten(x, leaves) for x in tree], named)
    if isinstance(tree, dict):
        keys = sorted(tree)
        return TreeDef("dict", keys, [_flatten(tree[k], leaves) for k in keys])
    leaves.append(tree)
    return TreeDef("leaf")


def unflatten(treedef: TreeDef, leaves):
    """The pytree of shape ``treedef`` holding ``leaves`` in order."""
    it = iter(leaves)
    tree = _build(treedef, it)
    if next(it, _END) is not _END:
        raise ValueError(f"unflatten: more leaves than the tree {treedef!r} holds")
    return tree


_END = object()


def _build(treedef, it):
    if treedef.kind == "leaf":
        return next(it)
    if treedef.kind == "none":
        return None
    children = [_build(c, it) for c in treedef.children]
    if treedef.kind == "dict":
        return dict(zip(treedef.keys, children))
    if treedef.cls is not None:
        return treedef.cls(*children)
    return tuple(children) if treedef.kind == "tuple" else children
