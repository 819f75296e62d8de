"""``staticgrad bench``: run benchmarks/ (staticgrad and peers against hand-written numpy), print the
ratios, write JSON.

The workloads, the numpy references, the peers and the measuring protocol live in the repository's
benchmarks/ folder; this module finds it, sets up the environment, runs staticgrad in this process and
each peer in its own process of the peers virtual environment (.venv-peers: torch, jax, pytensor are
never dependencies of the package; without it, of this interpreter, for the peers installed here), then
reports. Only the standard library is imported at module level: the CLI imports this module to build its
parser.
"""
from __future__ import annotations

import datetime
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

from .cnn_report import cnn_goal_lines
from .rnn_report import hand_numpy, memory_lines, rnn_goal_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Set in CI or tests to pin a slow portable kernel; a benchmark must measure the machine's real one.
SCRUBBED_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
CHILD_MARK = "STATICGRAD_BENCH_CHILD"
WORKLOAD_NAMES = ("A", "B", "C", "D", "E")
RNN_NAMES = ("R1", "R2")              # issue 19: loops (sg.scan) and peak memory
CNN_NAMES = ("V1",)                   # issue 20: convolutions and pooling
PEER_NAMES = ("torch", "torch.compile", "jax.jit", "pytensor", "staticgrad[numba]", "tensorflow")
# Other names people write for the same peers (issue 4 says "pytensor.function", "torch eager").
PEER_ALIASES = {"jax": "jax.jit", "pytensor.function": "pytensor", "torch.eager": "torch", "torch-eager": "torch",
                "torch_eager": "torch", "numba": "staticgrad[numba]", "staticgrad-numba": "staticgrad[numba]",
                "tf": "tensorflow", "tf1": "tensorflow", "tf.compat.v1": "tensorflow"}
BIG_OPS = 20_000          # peers on chains at least this long get the shorter timeout
DEFAULT_PEER_PYTHON = os.path.join(ROOT, ".venv-peers", "bin", "python")
# The module each peer needs, to skip at once a peer this interpreter lacks (no .venv-peers).
PEER_MODULES = {"torch": "torch", "torch.compile": "torch", "jax.jit": "jax", "pytensor": "pytensor",
                "staticgrad[numba]": "numba", "tensorflow": "tensorflow"}
PEERS_SETUP = ("python -m venv .venv-peers && .venv-peers/bin/pip install -e . torch==2.13.0 jax jaxlib "
               "pytensor threadpoolctl numba tensorflow-cpu")
GOALS = {"A": 0.80, "B": 0.95, "C": 0.80, "D": 0.50}   # issue 4: ratio to hand-written numpy


@dataclass
class Settings:
    workloads: list = field(default_factory=lambda: list(WORKLOAD_NAMES + RNN_NAMES + CNN_NAMES))
    compile_ops: list = field(default_factory=lambda: [1000, 100000])
    peers: list = field(default_factory=lambda: list(PEER_NAMES))
    rounds: int = 25
    target_s: float = 0.05          # length of one round of one implementation
    budget_s: float = 8.0           # timing time per implementation pair (fewer rounds when slow)
    peer_timeout_s: float = 600.0
    big_timeout_s: float = 180.0    # for peers on chains of BIG_OPS ops or more
    threads: int = 1
    clock: str = "cpu"              # "cpu": process CPU time (single-threaded runs), "wall": perf_counter
    peer_python: str = DEFAULT_PEER_PYTHON
    quick: bool = False


def quick_settings(**overrides) -> Settings:
    """A look in a few minutes: fewer rounds, no 100,000-op graph, only the peers that compile in seconds."""
    base = Settings(compile_ops=[1000], peers=["torch", "jax.jit"], rounds=7, target_s=0.02, budget_s=2.0,
                    peer_timeout_s=60.0, big_timeout_s=60.0, quick=True)
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


