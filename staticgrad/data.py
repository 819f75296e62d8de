"""Feeding compiled functions: mini-batches over numpy arrays, running a function over them, fitting.

The graph is compiled once; these helpers only slice arrays and call it, batch after batch.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np


class Batches:
    """Mini-batches over arrays that share their first axis; iterate it once per epoch.

    Each batch is a tuple with one slice per array (just the slice when there is one array), ready to be
    passed positionally to a compiled function. With ``shuffle`` every epoch draws a new order from one
    generator seeded by ``seed``, so a run is reproducible and epochs differ. ``drop_last`` skips the
    final short batch.
    """

    def __init__(self, *arrays, batch_size=32, shuffle=False, seed=None, drop_last=False):
        if not arrays:
            raise ValueError("Batches: give at least one array")
        self.arrays = [np.asarray(a) for a in arrays]
        sizes = {len(a) if a.ndim else None for a in self.arrays}
        if None in sizes or len(sizes) != 1:
            shapes = ", ".join(str(a.shape) for a in self.arrays)
            raise ValueError(f"Batches: arrays must share their first axis, got shapes {shapes}")
        self.n = sizes.pop()
        batch_size = int(batch_size)
        if batch_size < 1:
            raise ValueError(f"Batches: batch_size must be positive, got {batch_size}")
        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), bool(drop_last)
        self._rng = np.random.default_rng(seed)

    def __len__(self):
        if self.drop_last:
            return self.n // self.batch_size
        return math.ceil(self.n / self.batch_size)

    def __iter__(self):
        order = self._rng.permutation(self.n) if self.shuffle else None
        for k in range(len(self)):
            start = k * self.batch_size
            if order is None:
                parts = [a[start:start + self.batch_size] for a in self.arrays]
            else:
                idx = order[start:start + self.batch_size]
                parts = [a[idx] for a in self.arrays]
            yield parts[0] if len(parts) == 1 else tuple(parts)


def batches(*arrays, batch_size=32, shuffle=False, seed=None, drop_last=False) -> Batches:
    """Mini-batches over ``arrays`` (see :class:`Batches`)."""
    return Batches(*arrays, batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last)


def _call(fn, batch):
    if isinstance(batch, dict):
        return fn(batch)
    if isinstance(batch, (tuple, list)):
        return fn(*batch)
    return fn(batch)


def _first_scalar(result):
    """The value to show on the bar: the output itself, or the first output of several, when scalar."""
    first = result[0] if isinstance(result, list) and result else result
    arr = np.asarray(first) if isinstance(first, (np.ndarray, np.generic, float, int)) else None
    return float(arr) if arr is not None and arr.ndim == 0 else None


def _bar(total, progress, desc=None):
    """tqdm's bar (tqdm.auto: a widget in a notebook, a line on a terminal). ``progress`` None shows it on a
    terminal or in a notebook only, so logs, pipes and CI stay clean; True and False force it."""
    from tqdm.auto import tqdm  # here: importing tqdm costs a tenth of a second, training does not
    return tqdm(total=total, desc=desc or None, unit="batch", disable=None if progress is None else not progress)


def _is_flag(progress):
    return progress is None or isinstance(progress, (bool, int))


def _run(fn, batches, bar, name, shown):
    """Call ``fn`` on every batch, advancing ``bar`` and showing the running mean of a scalar result as
    ``shown[name]`` (``shown`` holds whatever else the bar shows, such as last epoch's metrics)."""
    results, running, count = [], 0.0, 0
    drawn = not getattr(bar, "disable", False)
    # Formatting the postfix costs more than a small step: do it at most as often as tqdm redraws.
    interval, due = getattr(bar, "mininterval", 0.0), 0.0
    for batch in batches:
        result = _call(fn, batch)
        results.append(result)
        value = _first_scalar(result)
        if value is not None:
            running, count = running + value, count + 1
            if drawn and time.monotonic() >= due:
                shown[name] = running / count
                bar.set_postfix(shown, refresh=False)
                due = time.monotonic() + interval
        bar.update(1)
    if drawn and count:
        shown[name] = running / count           # what the bar shows when it closes or the epoch ends
        bar.set_postfix(shown, refresh=False)
    return results


def run_batches(fn, batches, progress=None, desc=None, name="loss"):
    """Call ``fn`` on every batch and return the list of what it returned.

    A batch may be a tuple (positional feeds), a dict (feeds by placeholder or name) or one array.
    ``progress``: None shows a tqdm bar only on a terminal or in a notebook, False never, True always; or
    give a tqdm bar of your own to advance (left open for the caller). When ``fn`` returns a scalar first,
    the bar shows its running mean as ``name``.
    """
    if not _is_flag(progress):
        return _run(fn, batches, progress, name, {})
    try:
        total = len(batches)
    except TypeError:
        total = None
    with _bar(total, progress, desc) as bar:
        return _run(fn, batches, bar, name, {})


class History:
    """What :func:`fit` saw: ``history.loss[e]`` is the mean loss of epoch e, ``history.metrics`` the
    values ``validate`` returned (one dict per epoch); ``history.plot()`` draws them."""

    def __init__(self):
        self.loss = []
        self.metrics = []

    def __repr__(self):
        last = f", last loss {self.loss[-1]:.4g}" if self.loss else ""
        return f"<History {len(self.loss)} epochs{last}>"

    def plot(self, ax=None):
        """Draw the curves per epoch with matplotlib and return the Axes: the training loss, and every
        metric ``validate`` returned (losses beside it; the rest, such as accuracy, on a second y axis at
        the right). ``ax``: the matplotlib Axes to draw into (default: a new figure)."""
        try:
            import matplotlib
        except ImportError as err:
            raise ImportError("History.plot needs matplotlib, an optional extra: pip install 'staticgrad[plot]' "
                              "(or pip install matplotlib)") from err
        if not self.loss:
            raise ValueError("History.plot: nothing to plot, the history has no epochs")
        from matplotlib.ticker import MaxNLocator
        if ax is None:
            import matplotlib.pyplot as plt
            _, ax = plt.subplots()
        marker = "." if len(self.loss) <= 30 else None          # dots for a few epochs; clutter for many
        ax.plot(np.arange(1, len(self.loss) + 1), self.loss, marker=marker, label="training loss")
        names = list(dict.fromkeys(key for metrics in self.metrics for key in metrics))
        others = [key for key in names if "loss" not in key.lower()]
        right = ax.twinx() if others else None
        colors = matplotlib.rcParams["axes.prop_cycle"].by_key().get("color", [None])
        for k, key in enumerate(names, 1):
            values = [_as_float(metrics.get(key)) for metrics in self.metrics]
            (right if key in others else ax).plot(np.arange(1, len(values) + 1), values, marker=marker, label=key,
                                                  color=colors[k % len(colors)], linestyle="--")
        ax.set_xlabel("epoch")
        ax.set_ylabel("loss")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        handles, labels = ax.get_legend_handles_labels()
        if right is not None:
            right.set_ylabel(others[0] if len(others) == 1 else "metrics")
            more = right.get_legend_handles_labels()
            handles, labels = handles + more[0], labels + more[1]
        # Above the plot: inside it, one axes' legend would hide the other axes' curves.
        ax.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(labels), 3),
                  frameon=False)
        return ax


