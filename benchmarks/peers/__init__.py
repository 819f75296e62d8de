"""Peers: other frameworks (and staticgrad's optional numba backend), run only in the peers environment.

PEERS maps the name used in tables and JSON to (module, function) preparing a workload. Nothing here is
imported by the package or by the main benchmark process, except this file (plain data), which both
the main process and the peer processes read to skip a pair no code was written for.
"""
PEERS = {
    "torch": ("benchmarks.peers.torch_peer", "prepare"),
    "torch.compile": ("benchmarks.peers.torch_peer", "prepare_compiled"),
    "jax.jit": ("benchmarks.peers.jax_peer", "prepare"),
    "pytensor": ("benchmarks.peers.pytensor_peer", "prepare"),
    "staticgrad[numba]": ("benchmarks.impl_staticgrad", "prepare_numba"),
    "tensorflow": ("benchmarks.peers.tf_peer", "prepare"),
}

# The workload kinds a peer is written for, where it is not all of them, and why.
ONLY_KINDS = {
    "tensorflow": ({"rnn", "cnn"}, "the TF1 graph-mode peer (tf.compat.v1) is written for R1, R2 and V1 only"),
}
NOT_KINDS = {
    "torch.compile": ({"rnn"}, "R1 and R2 compare torch eager; torch.compile would unroll the Python loop "
                               "over all steps (issue 19 names torch eager)"),
    "pytensor": ({"cnn"}, "PyTensor 3 has no conv2d or max pooling for batches of multichannel images (the "
                          "pytensor.tensor.nnet module that had them is gone; pytensor.tensor.signal.convolve2d "
                          "convolves single 2-D arrays)"),
}


def skip_reason(impl, kind):
    """Why ``impl`` has no version of workloads of ``kind`` (None when it has one)."""
    if impl in ONLY_KINDS and kind not in ONLY_KINDS[impl][0]:
        return ONLY_KINDS[impl][1]
    if impl in NOT_KINDS and kind in NOT_KINDS[impl][0]:
        return NOT_KINDS[impl][1]
    return None
