"""Handwritten digits (the 8x8 images bundled with scikit-learn) with a 64-128-10 MLP.

scikit-learn is an optional extra, used only for its bundled data (nothing is downloaded):
    pip install scikit-learn
    python examples/digits.py [--epochs 30]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import staticgrad as sg
from staticgrad import data, nn, optim

MISSING = ("examples/digits.py needs scikit-learn for its bundled 8x8 digits (no download): "
           "pip install scikit-learn")


def load_digits():
    """(images as rows of 64 values in [0, 1], integer labels), or None without scikit-learn."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        return None
    bunch = sklearn_digits()
    return bunch.data / 16.0, bunch.target.astype(np.int64)


def main(argv=None):
    parser = argparse.ArgumentParser(description="8x8 digits with a 64-128-10 MLP")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    loaded = load_digits()
    if loaded is None:
        print(MISSING, file=sys.stderr)
        return None
    X, y = loaded
    X_train, X_test, y_train, y_test = data.train_test_split(X, y, test_fraction=0.25, seed=args.seed)
    print(f"{len(X_train)} training and {len(X_test)} test images of 8x8 pixels")

    x = sg.placeholder((None, 64), name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    model = nn.MLP([64, 128, 10], activation="relu", seed=args.seed)
    logits = model(x)
    loss = nn.softmax_cross_entropy(logits, t)
    step = sg.compile(loss, inputs=[x, t], updates=optim.Adam(model, lr=1e-3).updates(loss))
    predict = sg.compile(logits, inputs=[x])

    def log(epoch, mean_loss, metrics):
        if epoch == 1 or epoch % max(args.epochs // 5, 1) == 0:
            print(f"epoch {epoch:3d}  loss {mean_loss:.4f}  test accuracy {metrics['test_acc']:.4f}")

    batches = data.batches(X_train, y_train, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    data.fit(step, batches, epochs=args.epochs,
             validate=lambda: {"test_acc": nn.accuracy(predict(X_test), y_test)}, log=log)
    accuracy = nn.accuracy(predict(X_test), y_test)
    print(f"test accuracy {accuracy:.4f} ({int(round(accuracy * len(X_test)))} of {len(X_test)} digits right)")
    return {"accuracy": accuracy}


if __name__ == "__main__":
    main()
