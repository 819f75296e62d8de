"""Handwritten digits (the 8x8 images bundled with scikit-learn) with a small convolutional net.

Two 3x3 convolutions, a 2x2 max pool and a linear layer, trained with Adam through one compiled step
(forward, backward and the update of every parameter in one call), on the training images and their
copies moved one pixel up, down, left and right (``--no-shifts``: the images alone). scikit-learn is an
optional extra, used only for its bundled data (nothing is downloaded):
    pip install scikit-learn
    python examples/cnn_digits.py [--epochs 8]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import staticgrad as sg
from staticgrad import data, nn, optim

MISSING = ("examples/cnn_digits.py needs scikit-learn for its bundled 8x8 digits (no download): "
           "pip install scikit-learn")


def load_digits():
    """(images (N, 1, 8, 8) in [0, 1], float32; integer labels), or None without scikit-learn."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        return None
    bunch = sklearn_digits()
    return (bunch.images[:, None] / 16.0).astype(np.float32), bunch.target.astype(np.int64)


def with_shifts(X, y):
    """The images (N, 1, H, W) and four copies moved by one pixel (zeros moved in), with their labels."""
    copies = [X]
    for axis, step in ((2, 1), (2, -1), (3, 1), (3, -1)):
        moved = np.roll(X, step, axis=axis)
        edge = [slice(None)] * 4
        edge[axis] = 0 if step == 1 else -1
        moved[tuple(edge)] = 0
        copies.append(moved)
    return np.concatenate(copies), np.tile(y, len(copies))


def make_model(seed=0, width=16):
    rng = np.random.default_rng(seed)
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, seed=rng, dtype="float32"), sg.relu,             # 8x8
        nn.Conv2d(width, 2 * width, 3, padding=1, seed=rng, dtype="float32"), sg.relu,
        nn.MaxPool2d(2),                                                                   # 4x4
        nn.Flatten(),
        nn.Linear(2 * width * 16, 10, seed=rng, dtype="float32"),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description="8x8 digits with a small CNN")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--width", type=int, default=16, help="channels of the first convolution")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-shifts", action="store_true", help="train on the images alone")
    args = parser.parse_args(argv)

    loaded = load_digits()
    if loaded is None:
        print(MISSING, file=sys.stderr)
        return None
    X, y = loaded
    X_train, X_test, y_train, y_test = data.train_test_split(X, y, test_fraction=0.25, seed=args.seed)
    print(f"{len(X_train)} training and {len(X_test)} test images of 8x8 pixels")
    if not args.no_shifts:
        X_train, y_train = with_shifts(X_train, y_train)
        print(f"{len(X_train)} training images with the copies moved by one pixel")

    x = sg.placeholder((None, 1, 8, 8), dtype="float32", name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    model = make_model(args.seed, args.width)
    print(model)
    logits = model(x)
    loss = nn.softmax_cross_entropy(logits, t)
    step = sg.compile(loss, inputs=[x, t], updates=optim.Adam(model, lr=args.lr).updates(loss))
    predict = sg.compile(logits, inputs=[x])

    def log(epoch, mean_loss, metrics):
        if epoch == 1 or epoch % max(args.epochs // 5, 1) == 0:
            print(f"epoch {epoch:3d}  loss {mean_loss:.4f}  test accuracy {metrics['test_acc']:.4f}")

    batches = data.batches(X_train, y_train, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    history = data.fit(step, batches, epochs=args.epochs,
                       validate=lambda: {"test_acc": nn.accuracy(predict(X_test), y_test)}, log=log)
    accuracy = nn.accuracy(predict(X_test), y_test)
    print(f"test accuracy {accuracy:.4f} ({int(round(accuracy * len(X_test)))} of {len(X_test)} digits right)")
    return {"accuracy": accuracy, "loss": history.loss}


if __name__ == "__main__":
    main()