# ------------------------------------------------------------------ command line
def add_arguments(parser):
    """The options of ``staticgrad bench`` and ``python -m benchmarks`` (one definition for both)."""
    parser.add_argument("--quick", action="store_true",
                        help="few rounds, no 100,000-op graph, peers torch and jax.jit only, 60 s peer "
                             "timeout (a look, not a result)")
    parser.add_argument("--only", default=None, metavar="A,B,...", type=workload_names,
                        help="workloads to run: A B C D E R1 R2 V1 and chainN (N ops), comma-separated")
    parser.add_argument("--peers", default=None, metavar="NAMES",
                        help=f"peers to run, comma-separated, or 'none' (default: {','.join(PEER_NAMES)})")
    parser.add_argument("--peer-python", default=None, help="python of the peers environment "
                        "(default: .venv-peers/bin/python in the repository)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds per measurement")
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS/OpenMP/torch/XLA threads for every implementation (0: library defaults)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default=None,
                        help="what a round's time is read from: process CPU time (default with --threads 1: "
                             "on a shared machine wall time mostly measures the other tenants) or wall time "
                             "(default otherwise); both are kept in the JSON")
    parser.add_argument("--peer-timeout", type=float, default=None, help="seconds one peer may take")
    parser.add_argument("--out", "--json", "--output", dest="out", default=None,
                        help="JSON file or folder (default: benchmarks/results/)")
    parser.add_argument("--huge", action="store_true",
                        help="instead: the huge-graph measurement (benchmarks/huge.py: a 100,002- and a "
                             "1,000,002-op chain, build/grad/compile/first call seconds and peak RSS)")
    parser.add_argument("--distributed", action="store_true",
                        help="instead: data-parallel training on a local Dask cluster (benchmarks/distributed.py: "
                             "a 784-1024-1024-10 MLP step on batch 4,096, 1 process vs 2 workers; needs "
                             "dask[distributed]; --rounds applies)")
    return parser


