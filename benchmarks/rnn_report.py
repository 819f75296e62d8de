"""The table rows of the RNN workloads (issue 19): peak memory per call, and the issue's goals.

Standard library only (the CLI imports this to print its table).
"""
from __future__ import annotations

STAGES = ("build", "grad", "compile", "first_call")
CHECKPOINT_MEMORY_GOAL = 0.25       # checkpointed peak over the stored-everything peak
COMPILE_GOAL_S = 1.0                # staticgrad's one-time costs, summed


def format_bytes(n) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def hand_numpy(entry, key) -> dict:
    """The numpy reference's figures under ``key`` ("numpy": timing, "numpy_memory") for a workload's row:
    from staticgrad's process, or when staticgrad did not get that far from the first peer's that did."""
    results = entry["results"]
    for name in ["staticgrad"] + [n for n in results if n != "staticgrad"]:
        if (results.get(name) or {}).get(key):
            return results[name][key]
    return {}


def _memory_cell(result) -> str:
    if result is None:
        return ""
    memory = result.get("memory")
    if not memory or memory.get("peak_bytes") is None:
        return "-"
    # rss: a lower bound; xla: XLA's own account (see benchmarks/memory.py)
    mark = {"rss": " (rss)", "reported": " (xla)"}.get(memory.get("peak_source"), "")
    return format_bytes(memory["peak_bytes"]) + mark


def memory_lines(doc) -> list:
    """Peak memory of one call for each workload that measured it, hand numpy first."""
    entries = [e for e in doc["workloads"] if any(r.get("memory") for r in e["results"].values())]
    if not entries:
        return []
    impls = []
    for entry in entries:
        impls += [n for n, r in entry["results"].items() if n not in impls and r.get("memory")]
    cols = [max(len(n), 12) for n in impls]
    lines = ["", "Peak memory of one call (tracemalloc's peak for numpy-based code plus the workspace staticgrad "
             "keeps;", "(xla): XLA's buffer assignment, temporaries and outputs; (rss): the rise of resident memory, "
             "a lower bound; see benchmarks/memory.py):",
             f"{'workload':<10} {'hand numpy':>12} " + " ".join(f"{n:>{w}}" for n, w in zip(impls, cols))]
    for entry in entries:
        ref = hand_numpy(entry, "numpy_memory")
        cells = [f"{_memory_cell(entry['results'].get(n)):>{w}}" for n, w in zip(impls, cols)]
        lines.append(f"{entry['name']:<10} {format_bytes(ref.get('peak_bytes')):>12} " + " ".join(cells))
    return lines


BACKENDS = ("staticgrad", "staticgrad[numba]")     # the variants judged against the goals: each backend


def rnn_goal_lines(doc) -> list:
    """Issue 19: staticgrad ahead of hand-written numpy and of every peer on R1 and R2, its one-time costs
    under a second, and R2 with checkpoint=32 at under a quarter of the stored-everything peak memory.
    Judged for each backend that ran (the numba backend's lines name it)."""
    entries = [e for e in doc["workloads"] if e.get("kind") == "rnn"]
    if not entries:
        return []

    def mark(ok):
        return "met" if ok else "NOT met"
    out = ["", "Issue 19 goals:"]
    for entry in entries:
        results = entry["results"]
        for backend in [b for b in BACKENDS if b == "staticgrad" or b in results]:
            name = entry["name"] if backend == "staticgrad" else f"{entry['name']} {backend}"
            ours = results.get(backend, {})
            if ours.get("status") != "ok":
                out.append(f"  {name}: {backend} {ours.get('status')}: {ours.get('reason', '')}"[:200])
                continue
            out.append(_speed_line(name, ours, results, mark))
            costs = ours.get("costs", {})
            once = sum(costs.get(k) or 0.0 for k in STAGES)
            out.append(f"  {name} one-time costs (build + grad + compile + first call): {once:.3g} s "
                       f"(goal < {COMPILE_GOAL_S:g} s): {mark(once < COMPILE_GOAL_S)}")
        out += _checkpoint_lines(entry, mark)
    return out


def _speed_line(name, ours, results, mark) -> str:
    """Ahead of the hand-written code and of every peer, by ratio and by time: each peer's ratio is to the
    hand-written code in its own process, whose page faults differ from process to process, so a ratio
    alone can flatter one side (in staticgrad's process the hand-written loop has run up to 30% slower)."""
    peers = {n: r for n, r in results.items() if not n.startswith("staticgrad") and r.get("status") == "ok"}
    if not peers:
        return f"  {name}: {ours['ratio']:.2f} x hand numpy, no peer measured: {mark(ours['ratio'] < 1.0)}"
    by_ratio = min(peers, key=lambda n: peers[n]["ratio"])
    by_time = min(peers, key=lambda n: peers[n]["median_s"])
    ahead = ours["ratio"] < 1.0 and ours["ratio"] < peers[by_ratio]["ratio"] \
        and ours["median_s"] < peers[by_time]["median_s"]
    return (f"  {name}: {ours['ratio']:.2f} x hand numpy, best peer {by_ratio} {peers[by_ratio]['ratio']:.2f}; "
            f"{ours['median_s'] * 1e3:.3g} ms a call, fastest peer {by_time} "
            f"{peers[by_time]['median_s'] * 1e3:.3g} ms (goal: below 1 and every peer, by ratio and by time): "
            f"{mark(ahead)}")


def without_checkpoint(name) -> str:
    """The stored-everything run a checkpointed variant is compared with: the same name less its
    checkpoint option (staticgrad[loss-in-carry,checkpoint=32] -> staticgrad[loss-in-carry])."""
    if "[" not in name:
        return name
    base, options = name[:-1].split("[", 1)
    kept = [o for o in options.split(",") if not o.startswith("checkpoint=")]
    return f"{base}[{','.join(kept)}]" if kept else base


def _peak(result):
    return ((result or {}).get("memory") or {}).get("peak_bytes")


def _checkpoint_lines(entry, mark) -> list:
    """Each checkpointed variant's peak memory over its stored-everything counterpart's (the goal) and
    over plain staticgrad's (the workload as the peers write it)."""
    results, out = entry["results"], []
    for name, result in results.items():
        if "checkpoint=" not in name:
            continue
        counterpart = without_checkpoint(name)
        peak, stored = _peak(result), _peak(results.get(counterpart))
        if result.get("status") != "ok" or not peak or not stored:
            out.append(f"  {entry['name']} {name}: {result.get('status')}: {result.get('reason', 'no memory figure')}")
            continue
        share = peak / stored
        line = (f"  {entry['name']} {name}: peak memory {format_bytes(peak)} vs {format_bytes(stored)} for "
                f"{counterpart} = {share:.2f} (goal < {CHECKPOINT_MEMORY_GOAL:g}): "
                f"{mark(share < CHECKPOINT_MEMORY_GOAL)}; time {result['ratio']:.2f} x hand numpy")
        plain = _peak(results.get("staticgrad"))
        if counterpart != "staticgrad" and plain:
            line += f"; {peak / plain:.2f} of staticgrad's {format_bytes(plain)}"
        out.append(line)
    return out
