"""A CNN with batch norm and dropout on 28x28 pictures of shapes this script draws itself.

Five classes (circle, square, triangle, cross, ring) at random places, sizes, angles and brightness, in
noise. The model is built twice from one set of layers: ``model.train()`` then a compiled training step
(batch statistics, dropout, and the running statistics moved by every call), ``model.eval()`` then a
compiled prediction (running statistics, no dropout). The training curve, loss and test accuracy per
epoch, is printed and written as a CSV and a small SVG:
    python examples/cnn_shapes.py [--epochs 10] [--out curve]     (writes curve.csv and curve.svg)
"""
from __future__ import annotations

import argparse
import csv

import numpy as np

import staticgrad as sg
from staticgrad import data, nn, optim

CLASSES = ("circle", "square", "triangle", "cross", "ring")


def _inside(label, u, v):
    """Whether the points (u, v), in a shape's own frame scaled to its radius, lie in a shape of ``label``."""
    name = CLASSES[label]
    if name == "circle":
        return u * u + v * v <= 1.0
    if name == "square":
        return np.maximum(np.abs(u), np.abs(v)) <= 0.8
    if name == "triangle":                      # three half-planes, their normals 120 degrees apart
        return np.all([u * np.cos(a) + v * np.sin(a) <= 0.5 for a in np.radians([90, 210, 330])], axis=0)
    if name == "cross":
        return ((np.abs(u) <= 0.3) & (np.abs(v) <= 1.0)) | ((np.abs(v) <= 0.3) & (np.abs(u) <= 1.0))
    return (u * u + v * v <= 1.0) & (u * u + v * v >= 0.36)          # ring


def make_shapes(n, size=28, noise=0.15, seed=0):
    """``n`` images (n, 1, size, size), float32 in [0, 1], and their labels (int64): each a shape drawn at
    twice the resolution and averaged down (smooth edges), dimmed at random, in Gaussian noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), n)
    centre = rng.uniform(0.35 * size, 0.65 * size, (n, 2))
    radius = rng.uniform(0.18 * size, 0.3 * size, n)
    angle = rng.uniform(0, 2 * np.pi, n)
    grid = (np.arange(2 * size) + 0.5) / 2
    ys, xs = np.meshgrid(grid, grid, indexing="ij")
    images = np.empty((n, 1, size, size), np.float32)
    for k in range(n):
        dx, dy = xs - centre[k, 0], ys - centre[k, 1]
        c, s = np.cos(angle[k]), np.sin(angle[k])
        u, v = (c * dx + s * dy) / radius[k], (c * dy - s * dx) / radius[k]
        fine = _inside(labels[k], u, v).astype(np.float32)
        images[k, 0] = fine.reshape(size, 2, size, 2).mean(axis=(1, 3)) * rng.uniform(0.5, 1.0)
    images += rng.normal(0.0, noise, images.shape).astype(np.float32)
    return np.clip(images, 0.0, 1.0), labels.astype(np.int64)


def make_model(seed=0, width=16, dropout=0.25):
    rng = np.random.default_rng(seed)
    f32 = {"dtype": "float32"}
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, seed=rng, **f32), nn.BatchNorm2d(width, **f32), sg.relu,
        nn.MaxPool2d(2),                                                                   # 14x14
        nn.Conv2d(width, 2 * width, 3, padding=1, seed=rng, **f32), nn.BatchNorm2d(2 * width, **f32), sg.relu,
        nn.MaxPool2d(2),                                                                   # 7x7
        nn.Flatten(),
        nn.Dropout(dropout, key=seed),
        nn.Linear(2 * width * 7 * 7, len(CLASSES), seed=rng, **f32),
    )


def write_svg(path, rows, width=420, height=220, pad=36):
    """A small chart of the curve: loss (scaled to its first epoch) and test accuracy, per epoch."""
    epochs = [r["epoch"] for r in rows]
    first = max(rows[0]["loss"], 1e-12)

    def points(values):
        span = max(len(values) - 1, 1)
        return " ".join(f"{pad + (width - 2 * pad) * (e - epochs[0]) / span:.1f},"
                        f"{height - pad - (height - 2 * pad) * min(max(v, 0.0), 1.0):.1f}"
                        for e, v in zip(epochs, values))

    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
             f'<text x="{pad - 6}" y="{pad + 4}" text-anchor="end">1</text>',
             f'<text x="{pad - 6}" y="{height - pad + 4}" text-anchor="end">0</text>',
             f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">epoch 1 to {epochs[-1]}</text>',
             f'<polyline fill="none" stroke="#c0504d" stroke-width="2" '
             f'points="{points([r["loss"] / first for r in rows])}"/>',
             f'<polyline fill="none" stroke="#2b6ca3" stroke-width="2" '
             f'points="{points([r["test_acc"] for r in rows])}"/>',
             f'<text x="{width - pad}" y="{pad - 18}" text-anchor="end" fill="#2b6ca3">test accuracy</text>',
             f'<text x="{width - pad}" y="{pad - 6}" text-anchor="end" fill="#c0504d">loss / first epoch\'s</text>',
             "</svg>"]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def write_csv(path, rows):
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["epoch", "loss", "test_acc"])
        writer.writeheader()
        writer.writerows({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description="a CNN with batch norm and dropout on drawn shapes")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--train", type=int, default=3000, help="training images")
    parser.add_argument("--test", type=int, default=600, help="test images")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--width", type=int, default=16, help="channels of the first convolution")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="cnn_shapes_curve", help="writes OUT.csv and OUT.svg")
    args = parser.parse_args(argv)

    X_train, y_train = make_shapes(args.train, seed=args.seed)
    X_test, y_test = make_shapes(args.test, seed=args.seed + 1)
    print(f"{len(X_train)} training and {len(X_test)} test images of 28x28 pixels, classes {', '.join(CLASSES)}")

    model = make_model(args.seed, args.width)
    x = sg.placeholder((None, 1, 28, 28), dtype="float32", name="x")
    t = sg.placeholder((None,), dtype="int64", name="t")
    loss = nn.softmax_cross_entropy(model.train()(x), t)
    opt = optim.Adam(model, lr=args.lr)
    step = sg.compile(loss, inputs=[x, t], updates=opt.updates(loss))
    predict = sg.compile(model.eval()(x), inputs=[x])
    print(model)

    rows = []

    def log(epoch, mean_loss, metrics):
        rows.append({"epoch": epoch, "loss": mean_loss, "test_acc": metrics["test_acc"]})
        print(f"epoch {epoch:3d}  loss {mean_loss:.4f}  test accuracy {metrics['test_acc']:.4f}")
        opt.lr = opt.lr * 0.8          # (the learning rate is a parameter of the step: no recompiling)

    batches = data.batches(X_train, y_train, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    data.fit(step, batches, epochs=args.epochs, log=log,
             validate=lambda: {"test_acc": nn.accuracy(data.predict(predict, X_test, batch_size=256), y_test)})
    write_csv(f"{args.out}.csv", rows)
    write_svg(f"{args.out}.svg", rows)
    print(f"training curve written to {args.out}.csv and {args.out}.svg")
    return {"rows": rows, "accuracy": rows[-1]["test_acc"], "paths": [f"{args.out}.csv", f"{args.out}.svg"]}


if __name__ == "__main__":
    main()
