"""The table rows of the convolutional workload (issue 20, V1): its goals against the peers.

Standard library only (the CLI imports this to print its table).
"""
from __future__ import annotations

AHEAD_OF = ("torch", "jax.jit")     # issue 20: staticgrad faster than these
NEAR = ("tensorflow", 1.5)          # and within this factor of TF1's time


def cnn_goal_lines(doc) -> list:
    """Issue 20: staticgrad ahead of torch eager and jax.jit on V1, and within 1.5x of TF1.

    Compared by median time per call, not by ratio: each ratio's hand numpy ran in its peer's own process,
    and there V1's fresh arrays cost what that process's allocator makes them cost (first touches of
    pages the allocator had given back: 12 to 31 ms for the same step in the processes of one run)."""
    entries = [e for e in doc["workloads"] if e.get("kind") == "cnn"]
    if not entries:
        return []

    def mark(ok):
        return "met" if ok else "NOT met"
    out = ["", "Issue 20 goals (median times per call):"]
    for entry in entries:
        results = entry["results"]
        ours = results.get("staticgrad", {})
        if ours.get("status") != "ok":
            out.append(f"  {entry['name']}: staticgrad {ours.get('status')}: {ours.get('reason', '')}"[:200])
            continue
        mine = ours["median_s"]
        for peer in AHEAD_OF:
            theirs = results.get(peer, {})
            if theirs.get("status") != "ok":
                out.append(f"  {entry['name']}: ahead of {peer}: {peer} not measured ({_status(theirs)})")
                continue
            out.append(f"  {entry['name']}: staticgrad {_ms(mine)}, {peer} {_ms(theirs['median_s'])} "
                       f"(goal: ahead of {peer}): {mark(mine < theirs['median_s'])}")
        peer, factor = NEAR
        theirs = results.get(peer, {})
        if theirs.get("status") != "ok":
            out.append(f"  {entry['name']}: within {factor:g}x of {peer}: {peer} not measured ({_status(theirs)})")
            continue
        share = mine / theirs["median_s"]
        out.append(f"  {entry['name']}: staticgrad {_ms(mine)} = {share:.2f} x {peer}'s {_ms(theirs['median_s'])} "
                   f"(goal: within {factor:g}x): {mark(share <= factor)}")
    return out


def _ms(seconds) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _status(result) -> str:
    return result.get("status", "not in this run")
