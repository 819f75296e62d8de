"""Classifying sequences of different lengths: padding with a mask, or one plan per length.

The task, made up here: a sequence of 3 to 20 digits is positive when some digit is followed by the
same digit ("3 8 8 1"), negative when no two neighbours are equal; half of each length are positive. A
GRU reads the digits (embedded) and a linear layer reads its state after the last one.

Two ways to feed sequences of different lengths to a compiled function, from the same starting weights:

- padded: every sequence padded to the longest (20) with a padding token; a mask marks each sequence's
  last real step, and the classifier reads the GRU's output there. One plan, for (20, batch); the GRU
  also runs over the padding.
- per length: batches of sequences of one length, fed to one compiled function whose sequence axis is
  None. staticgrad builds one plan per input shape (here one per length) the first time it sees it and
  reuses it after; nothing runs over padding, and no mask is needed (the final state is the answer).

    python examples/sequence_classification.py [--epochs 8] [--hidden 32]
"""
from __future__ import annotations

import argparse
import os
import time

# One BLAS thread: the matrices of one step are small, and more threads only wait on each other (several
# times slower on a busy machine). Set before numpy loads; a variable already set is left alone.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import staticgrad as sg  # noqa: E402
from staticgrad import nn, optim  # noqa: E402

PAD = 0             # digit d is token d + 1


def make_sequences(n, shortest, longest, rng):
    """``n`` digit sequences of random lengths, labels 1 where some digit repeats its neighbour."""
    seqs, labels = [], rng.integers(0, 2, size=n).astype(np.float64)
    for label in labels:
        length = int(rng.integers(shortest, longest + 1))
        steps = rng.integers(1, 10, size=length)                   # a nonzero step: never equal to the last
        digits = np.cumsum(np.concatenate([[rng.integers(10)], steps[1:]])) % 10
        if label:
            k = int(rng.integers(1, length))
            digits[k:] = (digits[k:] - digits[k] + digits[k - 1]) % 10   # digit k repeats k-1, the rest shift
        seqs.append(digits)
    return seqs, labels


def pad(seqs, length):
    """Tokens (length, N) with padding after each sequence, and a (length, N) mask of each one's last step."""
    ids = np.full((length, len(seqs)), PAD, dtype=np.int64)
    last = np.zeros((length, len(seqs)))
    for b, s in enumerate(seqs):
        ids[:len(s), b] = s + 1
        last[len(s) - 1, b] = 1.0
    return ids, last


class Classifier:
    def __init__(self, embed, hidden, seed):
        rng = np.random.default_rng(seed)
        self.embed = nn.Embedding(11, embed, seed=rng)
        self.gru = nn.GRU(embed, hidden, seed=rng)
        self.head = nn.Linear(hidden, 1, seed=rng, name="head")

    def parameters(self):
        return self.embed.parameters() + self.gru.parameters() + self.head.parameters()

    def padded(self, ids, last):
        """Logits (N,) read from the GRU's output at each sequence's last real step."""
        output, _ = self.gru(self.embed(ids))
        return sg.reshape(self.head(sg.sum(output * sg.expand_dims(last, -1), axis=0)), (-1,))

    def whole(self, ids):
        """Logits (N,) from the final state: every sequence in ``ids`` ends at the last step."""
        _, h_n = self.gru(self.embed(ids))
        return sg.reshape(self.head(h_n[0]), (-1,))


def compile_padded(model, lr):
    ids, last = sg.placeholder((None, None), dtype="int64", name="ids"), sg.placeholder((None, None), name="last")
    labels = sg.placeholder((None,), name="labels")
    logits = model.padded(ids, last)
    loss = nn.binary_cross_entropy_with_logits(logits, labels)
    step = sg.compile(loss, inputs=[ids, last, labels], updates=optim.Adam(model.parameters(), lr=lr).updates(loss))
    return step, sg.compile(logits, inputs=[ids, last])


def compile_per_length(model, lr):
    ids, labels = sg.placeholder((None, None), dtype="int64", name="ids"), sg.placeholder((None,), name="labels")
    logits = model.whole(ids)
    loss = nn.binary_cross_entropy_with_logits(logits, labels)
    step = sg.compile(loss, inputs=[ids, labels], updates=optim.Adam(model.parameters(), lr=lr).updates(loss))
    return step, sg.compile(logits, inputs=[ids])


def batches_padded(seqs, labels, longest, batch, rng):
    order = rng.permutation(len(seqs))
    for k in range(0, len(order) - batch + 1, batch):            # full batches only: one shape, one plan
        idx = order[k:k + batch]
        yield (*pad([seqs[i] for i in idx], longest), labels[idx])


def batches_per_length(seqs, labels, batch, rng):
    by_length = {}
    for i in rng.permutation(len(seqs)):
        by_length.setdefault(len(seqs[i]), []).append(i)
    chunks = [idx[k:k + batch] for idx in by_length.values() for k in range(0, len(idx) - batch + 1, batch)]
    for c in rng.permutation(len(chunks)):
        idx = chunks[c]
        yield np.stack([seqs[i] for i in idx], axis=1) + 1, labels[idx]


def run(kind, args, train, test):
    """Train one way; (test accuracy, training seconds, plans built, loss per epoch)."""
    model = Classifier(args.embed, args.hidden, args.seed)
    compile_fn = compile_padded if kind == "padded" else compile_per_length
    step, predict = compile_fn(model, args.lr)
    rng, losses = np.random.default_rng(args.seed), []
    started = time.perf_counter()
    for _ in range(args.epochs):
        if kind == "padded":
            epoch = [float(step(*b)) for b in batches_padded(*train, args.longest, args.batch_size, rng)]
        else:
            epoch = [float(step(*b)) for b in batches_per_length(*train, args.batch_size, rng)]
        losses.append(float(np.mean(epoch)))
    seconds = time.perf_counter() - started
    seqs, labels = test
    if kind == "padded":
        logits = predict(*pad(seqs, args.longest))
    else:
        logits, order = [], []
        for length in sorted({len(s) for s in seqs}):
            idx = [i for i, s in enumerate(seqs) if len(s) == length]
            logits.append(predict(np.stack([seqs[i] for i in idx], axis=1) + 1))
            order += idx
        logits, labels = np.concatenate(logits), labels[order]
    return nn.accuracy(logits, labels), seconds, step.report()["plans"], losses


def main(argv=None):
    parser = argparse.ArgumentParser(description="variable-length sequence classification: padding vs a plan "
                                                 "per length")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--train", type=int, default=3000, help="training sequences")
    parser.add_argument("--shortest", type=int, default=3)
    parser.add_argument("--longest", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--embed", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    train = make_sequences(args.train, args.shortest, args.longest, rng)
    test = make_sequences(1000, args.shortest, args.longest, rng)
    mean_length = np.mean([len(s) for s in train[0]])
    print(f"{args.train} training and 1000 test sequences of {args.shortest} to {args.longest} digits "
          f"(mean {mean_length:.1f}); GRU({args.embed}, {args.hidden}), {args.epochs} epochs")
    results = {}
    for kind in ("padded", "per length"):
        accuracy, seconds, plans, losses = run(kind, args, train, test)
        results[kind] = {"accuracy": accuracy, "seconds": seconds, "plans": plans, "loss": losses}
        curve = " ".join(f"{v:.3f}" for v in losses)
        print(f"{kind:>10}: test accuracy {accuracy:.3f}, training {seconds:5.1f} s, {plans:2d} training plan(s); "
              f"loss by epoch {curve}")
    return results


if __name__ == "__main__":
    main()
