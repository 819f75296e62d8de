"""Data-parallel training on a Dask cluster (issue 22): one training step of a 784-1024-1024-10 ReLU MLP on a
batch of 4,096 float32 rows (softmax cross-entropy, SGD with momentum 0.9 or Adam), run three ways:

  1 process    the compiled step with its updates (``sg.compile(loss, inputs, updates=opt.updates(loss))``)
               in this process, on one BLAS thread;
  fit          ``DataParallel.fit`` on a LocalCluster of 2 worker processes (one thread each, one BLAS
               thread each), the data a dask array persisted on the workers, one chunk on each: a step
               sends each worker the new parameter values and gets back its shard's gradients;
  step         ``DataParallel.step`` on the same cluster with the batch in this process's memory: each step
               also sends each worker its half of the batch.

The three are timed in interleaved rounds (wall clock: the point is two cores at once) of ``--steps`` steps
each; a round's figure is its time per step, the result the median over rounds, and the speed-up the 1
process median over the other's. Per step it reports the payload bytes the driver sent and received
(``DataParallel.traffic``: parameter values, shards, gradients and losses), all the bytes that crossed the
loopback interface (Dask's own messages included; from /proc/net/dev), and where the driver's time went
(``DataParallel.timings``: sending, waiting for the shards, receiving, combining and the update), beside the
slowest shard's own call on its worker.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.distributed
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.distributed --rounds 9 --optimizer adam

The command runs itself again in the benchmark environment (``benchmarks.cli.bench_env``: OpenBLAS's real
kernel, one BLAS thread), which the workers inherit; it writes benchmarks/results/distributed-<date>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SIZES = (784, 1024, 1024, 10)
BATCH = 4096
GOAL_SPEEDUP = 1.6
SEED = 20260122


def _model(sizes, optimizer):
    import staticgrad as sg
    x = sg.placeholder((None, sizes[0]), "float32", name="x")
    t = sg.placeholder((None,), "int64", name="t")
    net = sg.nn.MLP(list(sizes), dtype="float32", seed=0)
    loss = sg.nn.softmax_cross_entropy(net(x), t)
    opt = (sg.optim.Adam(net.parameters(), lr=1e-3) if optimizer == "adam"
           else sg.optim.SGD(net.parameters(), lr=0.01, momentum=0.9))
    return x, t, loss, opt


def _loopback_bytes():
    """Bytes sent over the loopback interface so far (every process's, Dask's messages included)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, fields = line.partition(":")
            if name.strip() == "lo":
                return int(fields.split()[8])
    return None


def _busy_cpu_seconds():
    """CPU seconds the whole machine has been busy (every process's, /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _our_cpu_seconds():
    """(CPU seconds of this process, of its children): the driver, with the cluster's scheduler and nannies
    on its event loop, and the worker processes."""
    import psutil
    me = psutil.Process()
    children = 0.0
    for proc in me.children(recursive=True):
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        children += times.user + times.system
    mine = me.cpu_times()
    return mine.user + mine.system, children


def _timed(run, steps) -> dict:
    """Per step of ``run()``, which takes ``steps`` steps: wall seconds, loopback bytes, and the CPU seconds
    other processes of the machine used meanwhile (a tenant running on one of the two cores slows a
    parallel step more than the 1 process one)."""
    loop, busy, ours, started = _loopback_bytes(), _busy_cpu_seconds(), _our_cpu_seconds(), time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    loop_after, busy_after, ours_after = _loopback_bytes(), _busy_cpu_seconds(), _our_cpu_seconds()
    driver, workers = (after - before for before, after in zip(ours, ours_after))
    others = None if busy is None or busy_after is None else max(busy_after - busy - driver - workers, 0.0)
    return {"seconds": seconds / steps, "driver_cpu_s": driver / steps, "workers_cpu_s": workers / steps,
            "loopback_bytes": None if loop is None or loop_after is None else (loop_after - loop) / steps,
            "others_cpu_share": None if others is None else others / (seconds * os.cpu_count())}


def _setups(client, sizes, batch, steps, optimizer):
    """{name: (run one round, the DataParallel or None)} for the three ways, and "one shard": the loss and
    gradients of one worker's share of the batch in this process, what a 2-worker step cannot beat."""
    import dask.array as da

    import staticgrad as sg
    from staticgrad.distributed import DataParallel
    rng = np.random.default_rng(SEED)
    X = rng.standard_normal((batch, sizes[0]), dtype=np.float32)
    T = rng.integers(0, sizes[-1], batch)
    x, t, loss, opt = _model(sizes, optimizer)
    single = sg.compile(loss, inputs=[x, t], updates=opt.updates(loss))
    single(X, T)
    gradients = sg.compile([loss, *sg.grad(loss, opt.params)], inputs=[x, t])
    shard = batch // len(client.nthreads())
    gradients(X[:shard], T[:shard])

    # the data set of the fit way: made on the workers (never here), one chunk each
    drng = da.random.default_rng(SEED)
    half = batch * steps // 2
    dX = drng.standard_normal((2 * half, sizes[0]), chunks=(half, sizes[0]), dtype=np.float32)
    dT = drng.integers(0, sizes[-1], size=2 * half, chunks=half)
    dX, dT = client.persist([dX, dT])
    x2, t2, loss2, opt2 = _model(sizes, optimizer)
    fitter = DataParallel(loss2, [x2, t2], opt2, client)
    fitter.fit(dX, dT, batch_size=batch, epochs=1, progress=False)          # ships the function, warms up
    x3, t3, loss3, opt3 = _model(sizes, optimizer)
    stepper = DataParallel(loss3, [x3, t3], opt3, client)
    stepper.step(X, T)

    def one_process():
        for _ in range(steps):
            single(X, T)

    def steps_in_memory():
        for _ in range(steps):
            stepper.step(X, T)

    def one_shard():
        for _ in range(steps):
            gradients(X[:shard], T[:shard])
    return {"1 process": (one_process, None), "one shard": (one_shard, None),
            "fit": (lambda: fitter.fit(dX, dT, batch_size=batch, epochs=1, progress=False), fitter),
            "step": (steps_in_memory, stepper)}


