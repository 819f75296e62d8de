"""Find the pass that breaks a result."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..graph import Graph, ancestors
from ..passes import DEFAULT, pass_name, resolve
from ..tensor import Tensor


def _evaluate(graph, feeds):
    from ..compiler import link
    fn = link(graph, single=False)
    return [np.asarray(v) for v in fn(dict(feeds))]


def _broken(reference, values, rtol, atol):
    for ref, val in zip(reference, values):
        if ref.shape != val.shape or ref.dtype != val.dtype:
            return True
        if ref.dtype.kind not in "fc":
            if not np.array_equal(ref, val):        # integers and bools have no rounding to tolerate
                return True
            continue
        finite = np.isfinite(ref)
        if not np.all(np.isfinite(val[finite])) or not np.allclose(val[finite], ref[finite], rtol=rtol, atol=atol):
            return True
        # Non-finite results stay as they were (the same infinity, NaN still NaN), except that an overflow
        # may become the finite value the math has: that is what stabilize is for.
        r, v = ref[~finite], val[~finite]
        if not np.all((r == v) | (np.isnan(r) & np.isnan(v)) | (np.isinf(r) & np.isfinite(v))):
            return True
    return False


def bisect(outputs: Tensor | Sequence[Tensor], feeds: dict, passes: Sequence | None = None, rtol: float = 1e-7,
           atol: float = 1e-9) -> str | None:
    """Run the pipeline one pass at a time on ``feeds`` (a dict placeholder -> array) and return the name
    of the first pass after which any output differs from the unoptimized graph's: in shape or dtype,
    beyond the tolerance where it was finite, at all where it was an integer, bool, NaN or infinity (an
    infinity may only become finite, as stabilize makes overflows), or that raises, or after which the graph
    no longer runs. None when every pass keeps the results.
    """
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    placeholders = [t for _, t in sorted(ancestors(outs).items()) if t.op == "placeholder"]
    graph = Graph.from_tensors(outs, inputs=placeholders)
    graph.assign_roles()
    reference = _evaluate(graph, feeds)
    pipeline = DEFAULT if passes is None else passes
    for fn in resolve(pipeline):
        try:
            result = fn(graph)
        except Exception:       # a pass that fails is the first broken one, as much as one that breaks values
            return pass_name(fn)
        graph = result[0] if isinstance(result, tuple) else result
        try:
            values = _evaluate(graph, feeds)
        except Exception:       # a graph that no longer runs is as broken as one that gives wrong values
            values = None
        if values is None or _broken(reference, values, rtol, atol):
            return result[1].name if isinstance(result, tuple) and result[1] is not None else pass_name(fn)
    return None
