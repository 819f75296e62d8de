"""TensorFlow in TF1 style (tf.compat.v1 graph mode with its v1 control flow), for R1 and R2 only.

The RNN is written as TF1 users wrote one by hand (the way dynamic_rnn works inside): the inputs
unstacked into a TensorArray, a ``while_loop`` whose body reads step t, applies the cell and writes h
into an output TensorArray, ``tf.gradients`` for the backward loop, one ``Session.run`` per step.
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")       # quiet: the runner reads this process's output

import tensorflow as tf  # noqa: E402

from ..workloads import RNN_PARAM_NAMES, Prepared, Stopwatch  # noqa: E402

tf1 = tf.compat.v1
tf1.disable_v2_behavior()        # graph mode, v1 while_loop and variables: this process is TF1's


def versions():
    return {"tensorflow": tf.__version__, "style": "tf.compat.v1 graph mode, v1 control flow"}


def _rnn_loss(X, Wx, Wh, b, steps, batch, hidden):
    xs = tf.TensorArray(tf.float64, size=steps).unstack(X)
    out = tf.TensorArray(tf.float64, size=steps)

    def body(t, h, out):
        h = tf.tanh(tf.matmul(xs.read(t), Wx) + tf.matmul(h, Wh) + b)
        return t + 1, h, out.write(t, h)
    h0 = tf.zeros((batch, hidden), dtype=tf.float64)
    _, _, out = tf1.while_loop(lambda t, h, out: t < steps, body, (tf.constant(0), h0, out))
    hs = out.stack()
    return 0.5 * tf.reduce_mean(hs * hs)


def _session(graph):
    """A session on as many threads as the benchmark gives every implementation (0: TF's default)."""
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    config = tf1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    return tf1.Session(graph=graph, config=config)


def prepare(workload, data) -> Prepared:
    if workload.kind != "rnn":
        raise ValueError(f"the TF1 peer is written for the RNN workloads only, not {workload.kind!r}")
    p = workload.params
    sw = Stopwatch()
    graph = tf.Graph()
    with graph.as_default():
        X = tf1.placeholder(tf.float64, data["X"].shape, name="X")
        params = [tf1.Variable(data[k], name=k) for k in RNN_PARAM_NAMES]
        loss = _rnn_loss(X, *params, p["steps"], p["batch"], p["hidden"])
        sw.lap("build")
        grads = tf1.gradients(loss, params)
        sw.lap("grad")
        init = tf1.global_variables_initializer()
    graph.finalize()
    sess = _session(graph)
    sess.run(init)
    fetches, feed = [loss] + grads, {X: data["X"]}
    sw.lap("compile")

    def call():
        return sess.run(fetches, feed)

    def check():
        return list(call())

    sw.skip()
    call()
    sw.lap("first_call")
    return Prepared("tensorflow", call, check, sw,
                    {"compile_note": "session creation and variable initialization; TF optimizes the graph "
                                     "(grappler) in the first run"})