def workload_names(text) -> list:
    """The names of ``--only``, each checked by the benchmarks' own lookup while the command line is
    parsed: a typo is a usage error before any workload runs (or the benchmark process is started)."""
    import argparse
    workloads = _benchmarks(only="workloads").workloads
    # a and r1 name A and R1
    names = [n.strip().upper() if n.strip().upper() in workloads.WORKLOADS else n.strip()
             for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one workload: A B C D E R1 R2 V1 or chainN")
    for name in names:
        try:
            workloads.get(name)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return names


def settings_from_args(args) -> Settings:
    s = quick_settings() if args.quick else Settings()
    if args.only:
        names = args.only if isinstance(args.only, list) else workload_names(args.only)
        s.workloads = [n for n in names if not n.startswith("chain")]
        s.compile_ops = [int(n[5:]) for n in names if n.startswith("chain")]
    if args.peers is not None:
        s.peers = [] if args.peers.strip() in ("", "none") else [
            PEER_ALIASES.get(p.strip().lower(), p.strip()) for p in args.peers.split(",")]
        unknown = [p for p in s.peers if p not in PEER_NAMES]
        if unknown:
            raise SystemExit(f"staticgrad bench: unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEER_NAMES)}")
    if args.peer_python:
        s.peer_python = args.peer_python
    if args.rounds:
        s.rounds = args.rounds
    if args.peer_timeout:
        s.peer_timeout_s = s.big_timeout_s = args.peer_timeout
    s.threads = args.threads
    s.clock = args.clock or ("cpu" if args.threads == 1 else "wall")
    return s


def bench_env(threads, base=None) -> dict:
    """The environment benchmarks run in: no pinned OpenBLAS core, the thread counts fixed for everyone."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in SCRUBBED_VARS}
    if threads:
        for var in THREAD_VARS:
            env[var] = str(threads)
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        if threads == 1:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    env[CHILD_MARK] = "1"
    return env


def run_from_args(args, relaunch=None) -> int:
    """Run the benchmarks for parsed ``args``.

    Thread counts and OpenBLAS's core choice are read when numpy loads, which has already happened in
    this process; so unless this is already the benchmark's own process, ``relaunch`` (the command
    line that got here) is run again in the benchmark environment and its exit status returned.
    """
    if getattr(args, "huge", False):
        # (each size runs in a fresh process of the benchmark environment: no relaunch needed)
        from .huge import main as huge_main
        out = args.out if args.out is None or args.out.endswith(".json") else os.path.join(
            args.out, time.strftime("huge-%Y%m%d-%H%M%S.json"))
        return huge_main([] if out is None else ["--out", out])
    if getattr(args, "distributed", False):
        # (benchmarks/distributed.py runs itself again in the benchmark environment)
        from .distributed import main as distributed_main
        out = args.out if args.out is None or args.out.endswith(".json") else os.path.join(
            args.out, time.strftime("distributed-%Y%m%d-%H%M%S.json"))
        return distributed_main([*([] if out is None else ["--out", out]),
                                 *([] if not args.rounds else ["--rounds", str(args.rounds)])])
    if relaunch is not None and os.environ.get(CHILD_MARK) != "1":
        return subprocess.call(relaunch, env=bench_env(args.threads), cwd=ROOT)
    settings = settings_from_args(args)
    doc = run(settings, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    path = write_json(doc, args.out)
    print(format_table(doc))
    print(f"\nJSON: {path}")
    return 0


def main(argv=None, module="benchmarks") -> int:
    """``python -m MODULE [options]``: parse, then run (relaunching ``python -m MODULE`` if need be)."""
    import argparse
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_from_args(args, relaunch=[sys.executable, "-m", module, *argv])


# ------------------------------------------------------------------ running
def _benchmarks(only=None):
    """The repository's benchmarks package (it is not installed with staticgrad); with ``only``, just
    that module of it is imported."""
    if not os.path.isfile(os.path.join(ROOT, "benchmarks", "workloads.py")):
        raise SystemExit(f"staticgrad bench runs the benchmarks/ folder of a source checkout; none next to "
                         f"the package at {ROOT}")
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    if only is not None:
        importlib.import_module(f"benchmarks.{only}")
        return sys.modules["benchmarks"]
    import benchmarks.impl_staticgrad
    import benchmarks.measure
    import benchmarks.peers
    import benchmarks.workloads
    return benchmarks


def run(settings: Settings | None = None, log=print) -> dict:
    """Measure every workload of ``settings``; the returned document is what the JSON holds."""
    settings = settings or Settings()
    bm = _benchmarks()
    started = time.time()
    doc = {"schema": 1, "command": " ".join(sys.argv), "started": datetime.datetime.now().isoformat(timespec="seconds"),
           "settings": asdict(settings), "machine": machine_info(), "blas": bm.measure.blas_info(), "workloads": []}
    names = list(settings.workloads) + [f"chain{n}" for n in settings.compile_ops]
    python, missing = peer_interpreter(settings)
    if settings.peers and python is None:
        log(f"peers skipped: no peers environment at {settings.peer_python} (create it: {PEERS_SETUP})")
    elif settings.peers and python == sys.executable:
        log(f"no peers environment at {settings.peer_python}: peers run in this interpreter where installed"
            + (f" (not here: {', '.join(missing)})" if missing else "") + f"; for all of them: {PEERS_SETUP}")
    for name in names:
        workload = bm.workloads.get(name)
        entry = {"name": workload.name, "title": workload.title, "kind": workload.kind, "dtype": workload.dtype,
                 "ops": workload.ops, "size": workload.size, "results": {}}
        log(f"[{workload.name}] {workload.title}: staticgrad")
        entry["results"]["staticgrad"] = _measure_here(bm, workload, settings)
        for options in workload.params.get("variants", ()):
            name = bm.impl_staticgrad.impl_name(**options)
            log(f"[{workload.name}] {name}")
            entry["results"][name] = _measure_here(bm, workload, settings,
                                                   bm.impl_staticgrad.prepare_variant(**options), name)
        for peer in settings.peers:
            skip = bm.peers.skip_reason(peer, workload.kind)
            if skip:
                entry["results"][peer] = {"impl": peer, "status": "skipped", "reason": skip}
                continue
            if python is None:
                entry["results"][peer] = {"impl": peer, "status": "skipped", "reason": "no peers environment"}
                continue
            if peer in missing:
                entry["results"][peer] = {"impl": peer, "status": "skipped",
                                          "reason": f"not installed: no module {PEER_MODULES[peer]!r} in {python}"}
                continue
            log(f"[{workload.name}] {peer}")
            entry["results"][peer] = run_peer(peer, workload, settings, python)
        doc["workloads"].append(entry)
    doc["seconds"] = time.time() - started
    doc["load_average_end"] = _loadavg()
    return doc


def peer_interpreter(settings):
    """(python that runs the peers, peers it cannot run): the peers environment when it exists; without
    one, and unless another was asked for, this interpreter, which runs the peers installed in it."""
    path = settings.peer_python
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return path, []
    if path != DEFAULT_PEER_PYTHON:
        return None, list(settings.peers)
    missing = [p for p in settings.peers if importlib.util.find_spec(PEER_MODULES[p]) is None]
    return sys.executable, missing


def _measure_here(bm, workload, settings, prepare=None, name="staticgrad") -> dict:
    """staticgrad (or ``prepare``'s variant of it) measured in this process."""
    data = bm.workloads.make_data(workload)
    prepare = prepare or bm.impl_staticgrad.prepare
    try:
        return bm.measure.measure(workload, data, prepare, settings.rounds, settings.target_s,
                                  settings.budget_s, clock=settings.clock)
    except Exception as err:  # noqa: BLE001  (report it in the table, keep measuring the rest)
        return {"impl": name, "status": "error", "reason": f"{type(err).__name__}: {err}"[:500]}


def run_peer(peer, workload, settings, python=None) -> dict:
    """Run benchmarks/peer_runner.py for one peer and workload in the peers environment (or ``python``),
    with a timeout."""
    timeout = settings.big_timeout_s if workload.ops >= BIG_OPS else settings.peer_timeout_s
    cmd = [python or settings.peer_python, os.path.join(ROOT, "benchmarks", "peer_runner.py"), "--impl", peer,
           "--workload", workload.name, "--rounds", str(settings.rounds), "--target", str(settings.target_s),
           "--budget", str(settings.budget_s), "--threads", str(settings.threads), "--clock", settings.clock]
    started = time.time()
    env = bench_env(settings.threads)
    # The numba backend keeps its compiled interpreter on disk, and so do pytensor (its numba cache in
    # base_compiledir) and torch.compile (inductor's caches); fresh folders make every run pay the
    # compile, so one-time costs do not depend on what ran before.
    cache = env["STATICGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="staticgrad-bench-cache-")
    env["PYTENSOR_FLAGS"] = ",".join(filter(None, [env.get("PYTENSOR_FLAGS"),
                                                   f"base_compiledir={os.path.join(cache, 'pytensor')}"]))
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    # Its own session, so that on timeout the peer and any compiler workers it spawned go together.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=env, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        timed_out = True
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if timed_out:
        phases = [line[8:] for line in out.splitlines() if line.startswith("@@phase ")]
        return {"impl": peer, "status": "timeout", "timeout_s": timeout, "phase": phases[-1] if phases else None,
                "reason": f"no result within {timeout:.0f} s (still in phase {phases[-1] if phases else 'start'})"}
    for line in reversed(out.splitlines()):
        if line.startswith("@@result "):
            result = json.loads(line[9:])
            result["wall_s"] = time.time() - started
            return result
    return {"impl": peer, "status": "error", "reason": f"peer process exited {proc.returncode} without a result",
            "stderr_tail": err.strip().splitlines()[-8:]}


def _loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def machine_info() -> dict:
    import numpy as np

    import staticgrad
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        rev = None
    return {"cpu": cpu, "cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0],
            "numpy": np.__version__, "staticgrad": staticgrad.__version__, "git": rev,
            "load_average_start": _loadavg()}


def write_json(doc, out=None) -> str:
    """Write ``doc`` to ``out`` (a .json file, or a folder; default benchmarks/results/); return the path."""
    folder = out if out and not out.endswith(".json") else os.path.join(ROOT, "benchmarks", "results")
    if out and out.endswith(".json"):
        path = out
        folder = os.path.dirname(os.path.abspath(out))
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = os.path.join(folder, f"bench-{stamp}{'-quick' if doc['settings'].get('quick') else ''}.json")
    os.makedirs(folder, exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, default=float)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return path


# ------------------------------------------------------------------ the table
def format_time(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _cell(result) -> str:
    if result is None:
        return ""
    status = result.get("status")
    if status == "ok":
        return f"{result['ratio']:.2f}"
    if status == "timeout":
        return f"timeout>{result['timeout_s']:.0f}s"
    return {"skipped": "skip", "mismatch": "MISMATCH", "error": "error"}.get(status, str(status))


def _median(result) -> str:
    if not result or result.get("status") not in ("ok", "mismatch") or result.get("median_s") is None:
        return _cell(result)
    return format_time(result["median_s"])


def _one_time(result) -> str:
    if not result or result.get("status") not in ("ok", "mismatch"):
        return _cell(result)
    costs = result.get("costs", {})
    return format_time(sum(v for v in costs.values() if v is not None))


def format_table(doc) -> str:
    impls = []
    for entry in doc["workloads"]:
        for name in entry["results"]:
            if name not in impls:
                impls.append(name)
    width = max(len(e["name"]) + len(e["title"]) for e in doc["workloads"]) + 2 if doc["workloads"] else 10
    width = min(width, 66)
    cols = [max(len(n), 9) for n in impls]
    clock = {"cpu": "process CPU time", "wall": "wall-clock time"}.get(doc["settings"].get("clock"), "?")
    lines = ["Median time per call as a ratio to hand-written numpy in the same process (lower is better),",
             f"by {clock}; hand numpy column: its median in the main process (a peer's if staticgrad failed).",
             f"{'workload':<{width}} {'hand numpy':>11} " + " ".join(f"{n:>{w}}" for n, w in zip(impls, cols))]
    for entry in doc["workloads"]:
        label = f"{entry['name']}: {entry['title']}"[:width]
        base = hand_numpy(entry, "numpy").get("median_s")
        cells = [f"{_cell(entry['results'].get(n)):>{w}}" for n, w in zip(impls, cols)]
        lines.append(f"{label:<{width}} {format_time(base):>11} " + " ".join(cells))
    lines += ["", "Median time per call (the hand numpy column is the main process's, the others their own):",
              f"{'workload':<{width}} {'hand numpy':>11} " + " ".join(f"{n:>{w}}" for n, w in zip(impls, cols))]
    for entry in doc["workloads"]:
        label = f"{entry['name']}: {entry['title']}"[:width]
        base = hand_numpy(entry, "numpy").get("median_s")
        lines.append(f"{label:<{width}} {format_time(base):>11} " + " ".join(
            f"{_median(entry['results'].get(n)):>{w}}" for n, w in zip(impls, cols)))
    lines += ["", "One-time costs (build + grad + compile + first call, summed):",
              f"{'workload':<{width}} " + " ".join(f"{n:>{w}}" for n, w in zip(impls, cols))]
    for entry in doc["workloads"]:
        label = f"{entry['name']}: {entry['title']}"[:width]
        lines.append(f"{label:<{width}} " + " ".join(f"{_one_time(entry['results'].get(n)):>{w}}"
                                                      for n, w in zip(impls, cols)))
    lines += ["", "staticgrad one-time costs:"]
    for entry in doc["workloads"]:
        costs = entry["results"].get("staticgrad", {}).get("costs")
        if costs:
            parts = ", ".join(f"{k} {format_time(v)}" for k, v in costs.items())
            nodes = entry["results"]["staticgrad"].get("notes", {}).get("nodes")
            lines.append(f"  {entry['name']}: {parts}" + (f" ({nodes} nodes)" if nodes else ""))
    problems = [(e["name"], n, r) for e in doc["workloads"] for n, r in e["results"].items()
                if r.get("status") not in ("ok", None)]
    if problems:
        lines += ["", "Not measured:"]
        lines += [f"  {w} {n}: {r.get('status')}: {r.get('reason', '')}" for w, n, r in problems]
    lines += memory_lines(doc)
    lines += ["", "Issue 4 goals:"] + goal_lines(doc)
    lines += rnn_goal_lines(doc)
    lines += cnn_goal_lines(doc)
    kernels = ", ".join(f"{k} ({n} threads)" for k, n in _kernels(doc)) or "?"
    load = doc["machine"].get("load_average_start")
    lines += ["", f"OpenBLAS kernel: {kernels}; threads setting: {doc['settings']['threads'] or 'library defaults'}; "
              f"load average at start: {', '.join(f'{x:.1f}' for x in load) if load else '?'}; "
              f"git {doc['machine'].get('git')}; {doc.get('seconds', 0):.0f} s in all"]
    return "\n".join(lines)


def _kernels(doc) -> list:
    """(OpenBLAS kernel, threads) pairs seen in the main process and in every peer process."""
    infos = [doc.get("blas", {})] + [r.get("blas", {}) for e in doc["workloads"] for r in e["results"].values()]
    seen = []
    for info in infos:
        for lib in (info or {}).get("libraries", []):
            pair = (lib.get("architecture"), lib.get("num_threads"))
            if lib.get("internal_api") == "openblas" and pair not in seen:
                seen.append(pair)
    return seen


def goal_lines(doc) -> list:
    by_name = {e["name"]: e["results"].get("staticgrad", {}) for e in doc["workloads"]}

    def mark(ok):
        return "met" if ok else "NOT met"
    out = []
    for name, goal in GOALS.items():
        r = by_name.get(name)
        if r and r.get("status") == "ok":
            paired = r.get("paired_ratio")
            spread = (f" (round by round: median {paired['median']:.2f}, quartiles {paired['q1']:.2f}-"
                      f"{paired['q3']:.2f})" if paired else "")
            out.append(f"  {name}: {r['ratio']:.2f} x hand numpy (goal <= {goal:.2f}): {mark(r['ratio'] <= goal)}"
                       f"{spread}")
    for name, limit, what in (("C", 0.3, "2,000-op chain compile"), ("chain100000", 15.0, "100,000-op compile")):
        costs = by_name.get(name, {}).get("costs")
        if costs:
            out.append(f"  {what}: {format_time(costs['compile'])} (+ build and grad "
                       f"{format_time(costs['build'] + costs['grad'])}) (goal < {limit:g} s): "
                       f"{mark(costs['compile'] < limit)}")
    r = by_name.get("E")
    if r and r.get("status") == "ok":
        extra = r["median_s"] - r["numpy"]["median_s"]
        out.append(f"  call overhead: {format_time(r['median_s'])} per call of x + 1.0, {format_time(extra)} more "
                   f"than numpy's (goal < 5 µs): {mark(extra < 5e-6)}")
    return out or ["  (no staticgrad results)"]


if __name__ == "__main__":
    sys.exit(main())
