"""Checkpointing a scan: its stacked values that only a reverse loop reads are not kept whole.

With ``checkpoint=k`` the forward loop keeps the carry at the start of every k-th step; a stacked value
read only row by row by the backward pass (a carry at the start of each step, a value the body's VJP
reads) becomes a :class:`LazyRows`: asking for row t reruns the forward body over t's segment of k steps,
from its checkpoint, keeping that segment's rows. The backward pass asks for the rows last to first, so
each segment is recomputed once: memory T/k carries plus k rows, for one more forward step per step.
"""
from __future__ import annotations

import numpy as np


class Segments:
    """The checkpoints of one call of a scan, and the rows of the segment computed last."""

    def __init__(self, run, C, reverse, length, k, lazy, xs, caps):
        self.run, self.C, self.reverse, self.length, self.k = run, C, reverse, length, k
        self.lazy = lazy                    # {value index: (body output position, row shape, dtype)}
        self.xs, self.caps = xs, caps
        self.checkpoints = {}
        self.segment = None
        self.rows = {j: np.empty((k,) + tuple(shape), dtype) for j, (_, shape, dtype) in lazy.items()}

    def step_of(self, e):
        """The step (row) computed ``e``-th in the loop's order."""
        return self.length - 1 - e if self.reverse else e

    def keep(self, e, carry):
        if e % self.k == 0:
            self.checkpoints[e] = carry

    def row(self, j, t):
        e = self.length - 1 - t if self.reverse else t
        s = e - e % self.k
        if s != self.segment:
            self._recompute(s)
        # (a copy: a reader may still hold row t when another loop's rows, recomputed from these, make this
        # one recompute a different segment into the same buffer, as the second derivative does)
        return self.rows[j][e - s].copy()

    def _recompute(self, s):
        carry = self.checkpoints[s]
        for e in range(s, min(s + self.k, self.length)):
            t = self.step_of(e)
            outs, _ = self.run(*carry, *[x[t] for x in self.xs], *self.caps)
            for j, (position, _, _) in self.lazy.items():
                self.rows[j][e - s] = outs[position]
            carry = outs[:self.C]
        self.segment = s


class LazyRows:
    """A stacked value of a checkpointed scan, row by row (``rows[t]``), as a reverse loop reads it."""

    def __init__(self, segments, j, shape):
        self.segments, self.j, self.shape = segments, j, tuple(shape)

    def __getitem__(self, t):
        return self.segments.row(self.j, t)

    def __len__(self):
        return self.shape[0]
