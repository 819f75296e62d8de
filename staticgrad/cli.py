"""The ``staticgrad`` command."""
from __future__ import annotations

import argparse
import os
import sys


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def main(argv=None):
    from . import __version__
    parser = argparse.ArgumentParser(prog="staticgrad", description="define-and-run autodiff for numpy")
    parser.add_argument("--version", action="version", version=f"staticgrad {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train a 2-8-8-1 MLP on two moons and write its graph as DOT")
    demo.add_argument("--out", default="staticgrad-demo", help="folder for the graph files")
    demo.add_argument("--epochs", type=_positive_int, default=300)
    dot = sub.add_parser("dot", help="run a script and render the graph of every function it compiles",
                         usage="staticgrad dot [options] SCRIPT [-- SCRIPT_ARGS...]")
    dot.add_argument("script", help="a Python file that builds and compiles staticgrad functions")
    dot.add_argument("script_args", nargs="*", help="arguments passed to the script (after --)")
    dot.add_argument("--out", default=None, help="folder for the files (default: <script name>-graphs)")
    dot.add_argument("--format", default="svg", choices=["svg", "png", "pdf", "dot"])
    dot.add_argument("--stage", default="optimized", choices=["optimized", "unoptimized", "diff", "all"])
    dot.add_argument("--collapse", action="store_true", help="draw each name scope as one box")
    bench = sub.add_parser("bench", help="time staticgrad and peers against hand-written numpy (needs a checkout)")
    harness = _benchmarks_cli()
    if harness is not None:
        harness.add_arguments(bench)
    else:                       # the study's share of the harness's options
        bench.add_argument("--quick", action="store_true")
        bench.add_argument("--out", default=None)
        bench.add_argument("--threads", type=int, default=1)
        bench.add_argument("--peers", default=None)
    bench.add_argument("--study", action="store_true", help="the static vs dynamic study instead: one model "
                       "trained compiled, eagerly and in PyTorch (shares --quick, --out, --threads, --peers none)")
    bench.add_argument("--plot", default=None, help="with --study: cumulative time plot (needs matplotlib)")
    bench.add_argument("--rnn", action="store_true", help="the study's RNN case: a tanh RNN as a static scan, "
                       "unrolled, eager and in PyTorch over 10, 100 and 1,000 steps, and a variable-length epoch")
    bench.add_argument("--unroll-timeout", type=float, default=None, metavar="SECONDS",
                       help="with --rnn: wall-clock seconds an unrolled graph may take to build and compile "
                       "(default 300)")
    args, extra = _parse(parser, sys.argv[1:] if argv is None else list(argv))
    if args.command == "bench" and args.rnn:
        args.study = True
    if extra and not (args.command == "bench" and harness is None and not args.study):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "dot" and not os.path.isfile(args.script):
        dot.error(f"no such script: {args.script}")
    if args.command == "demo":
        from .demo import run
        run(out_dir=args.out, epochs=args.epochs)
    if args.command == "dot":
        return _dot_command(args)
    if args.command == "bench":
        return _bench_command(args, harness, sys.argv[1:] if argv is None else list(argv))
    return 0


def _benchmarks_cli():
    """The benchmark harness of a source checkout (benchmarks/cli.py beside the package), or None for an
    installed package, which does not carry benchmarks/."""
    import importlib
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isfile(os.path.join(root, "benchmarks", "cli.py")):
        return None
    if root not in sys.path:
        sys.path.insert(0, root)
    module = importlib.import_module("benchmarks.cli")      # standard library only: cheap to import here
    return module if os.path.dirname(os.path.dirname(os.path.abspath(module.__file__))) == root else None


def _bench_command(args, harness, argv):
    if args.study:
        from .study import run_from_args as run_study
        return run_study(args, relaunch=[sys.executable, "-m", "staticgrad", *argv])
    if harness is None:
        print("staticgrad bench runs the benchmarks/ folder of a source checkout, which an installed package "
              "does not carry: clone the repository and run `make bench` there", file=sys.stderr)
        return 2
    return harness.run_from_args(args, relaunch=[sys.executable, "-m", "staticgrad", *argv])


def _parse(parser, argv):
    # argparse gives a trailing nargs="*" positional its (empty) share as soon as it meets the script
    # name, so `dot S.py --out d -- --foo bar` would leave --foo bar unrecognized: what follows the
    # first -- after `dot` is the script's, whatever it looks like.
    if argv[:1] == ["dot"] and "--" in argv:
        cut = argv.index("--")
        args, extra = parser.parse_known_args(argv[:cut])
        args.script_args = [*args.script_args, *argv[cut + 1:]]
        return args, extra
    return parser.parse_known_args(argv)


def _collect_functions(script, script_args):
    """Run ``script`` as __main__; every compiled Function it creates, with the line that compiled it."""
    import os
    import runpy

    from .function import Function
    from .tensor import user_frame
    made, original = [], Function.__init__

    def recording(self, *a, **k):
        original(self, *a, **k)
        made.append((self, user_frame()))

    saved_argv, saved_path = sys.argv, list(sys.path)
    Function.__init__ = recording
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    finally:
        Function.__init__ = original
        sys.argv, sys.path[:] = saved_argv, saved_path
    return made


def _dot_command(args):
    import os

    from .explain.diffdot import diff_dot
    from .explain.dot import GraphvizNotFound, save_dot, to_dot
    stem = os.path.splitext(os.path.basename(args.script))[0]
    out = args.out or f"{stem}-graphs"
    made = _collect_functions(args.script, args.script_args)
    if not made:
        print(f"{args.script} compiled no staticgrad function: nothing to draw", file=sys.stderr)
        return 1
    os.makedirs(out, exist_ok=True)
    stages = ["optimized", "unoptimized", "diff"] if args.stage == "all" else [args.stage]
    missing = None
    for k, (fn, where) in enumerate(made, 1):
        for stage in stages:
            if stage == "diff":
                picture = diff_dot(fn, collapse=args.collapse)
            else:
                picture = to_dot(fn, stage=stage, collapse=args.collapse)
            base = os.path.join(out, f"{stem}_{k}" + ("" if len(stages) == 1 else f"_{stage}"))
            written = [save_dot(picture, base + ".dot")]
            if args.format != "dot" and missing is None:
                try:
                    written.append(save_dot(picture, f"{base}.{args.format}"))
                except GraphvizNotFound as err:
                    missing = err
            print(f"function {k} (compiled at {where}, {len(fn.ir.nodes)} nodes), {stage}: {', '.join(written)}")
    if missing is not None:
        print(missing, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
