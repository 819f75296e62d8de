"""Measure one peer on one workload; run by the peers environment's python, one process per pair.

    .venv-peers/bin/python benchmarks/peer_runner.py --impl torch --workload A --rounds 25 --target 0.05

It prints progress lines ``@@phase NAME`` and, last, ``@@result {json}``. A peer that is not installed
reports status "skipped"; one that raises reports "error" with the message. A RecursionError at the
default recursion limit is noted and the peer is tried again with a high limit on a large stack.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import threading
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _phase(name):
    print(f"@@phase {name}", flush=True)


def _set_threads(n):
    """Thread pools that read environment variables got them from the parent; torch needs telling."""
    if n and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def _load(impl):
    from benchmarks.peers import PEERS
    module_name, attr = PEERS[impl]
    return importlib.import_module(module_name), attr


def _on_big_stack(fn):
    """Run ``fn`` in a thread with a 1 GiB stack and a high recursion limit; return or raise its outcome."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001  (handed back to the caller's thread)
            box["error"] = err
    old_limit, old_size = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(1_000_000)
    threading.stack_size(1 << 30)
    try:
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
    finally:
        threading.stack_size(old_size)
        sys.setrecursionlimit(old_limit)
    if "error" in box:
        raise box["error"]
    return box["value"]


def run(args) -> dict:
    from benchmarks import measure, workloads
    workload = workloads.get(args.workload)
    data = workloads.make_data(workload)
    base = {"impl": args.impl, "workload": workload.name, "python": sys.executable}
    from benchmarks.peers import skip_reason
    reason = skip_reason(args.impl, workload.kind)
    if reason:
        return {**base, "status": "skipped", "reason": reason}
    try:
        module, attr = _load(args.impl)
    except ImportError as err:
        return {**base, "status": "skipped", "reason": f"not installed: {err}"}
    reason = module.unavailable(args.impl) if hasattr(module, "unavailable") else None
    if reason:
        return {**base, "status": "skipped", "reason": reason}
    _set_threads(args.threads)
    prepare = getattr(module, attr)
    versions = module.versions() if hasattr(module, "versions") else {}

    def attempt():
        return measure.measure(workload, data, prepare, args.rounds, args.target, args.budget, phase=_phase,
                               clock=args.clock)
    notes = {}
    try:
        try:
            result = attempt()
        except RecursionError:
            notes["recursion_error_at_default_limit"] = sys.getrecursionlimit()
            _phase("retry with a high recursion limit")
            result = _on_big_stack(attempt)
    except Exception as err:  # noqa: BLE001  (a peer's failure is a result, not a crash of the benchmark)
        tail = traceback.format_exc().strip().splitlines()[-6:]
        return {**base, "status": "error", "reason": f"{type(err).__name__}: {err}"[:500], "traceback": tail,
                "notes": notes, "versions": versions}
    result["notes"] = {**result.get("notes", {}), **notes}
    return {**base, **result, "versions": versions, "blas": measure.blas_info()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--target", type=float, default=0.05, help="seconds per round and implementation")
    parser.add_argument("--budget", type=float, default=None, help="seconds of timing at most (>= 3 rounds)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="thread count given to torch (0: its default)")
    args = parser.parse_args(argv)
    # Run as a script, this folder heads sys.path; the repository root must, so `benchmarks` imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [ROOT] + [p for p in sys.path if os.path.abspath(p or ".") not in (here, ROOT)]
    result = run(args)
    print("@@result " + json.dumps(result, default=float), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
