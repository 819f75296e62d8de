"""``python -m benchmarks``: the same as ``staticgrad bench``."""
import sys

from staticgrad.bench import main

sys.exit(main(module="benchmarks"))
