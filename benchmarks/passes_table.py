"""What each pass does to two real graphs: node count, FLOPs and planned peak memory after every pass.

    python -m benchmarks.passes_table          (prints a markdown table, writes results/passes.json)

The MLP is workload B's 784-256-256-10 ReLU training step at batch 128 (float32, SGD updates); the sigmoid
network is the 20-parameter 2-3-2-1 network of example 3 of docs/worked_examples.md with its 2 samples (float64).
Costs use the concrete sizes of those feeds. "peak planned" is the most bytes of intermediates live at
once with memory planning (results reuse dead buffers through out=); "unplanned" keeps every
intermediate until the call returns.
"""
from __future__ import annotations

import json
import os

import staticgrad as sg
from staticgrad.graph import Graph
from staticgrad.lower.costs import costs
from staticgrad.lower.shapes import concrete_shapes
from staticgrad.passes import DEFAULT, pass_name, resolve

from . import impl_staticgrad, workloads


def _graphs():
    out = {}
    for key, label in (("B", "MLP 784-256-256-10 SGD step, batch 128"), ("A", "20-param sigmoid net, 2 samples")):
        w = workloads.get(key)
        data = workloads.make_data(w)
        if key == "B":
            inputs, params, loss = impl_staticgrad._build_b(data)
            grads = sg.grad(loss, params)
            roots, updates = [loss], [(p, p - workloads.B_LR * g) for p, g in zip(params, grads)]
            feed_shapes = [data["X"].shape, data["t"].shape]
        else:
            inputs, params, loss = impl_staticgrad._build_a(data)
            roots, updates = [loss] + sg.grad(loss, params), []
            feed_shapes = [data["X"].shape, data["y"].shape]
        graph = Graph.from_tensors(roots, updates, inputs)
        graph.assign_roles()
        out[label] = (graph, feed_shapes)
    return out


def measure():
    table = {}
    for label, (graph, feed_shapes) in _graphs().items():
        rows = []

        def row(name, g):
            shapes = concrete_shapes(g, list(g.nodes), feed_shapes)
            c = costs(g, shapes)
            rows.append({"after": name, "nodes": len(g.nodes), "flops": c["flops"],
                         "peak_planned": c["peak_bytes"], "peak_unplanned": c["peak_bytes_unplanned"],
                         "matmul": g.count("matmul")})
        row("(as built)", graph)
        for fn in resolve(DEFAULT):
            graph, stats = fn(graph)
            row(stats.name if stats else pass_name(fn), graph)
        table[label] = rows
    return table


def markdown(table) -> str:
    lines = []
    for label, rows in table.items():
        lines += [f"**{label}**", "", "| after pass | nodes | matmul | FLOPs | peak bytes planned | unplanned |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['after']} | {r['nodes']} | {r['matmul']} | {r['flops']:,} | "
                         f"{r['peak_planned']:,} | {r['peak_unplanned']:,} |")
        lines.append("")
    return "\n".join(lines)


def main():
    table = measure()
    print(markdown(table))
    path = os.path.join(os.path.dirname(__file__), "results", "passes.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(table, fh, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
