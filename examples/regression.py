"""A small regression, twice: a linear model trained by SGD next to numpy's exact least squares, then a
1-32-32-1 MLP fitting a noisy sine curve.

    python examples/regression.py [--epochs 150]
"""
from __future__ import annotations

import argparse

import numpy as np

import staticgrad as sg
from staticgrad import data, nn, optim


def linear(epochs, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(256, 3))
    y = X @ np.array([1.5, -2.0, 0.5]) + 0.7 + rng.normal(scale=0.1, size=256)
    # The exact answer: least squares with a column of ones for the bias.
    exact, *_ = np.linalg.lstsq(np.hstack([X, np.ones((256, 1))]), y, rcond=None)

    x, t = sg.placeholder((None, 3), name="x"), sg.placeholder((None,), name="t")
    model = nn.Linear(3, 1, seed=seed)
    loss = nn.mse(sg.reshape(model(x), (-1,)), t)
    step = sg.compile(loss, inputs=[x, t], updates=optim.SGD(model, lr=0.3, momentum=0.5).updates(loss))
    # Full-batch steps: without minibatch noise, gradient descent settles on the exact minimizer.
    data.fit(step, [(X, y)], epochs=epochs)
    learned = np.append(model.weight.value[:, 0], model.bias.value)
    print("linear model y = x @ w + b:")
    print(f"   {'':<8}{'least squares':>16}{'staticgrad SGD':>16}")
    for name, a, b in zip(["w1", "w2", "w3", "b"], exact, learned):
        print(f"   {name:<8}{a:>16.5f}{b:>16.5f}")
    return float(np.max(np.abs(learned - exact)))


def sine(epochs, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(400, 1))
    y = np.sin(X[:, 0]) + rng.normal(scale=0.1, size=400)
    X_train, X_test, y_train, y_test = data.train_test_split(X, y, test_fraction=0.25, seed=seed)

    x, t = sg.placeholder((None, 1), name="x"), sg.placeholder((None,), name="t")
    model = nn.MLP([1, 32, 32, 1], activation="tanh", seed=seed)
    pred = sg.reshape(model(x), (-1,))
    loss = nn.mse(pred, t)
    step = sg.compile(loss, inputs=[x, t], updates=optim.Adam(model, lr=0.02).updates(loss))
    predict = sg.compile(pred, inputs=[x])
    data.fit(step, data.batches(X_train, y_train, batch_size=32, shuffle=True, seed=seed), epochs=epochs)
    rmse = float(np.sqrt(np.mean((predict(X_test) - y_test) ** 2)))
    clean = float(np.sqrt(np.mean((predict(X_test) - np.sin(X_test[:, 0])) ** 2)))
    print(f"MLP on sin(x) + noise (std 0.1): test RMSE {rmse:.3f} against the noisy targets, "
          f"{clean:.3f} against sin(x) itself")
    return rmse, clean


def main(argv=None):
    parser = argparse.ArgumentParser(description="linear and MLP regression")
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    gap = linear(args.epochs, args.seed)
    print(f"largest difference from least squares: {gap:.2e}\n")
    rmse, clean = sine(args.epochs, args.seed)
    return {"linear_gap": gap, "rmse": rmse, "rmse_clean": clean}


if __name__ == "__main__":
    main()