def _as_float(value):
    """A metric as a number to draw (NaN, a gap in the curve, for an epoch without it or a non-number)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def fit(step, data, epochs=1, progress=None, validate=None, log=None):
    """Train by calling the compiled ``step`` on every batch of ``data`` for ``epochs`` epochs.

    ``step`` returns the loss (alone or first of its outputs). ``data`` is re-iterated each epoch
    (a :class:`Batches`, or any re-iterable of batches; a one-shot iterator only for one epoch, and an
    epoch without batches is an error). One tqdm bar covers the whole run, showing the epoch and the
    epoch's running mean loss (on a terminal or in a notebook only unless ``progress`` is True or False;
    or a tqdm bar of your own). ``validate()``, if given, is called after each epoch and returns a dict of
    metrics shown on the bar and kept in the history. ``log(epoch, loss, metrics)`` is called after each
    epoch too.
    """
    epochs = int(epochs)
    if epochs > 1 and isinstance(data, Iterator):
        raise ValueError(f"fit: data is a one-shot iterator ({type(data).__name__}): the first of {epochs} epochs "
                         f"would use it up; pass something iterable once per epoch, such as data.batches(...) "
                         f"or a list of batches")
    try:
        per_epoch = len(data)
    except TypeError:
        per_epoch = None
    total = per_epoch * epochs if per_epoch is not None else None
    bar = _bar(total, progress, f"epoch 1/{epochs}") if _is_flag(progress) else progress
    history, shown = History(), {}
    try:
        for epoch in range(1, epochs + 1):
            bar.set_description(f"epoch {epoch}/{epochs}", refresh=False)
            results = _run(step, data, bar, "loss", shown)
            if not results:
                raise ValueError(f"fit: data gave no batches in epoch {epoch}"
                                 + (" after giving some in epoch 1; it must yield the batches again each epoch "
                                    "(a generator or an iterator is used up after one)" if epoch > 1 else ""))
            losses = [v for v in map(_first_scalar, results) if v is not None]
            loss = float(np.mean(losses)) if losses else float("nan")
            history.loss.append(loss)
            metrics = dict(validate()) if validate is not None else {}
            history.metrics.append(metrics)
            if metrics and not getattr(bar, "disable", False):
                shown.update(metrics)
                bar.set_postfix(shown, refresh=False)
            if log is not None:
                log(epoch, loss, metrics)
    finally:
        if _is_flag(progress):
            bar.close()
    return history


def predict(fn, *arrays, batch_size=1024):
    """``fn`` applied to ``arrays`` in batches (to bound memory), its outputs concatenated along axis 0."""
    results = run_batches(fn, Batches(*arrays, batch_size=batch_size), progress=False)
    if not results:
        raise ValueError("predict: no data")
    if isinstance(results[0], list):
        return [np.concatenate([r[k] for r in results]) for k in range(len(results[0]))]
    return np.concatenate(results)


# ------------------------------------------------------------------ small data sets and splits
def make_moons(n=512, noise=0.1, seed=0):
    """Two interleaving half circles (the classic toy set), made with numpy: X of shape (n, 2) and
    labels y in {0., 1.} of shape (n,)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    t_top, t_bottom = rng.uniform(0, np.pi, half), rng.uniform(0, np.pi, n - half)
    top = np.stack([np.cos(t_top), np.sin(t_top)], axis=1)
    bottom = np.stack([1 - np.cos(t_bottom), 0.5 - np.sin(t_bottom)], axis=1)
    X = np.concatenate([top, bottom]) + rng.normal(scale=noise, size=(n, 2))
    y = np.concatenate([np.zeros(half), np.ones(n - half)])
    order = rng.permutation(n)
    return X[order], y[order]


def train_test_split(*arrays, test_fraction=0.2, seed=0):
    """A shuffled split of arrays sharing their first axis: (a_train, a_test, b_train, b_test, ...)."""
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError("train_test_split: arrays must share their first axis")
    order = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    test, train = order[:n_test], order[n_test:]
    out = []
    for a in arrays:
        a = np.asarray(a)
        out += [a[train], a[test]]
    return tuple(out)
