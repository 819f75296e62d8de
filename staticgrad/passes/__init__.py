"""Optimization passes and the manager that runs them in order and records what each did.

A pass is a plain function ``run(graph) -> (graph, PassStats)`` whose docstring says what it guarantees.
The pipeline is an ordered list: no tags, no priorities.
"""
from __future__ import annotations

import operator
import time
import types
from collections import Counter

from ..lower.costs import costs
from . import constant_fold, cse, dce, fold, loops, prune, simplify, stabilize
from .stats import PassStats

PASSES = {
    "loops": loops.run,
    "constant_fold": constant_fold.run,
    "prune": prune.run,
    "simplify": simplify.run,
    "stabilize": stabilize.run,
    "cse": cse.run,
    "dce": dce.run,
    "fold": fold.run,
}

# Order matters: simplify exposes the canonical forms stabilize matches (x*-1 as -x); folding again after
# the rewrites catches constants they created; CSE then merges forward and backward twins.
DEFAULT = ["constant_fold", "prune", "simplify", "stabilize", "constant_fold", "cse", "simplify", "cse", "dce",
           "loops", "constant_fold", "simplify", "cse", "fold", "dce"]

# Passes whose result holds nothing more for them to do (CSE merges in graph order, each node's inputs
# already merged; DCE keeps exactly what the outputs need): run again on the graph they left, unchanged
# since, they would change nothing, so the pipeline skips them (the second CSE above, when the simplify
# between found nothing: four seconds of a million-op chain's compile). Any of ours is deterministic: one
# that changed nothing is skipped too until the graph changes (the third simplify above, when the second
# left the graph as it found it and the passes between changed nothing).
IDEMPOTENT = (cse.run, dce.run)


_OURS = frozenset(PASSES.values())


def resolve(passes) -> list:
    """Pass functions for a list of pass functions, names, or pass modules (``staticgrad.passes.cse``)."""
    out = []
    for p in passes:
        if isinstance(p, types.ModuleType) and callable(getattr(p, "run", None)):
            out.append(p.run)
        elif callable(p):
            out.append(p)
        elif p in PASSES:
            out.append(PASSES[p])
        else:
            raise ValueError(f"unknown pass {p!r}; known passes: {', '.join(PASSES)}")
    return out


def pass_name(fn) -> str:
    for name, f in PASSES.items():
        if f is fn:
            return name
    module = getattr(fn, "__module__", "") or ""
    if module.startswith(__name__ + "."):
        return module.rsplit(".", 1)[1]
    return getattr(fn, "__name__", repr(fn))


# A graph of more nodes keeps no copies for the report: the ledger's rows carry no FLOPs or peak bytes
# (each row would keep its own version of the graph until a report asked), and sg.compile keeps no
# unoptimized graph (as for a function linked from a loaded graph).
KEEP_UP_TO = 1_000_000
_NO_COSTS = {"flops": None, "peak_bytes": None, "peak_bytes_unplanned": None}


def _costs(graph):
    try:
        return costs(graph)
    except ValueError:      # shapes that only a real feed can settle: report what is known
        return dict(_NO_COSTS)


class _LazyCosts:
    """FLOPs and peak bytes of one pass's result, worked out when a report first asks (compiling stays
    fast; graphs after passes that changed nothing share one)."""

    def __init__(self, graph):
        self.graph, self.values = graph, None
        if len(graph.nodes) > KEEP_UP_TO:
            self.graph, self.values = None, dict(_NO_COSTS)

    def get(self):
        if self.values is None:
            self.values, self.graph = _costs(self.graph), None
        return self.values


def finish_rows(rows):
    """Rows with their costs filled in (done once, in place), as Function.report() returns them."""
    for row in rows:
        lazy = row.pop("costs", None)
        if lazy is not None:
            row.update(lazy.get())
    return rows


def _changes(before, after) -> dict:
    """Ids of the nodes a pass removed, added and gave another op, for drawing what it did (sg.diff_dot).

    Read off the two graphs' node dicts while both are alive anyway (no {id: op} map of each graph: two
    of those weigh hundreds of megabytes beside a million-node graph)."""
    get = before.get
    return {
        "removed_ids": sorted(before.keys() - after.keys()),
        "added_ids": sorted(after.keys() - before.keys()),
        # (a node both graphs share is the same op: only the others are looked into)
        "replaced_ids": sorted([i for i, n in after.items() if (old := get(i)) is not n and old is not None
                                and old.op != n.op]),
    }


_OP = operator.attrgetter("op")
_NO_CHANGES = {"removed_ids": [], "added_ids": [], "replaced_ids": []}


def run_pipeline(graph, passes, lazy_costs=False):
    """Run ``passes`` in order; returns the final graph and one ledger row per pass.

    With ``lazy_costs`` the rows' FLOPs and peak bytes are left for ``finish_rows`` to work out.
    """
    rows = []
    previous = None
    done = set()           # idempotent passes that have run since the graph last changed
    after = Counter(map(_OP, graph.nodes.values()))
    for fn in resolve(passes):
        # The previous pass's result is this one's input: its op counts are already known.
        before, n_before = after, len(graph.nodes)
        start = time.perf_counter()
        result = (graph, PassStats(pass_name(fn), changed=0)) if fn in done else fn(graph)
        before_graph = graph
        graph, stats = result if isinstance(result, tuple) else (result, None)
        if fn not in done:
            graph, inside = loops.into_bodies(graph, fn)      # (the passes see into loop bodies)
            if inside and stats is not None:
                stats.changed += inside
        seconds = time.perf_counter() - start
        # (one of ours that changed nothing returns its input: a big graph's ops are not counted again)
        unchanged = graph is before_graph and stats is not None and not stats.changed
        changes = _NO_CHANGES if unchanged else _changes(before_graph.nodes, graph.nodes)
        del before_graph, result       # (not alive while the next pass builds a third graph)
        if not unchanged:
            done.clear()
            after = Counter(map(_OP, graph.nodes.values()))
        if fn in IDEMPOTENT or (unchanged and fn in _OURS):
            done.add(fn)
        if previous is None or (stats is not None and stats.changed) or after != before:
            previous = _LazyCosts(graph)
        rows.append({
            "pass": stats.name if stats is not None else pass_name(fn),
            "nodes_before": n_before,
            "nodes_after": len(graph.nodes),
            "seconds": seconds,
            "changed": stats.changed if stats is not None else None,
            "removed": dict(before - after),
            "added": dict(after - before),
            "fixed_point": stats.fixed_point if stats is not None else True,
            "details": dict(stats.details) if stats is not None else {},
            "costs": previous,
            # node ids, for drawing what the pass did (sg.diff_dot); not part of the printed table
            **{key: list(ids) for key, ids in changes.items()},
        })
    return graph, (rows if lazy_costs else finish_rows(rows))


__all__ = ["DEFAULT", "IDEMPOTENT", "KEEP_UP_TO", "PASSES", "PassStats", "resolve", "run_pipeline"]
