"""The RNN case's tables: per sequence length and mode, and the variable-length epoch; as text for the
terminal or as markdown for the README."""
from __future__ import annotations

from .report import _bytes, _time

MODES = ("scan", "unrolled", "eager", "torch")
MODE_NAMES = {"scan": "static scan", "unrolled": "static unrolled", "eager": "eager loop", "torch": "torch eager loop"}
VARIANTS = {"padded": "padded + mask, one plan", "per_length": "static scan, a plan per length",
            "unrolled": "unrolled, a graph per length", "eager": "eager loop"}


def _one_off(entry, key):
    text = _time(entry[key]) if entry.get(key) else "-"
    return text + (" (once)" if entry.get("shared_compile") and entry.get(key) else "")


def _length_row(steps, name, entry):
    if entry.get("timed_out"):
        limit = f"> {entry['timeout_s']:g} s"
        return [f"{steps:,}", MODE_NAMES[name], limit, limit, "-", "-", "-", "-", "-", "-"]
    return [f"{steps:,}", MODE_NAMES[name], _one_off(entry, "build_s"), _one_off(entry, "compile_s"),
            _time(entry["first_call_s"]), _time(entry["step_s"]), f"{entry['step_over_scan']:.2f}x",
            _bytes(entry["peak_bytes"]) + (" (saved)" if name == "torch" else ""), f"{entry['peak_over_scan']:.2f}x",
            f"{entry['max_abs_diff']:.1e}"]


LENGTH_HEAD = ["steps", "mode", "build", "compile", "first call", "call (median)", "call / scan", "peak memory",
               "memory / scan", "max |diff|"]
EPOCH_HEAD = ["variant", "graphs compiled", "plans built", "steps run", "build + compile", "calls that built a plan",
              "all calls", "epoch total", "total / per-length", "max |diff|"]


def length_rows(result):
    return [_length_row(entry["steps"], name, entry["modes"][name])
            for entry in result["lengths"] for name in MODES if name in entry["modes"]]


def epoch_rows(result):
    rows = []
    for name, v in result["epoch"]["variants"].items():
        rows.append([VARIANTS[name], str(v["compiles"]), str(v["plans"]), f"{v['steps_run']:,}",
                     _time(v["build_compile_s"]) if v["build_compile_s"] else "-",
                     _time(v["planning_calls_s"]) if v["plans"] else "-", _time(v["calls_s"]), _time(v["total_s"]),
                     f"{v['total_over_per_length']:.2f}x", f"{v['max_abs_diff']:.1e}"])
    return rows


def table(head, rows, markdown=False) -> str:
    if markdown:
        def line(cells):
            return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
        return "\n".join([line(head), "|" + "|".join("---" for _ in head) + "|"] + [line(row) for row in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip() for row in [head] + rows)


def describe(result) -> str:
    c, e = result["config"], result["epoch"]
    return (f"tanh RNN {c['inputs']}->{c['hidden']}, batch {c['batch']}; each call gives the loss and the gradients "
            f"of Wx, Wh, b and v; loss {result['loss']}; CPU time ({result['clock']}); max |diff|: loss and "
            f"gradients against the static scan's; peak memory: tracemalloc's peak of a call (numpy) plus the "
            f"plan's workspace (static), for torch the tensors autograd saves for backward (saved). "
            f"Variable-length epoch: {e['batches']} batches of lengths "
            f"{e['min_steps']}..{e['max_steps']} ({e['distinct_lengths']} distinct), padded to {e['padded_to']}.")


def format_rnn(result, markdown=False) -> str:
    """Both tables, with what they measure."""
    lines = [describe(result), "", table(LENGTH_HEAD, length_rows(result), markdown), "",
             table(EPOCH_HEAD, epoch_rows(result), markdown)]
    if "torch_skipped" in result:
        lines.append(f"torch: skipped ({result['torch_skipped']})")
    return "\n".join(lines)


def rnn_findings(result) -> list:
    """Plain sentences: how one-off costs and calls grow with the length, and what the epoch shows."""
    out = []
    scan = result["lengths"][0]["modes"]["scan"]
    costs = []
    for entry in result["lengths"]:
        u = entry["modes"]["unrolled"]
        costs.append(f"> {u['timeout_s']:g} s" if u.get("timed_out") else
                     _time(u["build_s"] + u["compile_s"] + u["first_call_s"]))
    out.append(f"Unrolled build + compile + first call at {', '.join(str(e['steps']) for e in result['lengths'])} "
               f"steps: {', '.join(costs)}; the scan's build + compile ({_time(scan['build_s'] + scan['compile_s'])}) "
               "is paid once, then each new length costs its first call: "
               + ", ".join(_time(e["modes"]["scan"]["first_call_s"]) for e in result["lengths"]) + ".")
    for entry in result["lengths"]:
        ratios = [f"{MODE_NAMES[n]} {entry['modes'][n]['step_over_scan']:.2f}x" for n in MODES[1:]
                  if "step_over_scan" in entry["modes"].get(n, {})]
        out.append(f"{entry['steps']:,} steps: a call takes {_time(entry['modes']['scan']['step_s'])} as a static "
                   f"scan; " + ", ".join(ratios) + ".")
    v = result["epoch"]["variants"]
    out.append(f"Epoch: padding runs {v['padded']['steps_run']:,} steps in one plan "
               f"({v['padded']['total_over_per_length']:.2f}x the per-length total), one plan per length runs "
               f"{v['per_length']['steps_run']:,} steps in {v['per_length']['plans']} plans.")
    return out
