"""jax.jit versions of the workloads: value_and_grad under jit, float64 enabled (the workloads are float64
except B and V1, whose arrays are float32 and stay so)."""
from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402  (after the x64 switch)
import numpy as np  # noqa: E402

from ..workloads import (  # noqa: E402
    A_PARAM_NAMES,
    B_LR,
    B_PARAM_NAMES,
    CHAIN_SCALE,
    CNN_PARAM_NAMES,
    RNN_PARAM_NAMES,
    Prepared,
    Stopwatch,
)


def versions():
    import jaxlib
    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "devices": [str(d) for d in jax.devices()]}


def _loss_a(params, X, y):
    W, b1, U, d, v, b = params
    h = jax.nn.sigmoid(X @ W.T + b1)
    g = jax.nn.sigmoid(h @ U.T + d)
    err = g @ v + b - y
    return jnp.mean(err * err)


def _loss_b(params, X, t):
    W1, b1, W2, b2, W3, b3 = params
    a1 = jax.nn.relu(X @ W1 + b1)
    a2 = jax.nn.relu(a1 @ W2 + b2)
    logp = jax.nn.log_softmax(a2 @ W3 + b3, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, t[:, None], axis=-1))


def _loss_rnn(params, X):
    """R1/R2 the way JAX users write an RNN: the step is a function, lax.scan runs it over the steps."""
    Wx, Wh, b = params

    def step(h, x):
        h = jnp.tanh(x @ Wx + h @ Wh + b)
        return h, h
    _, hs = jax.lax.scan(step, jnp.zeros((X.shape[1], Wh.shape[0]), X.dtype), X)
    return 0.5 * jnp.mean(hs * hs)


def _loss_cnn(params, X, t):
    """V1 with lax.conv_general_dilated (NCHW images, OIHW kernels, as torch's) and lax.reduce_window."""
    w1, b1, w2, b2, w3, b3 = params

    def conv(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y + b[None, :, None, None]

    def pool(x):
        return jax.lax.reduce_window(x, np.array(-np.inf, x.dtype), jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    a = pool(jax.nn.relu(conv(X, w1, b1)))
    a = pool(jax.nn.relu(conv(a, w2, b2)))
    logp = jax.nn.log_softmax(a.reshape(a.shape[0], -1) @ w3 + b3, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, t[:, None], axis=-1))


def _sgd_step(params, X, t):
    loss, grads = jax.value_and_grad(_loss_b)(params, X, t)
    return loss, [p - B_LR * g for p, g in zip(params, grads)]


def prepare(workload, data) -> Prepared:
    """One-time costs: ``build`` is tracing and lowering (jit(...).lower), ``compile`` the XLA compile;
    the timed calls then go through the ordinary jitted function, whose first call is ``first_call``."""
    kind = workload.kind
    sw = Stopwatch()
    if kind == "mlp_small":
        fn = jax.jit(jax.value_and_grad(_loss_a))
        args = ([jnp.asarray(data[k]) for k in A_PARAM_NAMES], jnp.asarray(data["X"]), jnp.asarray(data["y"]))
    elif kind == "mlp_sgd":
        fn = jax.jit(_sgd_step)
        args = ([jnp.asarray(data[k]) for k in B_PARAM_NAMES], jnp.asarray(data["X"]), jnp.asarray(data["t"]))
    elif kind == "chain":
        cycles = workload.cycles

        def loss_chain(x):
            h = x
            for _ in range(cycles):
                h = jnp.tanh(jnp.sin(h) * CHAIN_SCALE + x)
            return jnp.sum(h)
        fn = jax.jit(jax.value_and_grad(loss_chain))
        args = (jnp.asarray(data["x"]),)
    elif kind == "empty":
        fn = jax.jit(lambda x: x + 1.0)
        args = (jnp.asarray(data["x"]),)
    elif kind == "rnn":
        fn = jax.jit(jax.value_and_grad(_loss_rnn))
        args = ([jnp.asarray(data[k]) for k in RNN_PARAM_NAMES], jnp.asarray(data["X"]))
    elif kind == "cnn":
        fn = jax.jit(jax.value_and_grad(_loss_cnn))
        args = ([jnp.asarray(data[k]) for k in CNN_PARAM_NAMES], jnp.asarray(data["X"]), jnp.asarray(data["t"]))
    else:
        raise ValueError(f"unknown workload kind {kind!r}")
    lowered = fn.lower(*args)
    sw.lap("build")
    compiled = lowered.compile()
    sw.lap("compile")
    notes = {"first_call_note": "the jitted function's own first call (cache lookup or recompile)"}
    if kind == "rnn":
        notes["xla_memory"] = _memory_analysis(compiled)

    if kind == "mlp_sgd":
        state = {"params": args[0]}
        X, t = args[1], args[2]

        def call():
            loss, state["params"] = fn(state["params"], X, t)
            return jax.block_until_ready(loss)

        def check():
            loss, new = fn(args[0], X, t)
            return [np.asarray(loss)] + [np.asarray(n) - np.asarray(p) for n, p in zip(new, args[0])]
    elif kind == "empty":
        def call():
            return jax.block_until_ready(fn(*args))

        def check():
            return [np.asarray(call())]
    else:
        def call():
            return jax.block_until_ready(fn(*args))

        def check():
            loss, grads = call()
            grads = grads if isinstance(grads, (list, tuple)) else [grads]
            return [np.asarray(loss)] + [np.asarray(g) for g in grads]

    sw.skip()
    call()
    sw.lap("first_call")
    xla = notes.get("xla_memory", {})
    reported = (xla["temp_size_in_bytes"] + xla["output_size_in_bytes"]
                if xla.get("temp_size_in_bytes") is not None and xla.get("output_size_in_bytes") is not None else None)
    return Prepared("jax.jit", call, check, sw, notes, reported_peak=reported)


def _memory_analysis(compiled):
    """XLA's own account of the compiled program's buffers (bytes), where this jaxlib gives one."""
    try:
        stats = compiled.memory_analysis()
    except Exception as err:  # noqa: BLE001  (an optional note: jaxlib versions differ)
        return {"unavailable": f"{type(err).__name__}: {err}"[:200]}
    fields = ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
              "generated_code_size_in_bytes")
    return {f: getattr(stats, f, None) for f in fields} if stats is not None else {"unavailable": "None"}
