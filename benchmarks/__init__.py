"""Benchmarks: staticgrad and its peers side by side against hand-written numpy backprop (issue 4).

Run ``python -m benchmarks [--quick]`` or ``staticgrad bench [--quick]`` from the repository; see
benchmarks/README.md. Nothing is imported here, so ``python -m benchmarks`` can set the environment
(thread counts, OpenBLAS core) before numpy loads.
"""
