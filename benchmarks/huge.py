"""Huge graphs (issue 18): what building, differentiating, compiling and first running a chain of up to a
million ops costs, in time and peak memory.

The chain repeats ``x = tanh(x * c + d)`` (3 forward op nodes a cycle) on 10 float64 numbers from a
placeholder x0, with c and d parameters of shape (10,); the loss is the sum of the final x, and its
gradients are taken with respect to x0, c and d (c and d fork into every cycle, so each of their
gradients sums one term a cycle). ``--ops N`` asks for N forward op nodes (rounded up to whole cycles):
100,002 and 1,000,002 by default.

Each size runs in a fresh process of its own, so that its peak resident memory (``ru_maxrss``) is its
own: the process prints one line per stage as it finishes (seconds on both clocks, peak RSS so far),
then a result line. The parent prints the table and writes JSON. At the end the outputs are compared
with a plain numpy loop doing the same sweep by hand (values and the three gradients).

Graphs of 200,000 forward op nodes and more are rolled (``staticgrad.loops.reroll``): the repeated cycle is held
as one scan. ``--unrolled`` turns that off, to measure straight-line code at any size.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.huge
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.huge --ops 100002 --timeout 600
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.huge --ops 1000002 --unrolled
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

SIZE = 10
CYCLE = ("mul c", "add d", "tanh")
DEFAULT_OPS = (100_002, 1_000_002)
STAGES = ("build", "grad", "compile", "first_call", "second_call")
RTOL = 1e-9
SEED = 20250318


def cycles_for(ops: int) -> int:
    return -(-ops // len(CYCLE))


def make_data():
    rng = np.random.default_rng(SEED)
    return {"x": rng.uniform(-0.5, 0.5, SIZE), "c": rng.uniform(0.5, 1.0, SIZE), "d": rng.uniform(-0.1, 0.1, SIZE)}


def reference(data, cycles):
    """[loss, d loss/d x0, d loss/d c, d loss/d d] by a plain numpy loop: forward keeping every x, then
    the reverse sweep by hand."""
    c, d = data["c"], data["d"]
    xs = [data["x"]]
    for _ in range(cycles):
        xs.append(np.tanh(xs[-1] * c + d))
    g = np.ones(SIZE)
    gc_, gd = np.zeros(SIZE), np.zeros(SIZE)
    for k in range(cycles, 0, -1):
        g = g * (1.0 - xs[k] * xs[k])      # through tanh
        gd += g
        gc_ += g * xs[k - 1]
        g = g * c                           # into the previous x
    return [xs[-1].sum(), g, gc_, gd]


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024     # (kilobytes on Linux)


def _report(kind, payload):
    print(f"@@{kind} {json.dumps(payload)}", flush=True)


def child(ops: int, unrolled: bool = False) -> dict:
    """Run every stage for ``ops`` forward op nodes in this process; print a line per stage."""
    import staticgrad as sg
    if unrolled:
        sg.loops.reroll.MIN_NODES = sys.maxsize
    sys.setrecursionlimit(10_000)     # (nothing may need more: a million-node graph must not recurse)
    from .workloads import Stopwatch, outputs_close
    data, cycles = make_data(), cycles_for(ops)
    sw = Stopwatch()

    def lap(name, **extra):
        sw.lap(name)
        cpu, wall = sw.laps[name]
        _report("stage", {"stage": name, "cpu_s": cpu, "wall_s": wall, "peak_rss": peak_rss_bytes(), **extra})

    x0 = sg.placeholder((SIZE,), name="x0", requires_grad=True)
    c, d = sg.parameter(data["c"], name="c"), sg.parameter(data["d"], name="d")
    x = x0
    for _ in range(cycles):
        x = sg.tanh(x * c + d)
    loss = sg.sum(x)
    lap("build", forward_ops=cycles * len(CYCLE))
    grads = sg.grad(loss, [x0, c, d])
    lap("grad")
    fn = sg.compile([loss] + grads, inputs=[x0])
    lap("compile", nodes=len(fn.ir.nodes))
    fn(data["x"])
    lap("first_call", program=fn.program.kind)
    got = fn(data["x"])
    lap("second_call")
    sw.skip()
    ok, err = outputs_close(got, reference(data, cycles), RTOL)
    result = {"ops": ops, "forward_ops": cycles * len(CYCLE), "cycles": cycles, "ok": ok, "max_rel_err": err,
              "peak_rss": peak_rss_bytes(), "nodes": len(fn.ir.nodes), "program": fn.program.kind,
              "rolled": "scan" in fn.ir.op_counts(),
              "stats": fn.program.stats}
    _report("result", result)
    return result


def run_one(ops, timeout, env=None, unrolled=False) -> dict:
    """Run ``child(ops)`` in a fresh process; its stages and result (or how far it got in ``timeout``)."""
    cmd = [sys.executable, "-m", "benchmarks.huge", "--child", str(ops)] + (["--unrolled"] if unrolled else [])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
        status = "ok" if proc.returncode == 0 else "error"
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        status = "timeout"
    entry = {"ops": ops, "status": status, "wall_s": time.perf_counter() - started, "stages": {}}
    for line in out.splitlines():
        if line.startswith("@@stage "):
            stage = json.loads(line[8:])
            entry["stages"][stage.pop("stage")] = stage
        elif line.startswith("@@result "):
            entry["result"] = json.loads(line[9:])
    if status == "ok" and not entry.get("result", {}).get("ok"):
        status = entry["status"] = "mismatch"
    if status != "ok":
        entry["stderr_tail"] = err.strip().splitlines()[-8:]
    return entry


def format_table(entries, clock="cpu") -> str:
    key = f"{clock}_s"
    head = (f"{'forward ops':>12} " + " ".join(f"{s:>11}" for s in STAGES)
            + f" {'first 4':>8} {'peak RSS':>9}  graph     status")
    lines = [f"Huge chain x = tanh(x*c + d) on {SIZE} floats: seconds per stage ({clock} clock), peak RSS", head]
    for e in entries:
        stages = e["stages"]
        cells = [f"{stages[s][key]:>11.2f}" if s in stages else f"{'-':>11}" for s in STAGES]
        first4 = sum(stages[s][key] for s in STAGES[:4] if s in stages)
        rss = max((s["peak_rss"] for s in stages.values()), default=0) / 2**30
        ops = e.get("result", {}).get("forward_ops", e["ops"])
        graph = {True: "rolled", False: "unrolled"}.get(e.get("result", {}).get("rolled"), "-")
        lines.append(f"{ops:>12,} " + " ".join(cells) + f" {first4:>8.2f} {rss:>7.2f} GB  {graph:<9} {e['status']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.huge", description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(map(str, DEFAULT_OPS)), help="forward op counts, comma-separated")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one size may take in all")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="what the table shows: process CPU time (the machine is shared) or wall time")
    parser.add_argument("--out", default=None, help="JSON file (default: benchmarks/results/huge-<date>.json)")
    parser.add_argument("--unrolled", action="store_true",
                        help="keep every graph straight-line (no rolling into a scan, whatever its size)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.unrolled)
        return 0
    from .cli import ROOT, bench_env, machine_info
    entries = []
    for ops in (int(n) for n in args.ops.split(",")):
        print(f"[huge] {ops:,} forward ops ...", file=sys.stderr, flush=True)
        entries.append(run_one(ops, args.timeout, env=bench_env(1), unrolled=args.unrolled))
        print(format_table(entries[-1:], args.clock).splitlines()[-1], file=sys.stderr, flush=True)
    print(format_table(entries, args.clock))
    doc = {"schema": 1, "command": " ".join(sys.argv), "machine": machine_info(), "entries": entries}
    path = args.out or os.path.join(ROOT, "benchmarks", "results", time.strftime("huge-%Y%m%d-%H%M%S.json"))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"\nJSON: {path}")
    return 0 if all(e["status"] == "ok" for e in entries) else 1


if __name__ == "__main__":
    sys.exit(main())
