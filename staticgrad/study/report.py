"""The study's output: a terminal table per workload, a summary table for the README, plain-sentence
findings, JSON, and a plot of cumulative time against batches (matplotlib, an optional extra)."""
from __future__ import annotations

import json

import numpy as np

from ..tensor import ROLES
from .modes import cumulative


def save_json(results, path):
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    return path


def _time(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} us"


def _bytes(n):
    if n is None:
        return "n/a"
    return f"{n / 1024:.1f} KB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MB"


def format_table(result) -> str:
    """One workload's measurements as a terminal table."""
    modes = [m for m in ("static", "eager", "torch") if m in result]
    rows = [
        ("build + compile", lambda m: _time(m["build_s"] + m["compile_s"]) if m["build_s"] + m["compile_s"] else "-"),
        ("step (median)", lambda m: _time(m["step_s"])),
        ("step vs static", lambda m: f"{m.get('step_over_static', 1.0):.2f}x"),
        ("step wall-clock", lambda m: _time(m["wall"]["step_s"])),
        ("first step", lambda m: _time(m["first_step_s"])),
        ("peak memory", lambda m: _bytes(m["peak_bytes"])),
        ("nodes per step", lambda m: str(m["nodes_executed"])),
        ("  fwd/bwd/update", lambda m: "/".join(str(m["nodes_by_role"].get(r, 0))
                                                 for r in ROLES)),
        ("last loss", lambda m: f"{m['loss_last']:.6g}"),
    ]
    shapes = " ".join("x".join(map(str, s)) or "()" for s in result["batch_shapes"])
    lines = [f"{result['name']}: {result['parameters']} parameters, {result['batches']} batches of [{shapes}]; "
             f"CPU time unless marked wall-clock",
             f"{'':<18}" + "".join(f"{m:>12}" for m in modes)]
    for label, cell in rows:
        lines.append(f"{label:<18}" + "".join(f"{cell(result[m]):>12}" for m in modes))
    for mode in modes[1:]:
        entry = result[mode]
        n, seen = entry["break_even_batches"], entry["break_even_measured"]
        if n is None:
            lines.append(f"break-even vs {mode}: never ({mode} is at least as fast per step)")
        else:
            lines.append(f"break-even vs {mode}: static is ahead after {n} batches "
                         f"(measured over {result['batches']}: {seen if seen else 'not yet'})")
        lines.append(f"losses {mode} vs static: max |diff| {entry['losses_max_abs_diff']:.1e}")
    if "torch_skipped" in result:
        lines.append(f"torch: skipped ({result['torch_skipped']})")
    twin = result.get("twin")
    if twin:
        if twin["structure"] != "same":
            lines.append(f"twin run: the two runs built different graphs: {twin['structure']}")
        elif twin["first_mismatch"] is None:
            worst = max(twin["max_abs_diff_value"], twin["max_abs_diff_grad"])
            lines.append(f"twin run: {twin['forward_nodes']} node values and {twin['gradients']} gradients agree "
                         f"within {twin['tolerance']:g} (max |diff| {worst:.1e})")
        else:
            m = twin["first_mismatch"]
            lines.append(f"twin run: first difference beyond {twin['tolerance']:g}: the {m['kind']} of node "
                         f"{m['index']} ({m['node']}, made at {m['source']}), max |diff| {m['max_abs_diff']:.2e}")
    return "\n".join(lines)


def summary_table(results, markdown=True) -> str:
    """One row per workload: the ratios a README wants."""
    head = ["workload", "static step", "eager step", "eager/static", "torch step", "torch/static",
            "build+compile", "break-even (batches)", "peak mem static/eager", "nodes static/eager/torch",
            "twin max |diff|"]
    rows = []
    for r in results:
        s, e, t = r["static"], r["eager"], r.get("torch")
        twin = r.get("twin") or {}
        diff = max(twin.get("max_abs_diff_value", 0.0), twin.get("max_abs_diff_grad", 0.0)) if twin else None
        rows.append([r["name"], _time(s["step_s"]), _time(e["step_s"]), f"{e['step_over_static']:.2f}x",
                     _time(t["step_s"]) if t else "-", f"{t['step_over_static']:.2f}x" if t else "-",
                     _time(s["build_s"] + s["compile_s"]),
                     str(e["break_even_batches"]) if e["break_even_batches"] else "never",
                     f"{_bytes(s['peak_bytes'])} / {_bytes(e['peak_bytes'])}",
                     f"{s['nodes_executed']} / {e['nodes_executed']} / {t['nodes_executed'] if t else '-'}",
                     "-" if diff is None else f"{diff:.1e}"])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in [head] + rows)


def plot(results, path):
    """Cumulative time against batches, one panel per workload; None (and nothing written) without
    matplotlib, which is an optional extra."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    results = [results] if isinstance(results, dict) else list(results)
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.4), squeeze=False)
    for ax, r in zip(axes[0], results):
        for mode in ("static", "eager", "torch"):
            if mode in r:
                cum = cumulative(r[mode]) * 1e3
                ax.plot(np.arange(1, len(cum) + 1), cum, label=mode)
        ax.set_title(r["name"], fontsize=9)
        ax.set_xlabel("batches")
        ax.set_ylabel("cumulative time (ms)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def findings(results) -> list:
    """Plain sentences on what the measurements show, for the terminal."""
    out = []
    small = [r for r in results if r["static"]["step_s"] < 2e-3 or r["static"]["nodes_executed"] > 300]
    for r in results:
        e, s = r["eager"], r["static"]
        line = (f"{r['name']}: eager takes {e['step_over_static']:.1f}x the compiled step "
                f"({_time(e['step_s'])} vs {_time(s['step_s'])}; about {_time(max(e['overhead_per_node_s'], 0))} "
                f"more per node)")
        if "torch" in r:
            line += f", PyTorch eager {r['torch']['step_over_static']:.1f}x"
        n = e["break_even_batches"]
        line += (f"; compiling ({_time(s['build_s'] + s['compile_s'])}) pays for itself after {n} batches"
                 if n else "; compiling never pays for itself here")
        out.append(line + ".")
    if small:
        out.append("Where steps are small or graphs long, time goes to dispatching ops one by one in Python, "
                   "which the compiled step does not do; where matmuls are big, kernels dominate and the styles "
                   "converge.")
    ratios = [r["eager"]["peak_bytes"] / r["static"]["peak_bytes"] for r in results if r["static"]["peak_bytes"]]
    if ratios:
        out.append(f"Peak memory of a step is {min(ratios):.1f}x to {max(ratios):.1f}x higher eagerly: the tape "
                   "keeps every intermediate until backward, while the compiled step frees each after its last use.")
    twins = [r["twin"] for r in results if r.get("twin")]
    clean = [t for t in twins if t["structure"] == "same" and t["first_mismatch"] is None]
    if twins and len(clean) == len(twins):
        out.append(f"Twin runs: every node value and gradient agrees within {twins[0]['tolerance']:g} "
                   f"(same kernels, same VJP rules); training losses agree step by step.")
    for r in results:
        t = r.get("twin") or {}
        if t.get("first_mismatch"):
            m = t["first_mismatch"]
            out.append(f"{r['name']}: twin run first differs at the {m['kind']} of {m['node']} ({m['source']}).")
    return out
