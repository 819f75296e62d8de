"""`staticgrad demo`: a 2-8-8-1 MLP learns two moons, compiled once, run batch after batch.

It prints what was compiled, trains with a progress bar (on a terminal; epoch lines otherwise), prints
the test accuracy, and writes into one folder the pictures of the graph (forward and backward told
apart) as DOT and, when Graphviz is installed, SVG, the generated executor source, and the trained model.
"""
from __future__ import annotations

import os
import sys

from . import data, demo_model, nn
from .explain.dot import GraphvizNotFound, save_dot
from .io import save
from .tensor import StaticgradError

NO_GRAPHVIZ = ("no SVG pictures: Graphviz's `dot` program is not installed (apt-get install graphviz / "
               "brew install graphviz / conda install graphviz); the .dot files are written")


def _write_pictures(pictures, out_dir, log):
    """Each (name, function) as name.dot, and as name.svg when Graphviz's dot can render it; a missing
    Graphviz is said once, in one line. Returns the paths written."""
    written, missing = [], False
    for name, fn in pictures:
        base = os.path.join(out_dir, name)
        written.append(save_dot(fn, base + ".dot"))
        if missing:
            continue
        try:
            written.append(save_dot(fn, base + ".svg"))
        except GraphvizNotFound:
            missing = True
            log(NO_GRAPHVIZ)
        except (StaticgradError, OSError) as err:   # a dot that fails on this picture: the .dot file stays
            if os.path.exists(base + ".svg"):
                os.remove(base + ".svg")        # a failed render may leave a half-drawn file behind
            log(f"  (no SVG for {name}: {' '.join(str(err).split())})")
    return written


def run(out_dir="staticgrad-demo", epochs=300, seed=0, batch_size=64, log=print, progress=None):
    """Train, report and write the files; returns a dict with the accuracy and the paths written."""
    X, y = data.make_moons(512, noise=0.15, seed=seed)
    X_test, y_test = data.make_moons(256, noise=0.15, seed=seed + 1)

    # The model is user code of its own (demo_model.py): what the pictures and the code show names its lines.
    built = demo_model.build(seed=seed)
    step, predict = built.step, built.predict
    nodes = step.ir.nodes.values()
    log(f"compiled one training step: {len(step.ir.nodes)} nodes "
        f"({sum(n.role == 'forward' for n in nodes)} forward, {sum(n.role == 'backward' for n in nodes)} backward, "
        f"{sum(n.role == 'update' for n in nodes)} update)")

    # 3. Run it batch after batch. The bar shows on a terminal; elsewhere a few epoch lines do.
    show_bar = progress if progress is not None else bool(getattr(sys.stderr, "isatty", lambda: False)())
    every = max(epochs // 5, 1)

    def epoch_line(epoch, mean_loss, metrics):
        if not show_bar and (epoch == 1 or epoch % every == 0 or epoch == epochs):
            log(f"epoch {epoch:4d}  loss {mean_loss:.4f}  test accuracy {metrics['test_acc']:.3f}")

    batches = data.batches(X, y, batch_size=batch_size, shuffle=True, seed=seed)
    history = data.fit(step, batches, epochs=epochs, progress=show_bar, log=epoch_line,
                       validate=lambda: {"test_acc": nn.accuracy(predict(X_test), y_test)})
    accuracy = nn.accuracy(predict(X_test), y_test)
    final_loss = history.loss[-1] if history.loss else float("nan")
    log(f"final: loss {final_loss:.4f}, test accuracy {accuracy:.3f} on {len(X_test)} points")

    # 4. Look inside: pictures, generated code (a module of its own), and the model saved as JSON + arrays.
    os.makedirs(out_dir, exist_ok=True)
    forward_backward = demo_model.forward_backward(built)
    files = _write_pictures([("moons_forward_backward", forward_backward), ("moons_train_step", step)], out_dir, log)
    # The step's generated code as a module that runs on its own (its arrays in moons_train_step.npz).
    source = step.save_source(os.path.join(out_dir, "moons_train_step.py"))
    files += [source, source[:-3] + ".npz", save({"step": step, "predict": predict},
                                                 os.path.join(out_dir, "moons_model.npz"))]
    log(f"wrote to {out_dir}/:")
    for path in files:
        log(f"  {os.path.basename(path)}")
    log("the pictures tell the forward, backward and update parts apart (see their legend); "
        f"staticgrad.load({os.path.join(out_dir, 'moons_model.npz')!r}) gives the trained functions back "
        "(a dict: 'step' and 'predict')")
    log(f"moons_train_step.py runs on its own: cd {out_dir} && python -c \"import numpy as np, "
        "moons_train_step as m; print(m.run(np.zeros((64, 2)), np.zeros(64))[0])\"")
    return {"accuracy": accuracy, "loss": history.loss, "files": files, "out_dir": out_dir}
