"""TensorFlow in TF1 style (tf.compat.v1 graph mode with its v1 control flow), for R1, R2 and V1 only.

The RNN is written as TF1 users wrote one by hand (the way dynamic_rnn works inside): the inputs
unstacked into a TensorArray, a ``while_loop`` whose body reads step t, applies the cell and writes h
into an output TensorArray, ``tf.gradients`` for the backward loop, one ``Session.run`` per step.

The convolutional net (V1) is written as TF1 users on a CPU wrote one: NHWC images (TF's CPU
convolutions take no NCHW input), HWIO kernels, tf.nn.conv2d, tf.nn.max_pool2d, flattened in NHWC
order. The workload's data are in torch's layouts, so they are moved once, before anything is timed:
the images to NHWC, the kernels to HWIO, the linear layer's rows into NHWC flattening order; the
gradients are moved back for the comparison only.
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")       # quiet: the runner reads this process's output
# TF turns its oneDNN kernels on by itself only on CPUs with AVX-512 VNNI, BF16 or AMX; elsewhere (the AMD
# EPYC measured, AVX2) it runs Eigen's convolutions, 3x slower on V1 (25 ms against 8.4). Issue 20 compares
# TF1 with its oneDNN kernels. (R1 and R2 are float64, which oneDNN does not run: no change there.)
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from ..workloads import CNN_PARAM_NAMES, RNN_PARAM_NAMES, Prepared, Stopwatch  # noqa: E402

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


def _cnn_loss(X, t, w1, b1, w2, b2, w3, b3):
    def block(x, w, b):
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, strides=1, padding="SAME"), b))
        return tf.nn.max_pool2d(y, ksize=2, strides=2, padding="VALID")
    a = block(block(X, w1, b1), w2, b2)
    logits = tf.matmul(tf.reshape(a, (-1, int(np.prod(a.shape[1:])))), w3) + b3
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=t, logits=logits))


def _to_tf_layouts(data, p):
    """V1's data in TF's layouts: images NHWC, kernels HWIO, the linear rows in NHWC flattening order."""
    side, channels = p["size"] // 4, p["channels"][-1]
    out = {"X": np.ascontiguousarray(data["X"].transpose(0, 2, 3, 1)), "t": data["t"]}
    for k in CNN_PARAM_NAMES:
        v = data[k]
        if v.ndim == 4:
            v = v.transpose(2, 3, 1, 0)
        elif k == "w3":
            v = v.reshape(channels, side, side, -1).transpose(1, 2, 0, 3).reshape(v.shape)
        out[k] = np.ascontiguousarray(v)
    return out


def _from_tf_layouts(grads, p):
    """The gradients back in torch's layouts (the workload's), for the comparison with the reference."""
    side, channels = p["size"] // 4, p["channels"][-1]
    out = []
    for k, g in zip(CNN_PARAM_NAMES, grads):
        if g.ndim == 4:
            g = g.transpose(3, 2, 0, 1)
        elif k == "w3":
            g = g.reshape(side, side, channels, -1).transpose(2, 0, 1, 3).reshape(g.shape)
        out.append(g)
    return out


def _session(graph):
    """A session on as many threads as the benchmark gives every implementation (0: TF's default)."""
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    config = tf1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    return tf1.Session(graph=graph, config=config)


def prepare(workload, data) -> Prepared:
    if workload.kind == "cnn":
        return _prepare_cnn(workload, data)
    if workload.kind != "rnn":
        raise ValueError(f"the TF1 peer is written for the RNN and CNN workloads only, not {workload.kind!r}")
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


def _prepare_cnn(workload, data) -> Prepared:
    p = workload.params
    moved = _to_tf_layouts(data, p)
    sw = Stopwatch()
    graph = tf.Graph()
    with graph.as_default():
        X = tf1.placeholder(tf.float32, moved["X"].shape, name="X")
        t = tf1.placeholder(tf.int64, moved["t"].shape, name="t")
        params = [tf1.Variable(moved[k], name=k) for k in CNN_PARAM_NAMES]
        loss = _cnn_loss(X, t, *params)
        sw.lap("build")
        grads = tf1.gradients(loss, params)
        sw.lap("grad")
        init = tf1.global_variables_initializer()
    graph.finalize()
    sess = _session(graph)
    sess.run(init)
    fetches, feed = [loss] + grads, {X: moved["X"], t: moved["t"]}
    sw.lap("compile")

    def call():
        return sess.run(fetches, feed)

    def check():
        loss_value, *grad_values = call()
        return [loss_value] + _from_tf_layouts(grad_values, p)

    sw.skip()
    call()
    sw.lap("first_call")
    return Prepared("tensorflow", call, check, sw,
                    {"compile_note": "session creation and variable initialization; TF optimizes the graph "
                                     "(grappler) in the first run",
                     "layouts": "NHWC images, HWIO kernels (moved once, outside the timing)"})
