"""The ``staticgrad`` command."""
from __future__ import annotations

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="staticgrad", description="define-and-run autodiff for numpy")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train a 2-8-8-1 MLP on two moons and write its graph as DOT")
    demo.add_argument("--out", default="staticgrad-demo", help="folder for the graph files")
    demo.add_argument("--epochs", type=int, default=300)
    bench = sub.add_parser("bench", help="time staticgrad and peers against hand-written numpy; write JSON")
    from .bench import add_arguments as add_bench_arguments   # stdlib-only module: cheap to import here
    add_bench_arguments(bench)
    bench.add_argument("--study", action="store_true", help="the static vs dynamic study instead: one model "
                       "trained compiled, eagerly and in PyTorch (shares --quick, --out, --threads, --peers none)")
    bench.add_argument("--plot", default=None, help="with --study: cumulative time plot (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run
        run(out_dir=args.out, epochs=args.epochs)
    if args.command == "bench" and args.study:
        from .study import run_from_args as run_study
        argv = sys.argv[1:] if argv is None else list(argv)
        return run_study(args, relaunch=[sys.executable, "-m", "staticgrad", *argv])
    if args.command == "bench":
        from .bench import run_from_args
        argv = sys.argv[1:] if argv is None else list(argv)
        return run_from_args(args, relaunch=[sys.executable, "-m", "staticgrad", *argv])
    return 0


if __name__ == "__main__":
    sys.exit(main())
