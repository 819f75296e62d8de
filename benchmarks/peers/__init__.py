"""Peers: other frameworks (and staticgrad's optional numba backend), run only in the peers environment.

PEERS maps the name used in tables and JSON to (module, function) preparing a workload. Nothing here is
imported by the package or by the main benchmark process.
"""
PEERS = {
    "torch": ("benchmarks.peers.torch_peer", "prepare"),
    "torch.compile": ("benchmarks.peers.torch_peer", "prepare_compiled"),
    "jax.jit": ("benchmarks.peers.jax_peer", "prepare"),
    "pytensor": ("benchmarks.peers.pytensor_peer", "prepare"),
    "staticgrad[numba]": ("benchmarks.impl_staticgrad", "prepare_numba"),
}