def _counters(dp):
    return None if dp is None else (dict(dp.timings), dp.traffic.sent, dp.traffic.received, dp.traffic.steps)


def _delta(dp, before):
    """Per step since ``before``: the driver's timings and the payload bytes."""
    timings, sent, received, steps = before
    n = dp.traffic.steps - steps
    out = {k: (v - timings[k]) / n for k, v in dp.timings.items()}
    out.update(sent=(dp.traffic.sent - sent) / n, received=(dp.traffic.received - received) / n)
    return out


def measure(sizes=SIZES, batch=BATCH, rounds=7, steps=3, optimizer="sgd", workers=2, profiler=True,
            log=print) -> dict:
    """The measurement: a document of settings, per-round samples, medians, traffic and timings.
    ``profiler=False`` turns off Dask's statistical profiler in the workers (a thread that samples the
    running task's stack every 10 ms)."""
    import logging

    import dask
    from distributed import Client, LocalCluster
    with dask.config.set({"distributed.worker.profile.enabled": bool(profiler)}):
        cluster = LocalCluster(processes=True, n_workers=workers, threads_per_worker=1, dashboard_address=None,
                               silence_logs=logging.ERROR)
    client = Client(cluster)
    machine = _machine()
    try:
        blas = client.run(os.environ.get, "OPENBLAS_NUM_THREADS")
        setups = _setups(client, sizes, batch, steps, optimizer)
        samples = {name: [] for name in setups}
        per_step = {name: [] for name in setups}
        order = list(setups)
        for r in range(rounds):
            for name in order[r % len(order):] + order[:r % len(order)]:       # each way first in turn
                run, dp = setups[name]
                before = _counters(dp)
                samples[name].append(_timed(run, steps))
                if dp is not None:
                    per_step[name].append(_delta(dp, before))
            log(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {samples[n][-1]['seconds'] * 1e3:.0f} ms"
                                                        for n in setups))
        param_bytes = sum(p.value.nbytes for p in setups["fit"][1].optimizer.params)
        doc = _document(sizes, batch, rounds, steps, optimizer, workers, blas, samples, per_step, param_bytes)
        doc["workload"]["worker_profiler"] = bool(profiler)
        doc["machine"] = {**machine, "load_average_end": list(os.getloadavg())}
        return doc
    finally:
        client.close()
        cluster.close()


def _document(sizes, batch, rounds, steps, optimizer, workers, blas, samples, per_step, param_bytes) -> dict:
    results = {}
    for name, rows in samples.items():
        seconds = [row["seconds"] for row in rows]
        loop = [row["loopback_bytes"] for row in rows if row["loopback_bytes"] is not None]
        entry = {"median_s": float(np.median(seconds)), "rounds": rows,
                 "loopback_bytes_per_step": float(np.median(loop)) if loop else None}
        if per_step[name]:
            entry["driver"] = {k: float(np.median([d[k] for d in per_step[name]])) for k in per_step[name][0]}
        results[name] = entry
    base = results["1 process"]["median_s"]
    for name in ("fit", "step"):
        results[name]["speedup"] = base / results[name]["median_s"]
    return {"schema": 1, "workload": {"sizes": list(sizes), "batch": batch, "dtype": "float32",
                                      "optimizer": optimizer, "workers": workers, "threads_per_worker": 1},
            "rounds": rounds, "steps_per_round": steps, "parameter_bytes": param_bytes,
            "worker_openblas_threads": blas, "results": results}


