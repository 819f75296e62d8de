"""Smoke test of benchmarks/distributed.py (issue 22): the three ways run on a small MLP, the document and
the table have their shape, and the payload per step is what the issue allows. No timing is asserted."""
import argparse
import subprocess
import sys

import pytest

from benchmarks import cli as bench


@pytest.mark.slow
def test_the_distributed_benchmark_runs_a_small_mlp_on_two_workers():
    pytest.importorskip("distributed")
    from benchmarks import distributed
    doc = distributed.measure(sizes=(8, 16, 4), batch=64, rounds=2, steps=2, log=lambda msg: None)
    results = doc["results"]
    assert list(results) == ["1 process", "one shard", "fit", "step"]
    assert all(len(r["rounds"]) == 2 and r["median_s"] > 0 for r in results.values())
    params = doc["parameter_bytes"]
    assert params == 4 * (8 * 16 + 16 + 16 * 4 + 4)
    fit, step = results["fit"]["driver"], results["step"]["driver"]
    # fit: each of the 2 workers gets the new parameters and sends back its gradients and loss
    assert fit["sent"] == 2 * params and fit["received"] == 2 * (params + 4)
    # step: the batch's shards too (64 rows of 8 float32 and an int64 label)
    assert step["sent"] == 2 * params + 64 * (8 * 4 + 8)
    table = distributed.format_table(doc)
    assert "speed-up of fit on 2 workers" in table and "payload per step" in table


def test_bench_offers_the_distributed_measurement():
    args = bench.add_arguments(argparse.ArgumentParser()).parse_args(["--distributed", "--rounds", "3"])
    assert args.distributed and args.rounds == 3
    done = subprocess.run([sys.executable, "-m", "benchmarks.distributed", "--help"], capture_output=True, text=True,
                          timeout=60, cwd=bench.ROOT)
    assert done.returncode == 0 and "--optimizer" in done.stdout
