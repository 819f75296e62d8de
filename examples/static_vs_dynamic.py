"""Static graph vs define-by-run, on the same ops and the same model code.

One model function is trained three ways from the same starting point with plain SGD: compiled once by
staticgrad (static), run op by op by staticgrad's eager mode (dynamic), and, when torch is installed,
by PyTorch eager. Steps alternate between the styles batch by batch so that a busy machine slows all
of them alike. Four workloads: the 20-parameter sigmoid network of the worked examples, the moons MLP,
a 784-256-256-10 MLP on random data and a deep narrow chain of 50 small layers.

    python examples/static_vs_dynamic.py [--quick] [--json study.json] [--plot study.png]

With ``--rnn`` the RNN case instead: one tanh RNN step function run as a static scan (one compile for every
length), a graph unrolled per length, an eager loop and PyTorch's eager loop over 10, 100 and 1,000 steps,
and an epoch of batches of varying length padded to one plan or planned per length:

    python examples/static_vs_dynamic.py --rnn [--quick] [--json rnn.json] [--unroll-timeout 300]

The same study runs as ``staticgrad bench --study`` (``--rnn``). The plot needs matplotlib (optional).
"""
from __future__ import annotations

import argparse
import os

# One BLAS thread for numpy and torch alike: the study is about what happens around the kernels, and
# threads fighting over a shared machine's cores add noise to every column. Set before numpy loads.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import staticgrad as sg  # noqa: E402
from staticgrad import eager, study  # noqa: E402


def worked_example_3():
    """The 2-3-2-1 sigmoid network by hand (docs/worked_examples.md, example 3), computed in both modes."""
    x, y = study.SIGMOID_NET_BATCH
    params = study.SIGMOID_NET_PARAMS

    xs = [sg.placeholder(x.shape, name="x"), sg.placeholder(y.shape, name="y")]
    ps = [sg.parameter(p) for p in params]
    loss = study.sigmoid_net(*xs, *ps)
    gW, gb = sg.grad(loss, [ps[0], ps[5]])
    static = sg.compile([loss, gW, gb], inputs=xs)(x, y)

    es = [eager.tensor(p, requires_grad=True) for p in params]
    loss_e = study.sigmoid_net(eager.tensor(x), eager.tensor(y), *es)
    loss_e.backward()
    dynamic = [loss_e.value, es[0].grad, es[5].grad]

    print("worked example 3 (2-3-2-1 sigmoid network, 20 parameters):")
    print(f"  {'':<10}{'by hand':>10}{'static':>12}{'eager':>12}")
    for label, hand, s, e in [("L", 0.175595, static[0], dynamic[0]),
                              ("dL/dw11", 0.006731, static[1][0, 0], dynamic[1][0, 0]),
                              ("dL/db", 0.627673, static[2], dynamic[2])]:
        print(f"  {label:<10}{hand:>10.6f}{float(s):>12.6f}{float(e):>12.6f}")
    print()


def main(argv=None):
    parser = argparse.ArgumentParser(description="static graph vs define-by-run on the same ops")
    parser.add_argument("--quick", action="store_true", help="small workloads, fewer batches")
    parser.add_argument("--json", default=None, help="write the measurements here")
    parser.add_argument("--plot", default=None, help="write cumulative time vs batches here (needs matplotlib)")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out even when installed")
    parser.add_argument("--rnn", action="store_true", help="the RNN case: scan, unrolled, eager and torch loops")
    parser.add_argument("--unroll-timeout", type=float, default=study.UNROLL_TIMEOUT_S,
                        help="with --rnn: wall-clock seconds an unrolled graph may take to build and compile")
    args = parser.parse_args(argv)
    if args.rnn:
        study.run_rnn_study(quick=args.quick, torch=False if args.no_torch else None, json_path=args.json,
                            timeout=args.unroll_timeout)
        return 0
    worked_example_3()
    study.run_study(quick=args.quick, torch=False if args.no_torch else None, json_path=args.json,
                    plot_path=args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
