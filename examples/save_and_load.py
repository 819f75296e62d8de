"""Save a compiled model, load it back, keep training it; checkpoint parameters and restore them.

sg.save writes the optimized graph as JSON plus the parameter arrays as .npy, in one zip file, never a
pickle: loading a file from elsewhere cannot run code.

    python examples/save_and_load.py [--out folder]
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import staticgrad as sg
from staticgrad import data, nn, optim


def main(argv=None):
    parser = argparse.ArgumentParser(description="save, load and checkpoint a compiled model")
    parser.add_argument("--out", default=None, help="folder for the files (default: a temporary one)")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="staticgrad-")
    os.makedirs(out, exist_ok=True)

    X, y = data.make_moons(400, noise=0.2, seed=1)
    x, t = sg.placeholder((None, 2), name="x"), sg.placeholder((None,), name="t")
    model = nn.MLP([2, 16, 1], activation="tanh", seed=0)
    logits = sg.reshape(model(x), (-1,))
    loss = nn.binary_cross_entropy_with_logits(logits, t)
    step = sg.compile(loss, inputs=[x, t], updates=optim.Adam(model, lr=0.02).updates(loss))
    predict = sg.compile(logits, inputs=[x])
    data.fit(step, data.batches(X, y, batch_size=50, shuffle=True, seed=0), epochs=args.epochs)

    # Both functions in one file: once loaded, they share their parameters again (and Adam's state).
    path = sg.save({"step": step, "predict": predict}, os.path.join(out, "moons.npz"))
    print(f"saved {path} ({os.path.getsize(path)} bytes); `unzip -p {path} graph.json` shows the graph")
    loaded = sg.load(path)
    same = np.array_equal(loaded["predict"](X), predict(X))
    print(f"loaded predict gives identical outputs: {same}")

    # Training continues from the same state in both copies, step for step.
    for batch in data.batches(X, y, batch_size=50):
        a, b = step(*batch), loaded["step"](*batch)
    print(f"one more epoch on each: last loss {float(a):.6f} (original) vs {float(b):.6f} (loaded)")

    # Checkpoints: just the parameter values (model and optimizer state), restored into the same graph.
    ckpt = sg.save_parameters(step, os.path.join(out, "moons.ckpt.npz"))
    saved = predict(X)
    data.fit(step, data.batches(X, y, batch_size=50, shuffle=True, seed=5), epochs=5)
    moved = not np.array_equal(predict(X), saved)
    sg.load_parameters(step, ckpt)
    restored = np.array_equal(predict(X), saved)
    print(f"checkpoint {ckpt}: training on changed the model: {moved}; after restoring it is as saved: {restored}")
    return {"identical": same and float(a) == float(b), "moved": moved, "restored": restored, "out": out}

if __name__ == "__main__":
    main()
