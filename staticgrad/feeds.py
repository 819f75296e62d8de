"""What a compiled function's callers hand it: feeds checked against their placeholders, positional or
keyed by placeholder or name, with errors that name the placeholder and give expected and given
shape and dtype."""
from __future__ import annotations

import numpy as np

from .tensor import FeedCastError, FeedError, FeedTypeError, Tensor, format_shape

_MISSING = object()


def check_feed(node, value):
    """``value`` as an array of the placeholder's dtype, or a FeedError naming it."""
    try:
        arr = value if type(value) is np.ndarray else np.asarray(value)
    except (ValueError, TypeError) as err:
        raise FeedTypeError(f"placeholder {node.label()!r}: expected an array of shape {format_shape(node.shape)} "
                            f"and dtype {node.dtype}, got {type(value).__name__} that numpy cannot convert "
                            f"({err})") from None
    expected = node.shape
    if arr.dtype != node.dtype:
        if not np.can_cast(arr.dtype, node.dtype, "same_kind"):
            raise FeedTypeError(f"placeholder {node.label()!r}: expected dtype {node.dtype} with shape "
                                f"{format_shape(expected)}, got dtype {arr.dtype} with shape "
                                f"{format_shape(arr.shape)} (numpy cannot cast {arr.dtype} to {node.dtype} "
                                f"with 'same_kind')")
        arr = _cast(node, arr)
    if arr.ndim != len(expected) or any(d is not None and d != a for d, a in zip(expected, arr.shape)):
        raise FeedError(f"placeholder {node.label()!r}: expected shape {format_shape(expected)} (dtype "
                        f"{node.dtype}), got shape {format_shape(arr.shape)} (dtype {arr.dtype})")
    if not arr.flags.c_contiguous:
        # a C-ordered copy: numpy lays results out like their operands, and a plan's buffers are C-ordered,
        # so a Fortran-ordered feed would make planned sums add in another order than unplanned ones
        arr = np.ascontiguousarray(arr)
    return arr


def _cast(node, arr):
    """``arr`` cast to the placeholder's dtype, refusing a cast that changes a value: an integer out of the
    new type's range (numpy would wrap it: 2**32 + 1 into int32 is 1), a negative number into an unsigned
    type, a finite float that becomes infinite. (Rounding to the nearest float of a narrower type is a cast's
    nature, not a change to refuse.)"""
    target = node.dtype
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(target)
    if np.can_cast(arr.dtype, target, "safe") or arr.size == 0:
        return out
    if target.kind in "iu" and arr.dtype.kind in "biu":
        info = np.iinfo(target)
        bad = (arr < info.min) | (arr > info.max)
        why = f"outside {target}'s range [{info.min}, {info.max}]"
    elif target.kind in "fc":
        bad = ~np.isfinite(out) & np.isfinite(arr)
        why = f"beyond {target}'s largest {np.finfo(target).max:.4g}: it would become infinite"
    else:
        return out
    if bad.any():
        first = tuple(int(k) for k in np.unravel_index(int(np.argmax(bad)), arr.shape))
        value = arr[first].item()
        raise FeedCastError(f"placeholder {node.label()!r}: the fed {arr.dtype} value {value!r} at index {first} is "
                            f"{why}; cast it yourself if that is meant")
    return out


class Feeds:
    """The input placeholders of one function (IR nodes, in call order) and how callers may feed them.

    ``positional``: whether positional feeds are taken (with ``inputs=None`` and several placeholders,
    their order is not the user's: dict or names only).
    """

    def __init__(self, nodes, positional):
        self.nodes, self.positional = list(nodes), positional or len(nodes) <= 1
        self.by_key = {}
        for node in self.nodes:
            self.by_key[node.tensor] = node
            if node.name is not None:
                self.by_key.setdefault(node.name, node)

    def names(self) -> str:
        return ", ".join(repr(n.label()) for n in self.nodes)

    def in_order(self, feeds):
        """The values of a dict (or keywords) that feeds every input exactly once, in inputs order; None for
        anything else, which :meth:`check` then explains. Lets a dict call take the fast path."""
        if len(feeds) != len(self.nodes):
            return None
        values = []
        for node in self.nodes:
            value = feeds.get(node.tensor, _MISSING)
            if value is _MISSING and node.name is not None:
                value = feeds.get(node.name, _MISSING)
            if value is _MISSING:
                return None
            values.append(value)
        return values

    def check(self, args, kwargs):
        """Checked arrays in inputs order, from a call's positional or keyed feeds."""
        if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
            return self._from_dict(args[0])
        if kwargs:
            if args:
                raise FeedError("give the feeds either positionally or by name, not both")
            return self._from_dict(kwargs)
        if args and not self.positional:
            raise FeedError(f"this function was compiled with inputs=None: feed its placeholders ({self.names()}) "
                            "by dict or by name, or compile with inputs=[...] to fix a positional order")
        if len(args) != len(self.nodes):
            missing = "; ".join(f"missing feed for placeholder {n.label()!r} (expected shape {format_shape(n.shape)}, "
                                f"dtype {n.dtype})" for n in self.nodes[len(args):])
            raise FeedError(f"expected {len(self.nodes)} feeds ({self.names()}) in inputs order, got {len(args)}"
                            + (f": {missing}" if missing else ""))
        return [check_feed(node, value) for node, value in zip(self.nodes, args)]

    def _from_dict(self, feed_dict):
        given = {}
        for key, value in feed_dict.items():
            node = self.by_key.get(key) if isinstance(key, (Tensor, str)) else None
            if node is None:
                what = key.label() if isinstance(key, Tensor) else key
                raise FeedError(f"{what!r} is not an input placeholder of this function (inputs: {self.names()})")
            if node.id in given:
                raise FeedError(f"placeholder {node.label()!r} is fed twice")
            given[node.id] = value
        missing = [n.label() for n in self.nodes if n.id not in given]
        if missing:
            detail = "; ".join(f"{n.label()!r} expects shape {format_shape(n.shape)} dtype {n.dtype}"
                               for n in self.nodes if n.id not in given)
            raise FeedError(f"missing feed for placeholder {', '.join(map(repr, missing))}: {detail}")
        return [check_feed(node, given[node.id]) for node in self.nodes]
