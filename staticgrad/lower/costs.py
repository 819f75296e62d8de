"""The pass ledger's costs: FLOPs (from each op's registration) and peak bytes of intermediates."""
from __future__ import annotations

from ..ops.registry import REGISTRY
from ..tensor import LEAVES
from .memory import plan_memory
from .shapes import at_sizes, nominal_shapes


def node_flops(node, shapes) -> int:
    """A rough count of floating-point operations for one node (matmul exact, transcendental weighted)."""
    if node.op in LEAVES:
        return 0
    return REGISTRY[node.op].cost(node, shapes)


def costs(graph, shapes=None) -> dict:
    """FLOPs and peak intermediate bytes (with and without memory planning) of ``graph``."""
    order = list(graph.nodes)
    shapes = shapes or nominal_shapes(graph, order)
    concrete, order = at_sizes(graph, order, shapes)      # what a plan runs
    memory = plan_memory(concrete, order, shapes)
    return {"flops": sum(node_flops(graph.nodes[i], shapes) for i in order),
            "peak_bytes": memory.peak_planned, "peak_bytes_unplanned": memory.peak_unplanned}
