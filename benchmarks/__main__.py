"""``python -m benchmarks``: the same as ``staticgrad bench`` in a checkout."""
import sys

from .cli import main

sys.exit(main())
