"""The table rows of the convolutional workload (issue 20, V1): its goals against the peers.

Standard library only (the CLI imports this to print its table).
"""
from __future__ import annotations

AHEAD_OF = ("torch", "jax.jit")     # issue 20: staticgrad faster than these
NEAR = ("tensorflow", 1.5)          # and within this factor of TF1's time


def cnn_goal_lines(doc) -> list:
    """Issue 20: staticgrad ahead of torch eager and jax.jit on V1, and within 1.5x of TF1."""
    entries = [e for e in doc["workloads"] if e.get("kind") == "cnn"]
    if not entries:
        return []

    def mark(ok):
        return "met" if ok else "NOT met"
    out = ["", "Issue 20 goals:"]
    for entry in entries:
        results = entry["results"]
        ours = results.get("staticgrad", {})
        if ours.get("status") != "ok":
            out.append(f"  {entry['name']}: staticgrad {ours.get('status')}: {ours.get('reason', '')}"[:200])
            continue
        ratio = ours["ratio"]
        for peer in AHEAD_OF:
            theirs = results.get(peer, {})
            if theirs.get("status") != "ok":
                out.append(f"  {entry['name']}: ahead of {peer}: {peer} not measured ({_status(theirs)})")
                continue
            out.append(f"  {entry['name']}: staticgrad {ratio:.2f} x hand numpy, {peer} {theirs['ratio']:.2f} "
                       f"(goal: ahead of {peer}): {mark(ratio < theirs['ratio'])}")
        peer, factor = NEAR
        theirs = results.get(peer, {})
        if theirs.get("status") != "ok":
            out.append(f"  {entry['name']}: within {factor:g}x of {peer}: {peer} not measured ({_status(theirs)})")
            continue
        # times, not ratios: each ratio's hand numpy ran in its own process
        share = ours["median_s"] / theirs["median_s"]
        out.append(f"  {entry['name']}: staticgrad {share:.2f} x {peer}'s time ({peer} {theirs['ratio']:.2f} x hand "
                   f"numpy; goal: within {factor:g}x): {mark(share <= factor)}")
    return out


def _status(result) -> str:
    return result.get("status", "not in this run")
