"""Two moons with a 2-8-8-1 MLP: define the model once, compile one training step, run it batch after batch.

    python examples/moons.py [--epochs 200] [--optimizer adam|sgd]
"""
from __future__ import annotations

import argparse

import staticgrad as sg
from staticgrad import data, nn, optim


def main(argv=None):
    parser = argparse.ArgumentParser(description="two moons with a 2-8-8-1 MLP")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    X, y = data.make_moons(600, noise=0.2, seed=args.seed)
    X_train, X_test, y_train, y_test = data.train_test_split(X, y, test_fraction=0.25, seed=args.seed)

    # The model, described once over placeholders: None is the batch size, known only per call.
    x = sg.placeholder((None, 2), name="x")
    t = sg.placeholder((None,), name="t")
    model = nn.MLP([2, 8, 8, 1], activation="tanh", seed=args.seed)
    logits = sg.reshape(model(x), (-1,))
    loss = nn.binary_cross_entropy_with_logits(logits, t)
    if args.optimizer == "adam":
        opt = optim.Adam(model, lr=0.01)
    else:
        opt = optim.SGD(model, lr=0.3, momentum=0.9)

    # Forward, backward and the optimizer's update become one compiled function.
    step = sg.compile(loss, inputs=[x, t], updates=opt.updates(loss))
    predict = sg.compile(logits, inputs=[x])
    print(f"training step: {len(step.ir.nodes)} nodes; prediction: {len(predict.ir.nodes)} nodes")

    def log(epoch, mean_loss, metrics):
        if epoch == 1 or epoch % max(args.epochs // 5, 1) == 0:
            print(f"epoch {epoch:4d}  loss {mean_loss:.4f}  test accuracy {metrics['test_acc']:.3f}")

    batches = data.batches(X_train, y_train, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    history = data.fit(step, batches, epochs=args.epochs,
                       validate=lambda: {"test_acc": nn.accuracy(predict(X_test), y_test)}, log=log)
    accuracy = nn.accuracy(predict(X_test), y_test)
    print(f"test accuracy {accuracy:.3f} on {len(X_test)} points")
    return {"accuracy": accuracy, "loss": history.loss, "step": step, "predict": predict}


if __name__ == "__main__":
    main()
