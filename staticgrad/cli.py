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
    parser = argparse.ArgumentParser(prog="staticgrad", description="define-and-run autodiff for numpy")
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
    bench = sub.add_parser("bench", help="time staticgrad and peers against hand-written numpy; write JSON")
    from .bench import add_arguments as add_bench_arguments   # stdlib-only module: cheap to import here
    add_bench_arguments(bench)
    bench.add_argument("--study", action="store_true", help="the static vs dynamic study instead: one model "
                       "trained compiled, eagerly and in PyTorch (shares --quick, --out, --threads, --peers none)")
    bench.add_argument("--plot", default=None, help="with --study: cumulative time plot (needs matplotlib)")
    args = _parse(parser, sys.argv[1:] if argv is None else list(argv))
    if args.command == "dot" and not os.path.isfile(args.script):
        dot.error(f"no such script: {args.script}")
    if args.command == "demo":
        from .demo import run
        run(out_dir=args.out, epochs=args.epochs)
    if args.command == "dot":
        return _dot_command(args)
    if args.command == "bench" and args.study:
        from .study import run_from_args as run_study
        argv = sys.argv[1:] if argv is None else list(argv)
        return run_study(args, relaunch=[sys.executable, "-m", "staticgrad", *argv])
    if args.command == "bench":
        from .bench import run_from_args
        argv = sys.argv[1:] if argv is None else list(argv)
        return run_from_args(args, relaunch=[sys.executable, "-m", "staticgrad", *argv])
    return 0


def _parse(parser, argv):
    # argparse gives a trailing nargs="*" positional its (empty) share as soon as it meets the script
    # name, so `dot S.py --out d -- --foo bar` would leave --foo bar unrecognized: what follows the
    # first -- after `dot` is the script's, whatever it looks like.
    if argv[:1] == ["dot"] and "--" in argv:
        cut = argv.index("--")
        args = parser.parse_args(argv[:cut])
        args.script_args = [*args.script_args, *argv[cut + 1:]]
        return args
    return parser.parse_args(argv)


def _collect_functions(script, script_args):
    """Run ``script`` as __main__; every compiled Function it creates, with the line that compiled it."""
    import os
    import runpy

    from .executor import Function
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

    from .diffdot import diff_dot
    from .dot import GraphvizNotFound, save_dot, to_dot
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
