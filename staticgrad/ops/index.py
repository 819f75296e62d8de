"""Indexing: ``x[index]`` with numpy's rules (basic and advanced), and its gradient, a scatter-add."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import ShapeError, Tensor, TensorLike, format_shape
from .registry import REARRANGES, SHAPE_REF, VIEW, apply, coerce, defop, stored_sizes


def normalize_index(index):
    """An index as a tuple numpy accepts, with lists turned into arrays (kept static, never tensors)."""
    if not isinstance(index, tuple):
        index = (index,)
    out = []
    for item in index:
        if hasattr(item, "op") or hasattr(item, "_eager"):
            raise TypeError("indexing with a tensor is not supported; use where or a one-hot product")
        if isinstance(item, list):
            item = np.asarray(item)
        elif isinstance(item, (bool, np.bool_)):
            # numpy reads a bool scalar as a 0-d mask (x[True] has a new axis of 1), not as the integer
            # 1: as a 0-d array it takes the mask paths of the shape rule and the gradient
            item = np.asarray(item)
        if isinstance(item, np.ndarray):
            if item.dtype.kind not in "biu":
                raise TypeError(f"index arrays must be integer or bool, not {item.dtype}")
            item = item.copy()
            item.setflags(write=False)
        elif isinstance(item, (np.integer,)):
            item = int(item)
        elif not (item is None or item is Ellipsis or isinstance(item, (int, slice))):
            raise TypeError(f"unsupported index {item!r}")
        out.append(item)
    return tuple(out)


def _index_numbers(index):
    """Every absolute number written in ``index`` (slice bounds and steps, integers, index arrays' largest)."""
    values = [0]
    for item in index:
        if isinstance(item, int):
            values.append(abs(item))
        elif isinstance(item, slice):
            values += [abs(v) for v in (item.start, item.stop, item.step) if v is not None]
        elif isinstance(item, np.ndarray) and item.dtype.kind in "iu" and item.size:
            values.append(int(np.abs(item).max()))
    return values


def _pin_masks(shape, index):
    """``shape`` with unknown axes under a bool mask set to the mask's size (they must match it anyway)."""
    shape = list(shape)
    width = [item.ndim if isinstance(item, np.ndarray) and item.dtype == np.bool_ else 0 if item is None
             else 1 for item in index if item is not Ellipsis]
    axis = 0
    for item in index:
        if item is Ellipsis:
            axis += len(shape) - sum(width)
            continue
        if isinstance(item, np.ndarray) and item.dtype == np.bool_:
            for k, n in enumerate(item.shape):
                if axis + k < len(shape) and shape[axis + k] is None:
                    shape[axis + k] = n
            axis += item.ndim
        elif item is not None:
            axis += 1
    return tuple(shape)


# A dummy element of zero bytes: numpy works out an index's result shape without allocating data.
_EMPTY = np.empty((), np.dtype([]))


def _index_shape(shape, index):
    """The static shape of ``x[index]``: numpy is probed at sizes of each unknown axis, and only the dims that
    come out the same at every size are kept (the index fixes them).

    A slice clips to the axis it cuts, so over an unknown size it fixes nothing but an empty result: ``x[:64]``
    of 3 rows has 3. How much a slice keeps changes only where a bound meets the axis size (at the absolute
    values of its bounds), so probing around each number in the index, at 0 and at two sizes beyond all of
    them finds every change: ``x[-1:5]`` is empty at 7 rows but not at 3.
    """
    shape = _pin_masks(shape, index)
    numbers = _index_numbers(index)
    beyond = max(numbers) + 2
    sizes = sorted({n for v in numbers for n in range(v - 2, v + 3) if n >= 0} | {beyond, 2 * beyond + 1})

    def probe(sizes):
        return np.broadcast_to(_EMPTY, tuple(sizes))[index].shape
    base = [beyond if d is None else d for d in shape]
    try:
        out = list(probe(base))
    except IndexError as err:
        raise ShapeError(f"index {index} does not fit shape {format_shape(shape)}: {err}") from None
    for k, d in enumerate(shape):
        if d is None:
            for n in sizes:
                try:
                    other = probe(base[:k] + [n] + base[k + 1:])
                except IndexError:      # an integer or index array past this size: an error at run time
                    continue
                out = [None if e != f else e for e, f in zip(out, other)]
    return tuple(out)


def _stored_index(index):
    """``index`` if it is in the form :func:`normalize_index` gives."""
    def stored(item):
        if isinstance(item, np.ndarray):
            return item.dtype.kind in "biu"
        if isinstance(item, slice):
            return all(v is None or type(v) is int for v in (item.start, item.stop, item.step))
        return item is None or item is Ellipsis or type(item) is int
    if not isinstance(index, tuple) or not all(stored(item) for item in index):
        raise TypeError(f"index {index!r:.200} is not a tuple of ints, slices, None, Ellipsis and integer or "
                        f"bool arrays")
    return index


def _getitem_spec(inputs, index):
    (x,) = inputs
    return _index_shape(x.shape, _stored_index(index)), x.dtype


def _getitem_kernel(x, index):
    return x[index]


def _is_basic(index):
    return not any(isinstance(i, np.ndarray) for i in index)


def _getitem_vjp(g, out, x, index):
    if None not in x.shape:
        return (apply("getitem_grad", (g,), {"index": index, "shape": x.shape}),)
    return (apply("getitem_grad", (g, x), {"index": index, "shape": None}),)


def _getitem_grad_kernel(g, ref=None, index=(), shape=None):
    shape = ref.shape if ref is not None else shape
    out = np.zeros(shape, dtype=g.dtype)
    if _is_basic(index):
        out[index] = g
    else:
        np.add.at(out, index, g)   # repeated indices accumulate
    return out


def _getitem_grad_spec(inputs, index, shape):
    g, *like = inputs
    if len(like) > 1 or (shape is None) != bool(like):
        raise TypeError(f"takes a gradient and either a tensor of the shape to fill or that shape, got "
                        f"{len(inputs)} inputs and shape {shape!r:.80}")
    shape = like[0].shape if like else stored_sizes(shape)
    picked = _index_shape(shape, _stored_index(index))
    # numpy's assignment rule: g broadcasts to the indexed shape (a None fits anything)
    fits = len(g.shape) <= len(picked) and all(a in (1, None) or b is None or a == b
                                                for a, b in zip(g.shape[::-1], picked[::-1]))
    if not fits:
        raise ShapeError(f"a gradient of shape {format_shape(g.shape)} cannot fill {format_shape(picked)}, "
                         f"the shape indexed")
    return tuple(shape), g.dtype


def _getitem_grad_vjp(g, out, gin, *ref, index, shape):
    picked = getitem(g, index)
    # gin was broadcast to the indexed shape: where both have a None, only the run-time sizes tell whether
    # it was stretched (gin (None, 3) fed (1, 3) fills ref[1:] of a ref fed (4, 3), or none of ref fed (1, 3))
    if any(d is None and e is None for d, e in zip(gin.shape[::-1], picked.shape[::-1])):
        picked = apply("sum_like", (picked, gin))
    return (picked,) + (None,) * len(ref)


def _getitem_grad_specialize(node, shapes, nodes):
    if len(node.inputs) == 1:
        return node
    return node.copy(inputs=node.inputs[:1], attrs={"index": node.attrs["index"], "shape": tuple(shapes[node.id])})


def _getitem_grad_scalar(em, node, ins, shape):
    """Zeros, with each element of g added where the index sends it (repeats add up, in numpy's order)."""
    out = np.full(shape, "0.0", dtype=object)
    target = np.empty(shape, dtype=object)
    target.reshape(-1)[:] = np.arange(target.size)
    picked = np.asarray(target[node.attrs["index"]], dtype=object)
    for pos, g in zip(np.broadcast_to(picked, ins[0].shape).reshape(-1), ins[0].reshape(-1)):
        cell = np.unravel_index(pos, out.shape)
        out[cell] = g if out[cell] == "0.0" else em.assign(f"({out[cell]} + {g})")
    return out


def _advanced(attrs) -> bool:
    # numpy may put the axes an index array selects first
    return any(isinstance(k, np.ndarray) for k in attrs["index"])


def _torch_index(T, index):
    if any(isinstance(i, slice) and (i.step or 1) < 0 for i in index):
        raise NotImplementedError("torch indexing takes no negative step")
    index = tuple(T.from_numpy(i.copy()) if isinstance(i, np.ndarray) else i for i in index)
    return lambda x: x[index]


def _getitem_batch(attrs, shapes, stacked):
    """Basic slicing (slices and ints) keeps the steps axis in front; other indexes are not hoisted."""
    index = attrs["index"]
    if not all(isinstance(item, (int, slice)) for item in index):
        return None
    return {"index": (slice(None),) + tuple(index)}, [0]


_GETITEM = defop("getitem", _getitem_kernel, _getitem_spec, _getitem_vjp, VIEW | REARRANGES, permutes=_advanced,
                 batch=_getitem_batch,
                 torch=_torch_index)
_GETITEM_GRAD = defop("getitem_grad", _getitem_grad_kernel, _getitem_grad_spec, _getitem_grad_vjp, SHAPE_REF,
                      specialize=_getitem_grad_specialize, scalar_rule=_getitem_grad_scalar,
                      unsupported={"torch": "numpy's indexing rules for a scatter-add (torch's index_put_ takes "
                                            "tensor indices only); the torch column replays forward tapes"},
                      doc="zeros of x's shape with g scattered (added) at index: the VJP of getitem")


@_GETITEM.publish
def getitem(x: TensorLike, index: Any) -> Tensor:
    """``x[index]`` with ints, slices, None, Ellipsis and integer/bool arrays (numpy semantics)."""
    (x,) = coerce(x)
    return apply("getitem", (x,), {"index": normalize_index(index)})


@_GETITEM_GRAD.publish
def getitem_grad(g: TensorLike, like: TensorLike | tuple[int, ...], index: Any) -> Tensor:
    """Zeros of ``like``'s shape (a tensor's, or a tuple of ints) with ``g`` added at ``index``, repeated
    indices adding up: the gradient of ``like[index]``."""
    (g,) = coerce(g)
    index = normalize_index(index)
    if isinstance(like, tuple):
        return apply("getitem_grad", (g,), {"index": index, "shape": tuple(int(d) for d in like)})
    return apply("getitem_grad", (g, coerce(like)[0]), {"index": index, "shape": None})