def _machine() -> dict:
    from .cli import machine_info
    return machine_info()


def _median(result, key) -> float:
    return float(np.median([row[key] for row in result["rounds"]]))


def _mb(n) -> str:
    return "-" if n is None else f"{n / 1e6:.1f} MB"


def format_table(doc) -> str:
    res, params, workers = doc["results"], doc["parameter_bytes"], doc["workload"]["workers"]
    w = doc["workload"]
    lines = [f"{'-'.join(map(str, w['sizes']))} MLP step, batch {w['batch']:,} {w['dtype']}, {w['optimizer']}; "
             f"{doc['rounds']} rounds of {doc['steps_per_round']} steps, wall clock, median per step"
             + ("" if w.get("worker_profiler", True) else "; Dask's worker profiler off"),
             f"{'':<10} {'per step':>9} {'speed-up':>8} {'sent':>9} {'received':>9} {'loopback':>9} {'others':>7}"]
    for name, r in res.items():
        d = r.get("driver", {})
        others = [row["others_cpu_share"] for row in r["rounds"] if row["others_cpu_share"] is not None]
        speedup = f"{r['speedup']:>7.2f}x" if "speedup" in r else f"{'':>8}"
        lines.append(f"{name:<10} {r['median_s'] * 1e3:>6.0f} ms {speedup} {_mb(d.get('sent')):>9} "
                     f"{_mb(d.get('received')):>9} {_mb(r['loopback_bytes_per_step']):>9} "
                     f"{np.median(others) * 100 if others else float('nan'):>6.0f}%")
    lines += ["(sent, received: the driver's payload, DataParallel.traffic; loopback: every byte over lo, Dask's "
              "messages included; others: the share of the machine's CPU other processes took meanwhile)", "",
              "CPU seconds per step (median): " + "; ".join(
                  f"{name}: this process {_median(r, 'driver_cpu_s') * 1e3:.0f} ms, workers "
                  f"{_median(r, 'workers_cpu_s') * 1e3:.0f} ms" for name, r in res.items())]
    lines += ["", "Where a DataParallel step's time went (driver; median per step):"]
    for name in ("fit", "step"):
        d = res[name]["driver"]
        lines.append(f"  {name}: send {d['send'] * 1e3:.0f} ms, wait {d['wait'] * 1e3:.0f} ms (the slowest shard's "
                     f"call {d['shard'] * 1e3:.0f} ms), receive {d['receive'] * 1e3:.0f} ms, combine and update "
                     f"{d['update'] * 1e3:.0f} ms")
    fit = res["fit"]
    limit = workers * params
    traffic_ok = fit["driver"]["sent"] <= limit and fit["driver"]["received"] <= limit + 8 * workers
    lines += ["", "Issue 22 goals:",
              f"  speed-up of fit on {workers} workers: {fit['speedup']:.2f}x (goal >= {GOAL_SPEEDUP}): "
              f"{'met' if fit['speedup'] >= GOAL_SPEEDUP else 'NOT met'}",
              f"  fit's payload per step: sent {_mb(fit['driver']['sent'])}, received {_mb(fit['driver']['received'])} "
              f"(one parameter set per worker: {_mb(limit)}; one gradient set per worker: {_mb(limit)} + losses): "
              f"{'met' if traffic_ok else 'NOT met'}",
              f"  workers' OPENBLAS_NUM_THREADS: {sorted(set(doc['worker_openblas_threads'].values()))}; "
              f"load average at start: {doc['machine'].get('load_average_start')}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    from .cli import CHILD_MARK, ROOT, bench_env
    parser = argparse.ArgumentParser(prog="python -m benchmarks.distributed", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--steps", type=int, default=3, help="steps per round of each way (default 3)")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd", help="SGD with momentum 0.9, or Adam")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"rows per step (default {BATCH:,})")
    parser.add_argument("--no-profiler", action="store_true",
                        help="turn off Dask's statistical profiler in the workers (distributed.worker.profile)")
    parser.add_argument("--out", default=None, help="JSON file (default: benchmarks/results/distributed-<date>.json)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if os.environ.get(CHILD_MARK) != "1":
        command = [sys.executable, "-m", "benchmarks.distributed", *(sys.argv[1:] if argv is None else argv)]
        return subprocess.call(command, env=bench_env(1), cwd=ROOT)
    doc = measure(batch=args.batch, rounds=args.rounds, steps=args.steps, optimizer=args.optimizer,
                  profiler=not args.no_profiler,
                  log=lambda msg: print(msg, file=sys.stderr, flush=True))
    path = args.out or os.path.join(ROOT, "benchmarks", "results", time.strftime("distributed-%Y%m%d-%H%M%S.json"))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(format_table(doc))
    print(f"\nJSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
