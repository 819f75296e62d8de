"""What each loop's body computed, iteration by iteration, as the text blocks ``trace`` prints."""
from __future__ import annotations

from .loopinfo import input_roles, title_of


def flatten(records, path=()) -> list:
    """[(path, Iterations)] for every loop body in ``records`` ({loop id: {attribute: Iterations}}) and
    the loops inside them, outer loops first; ``path`` is ((loop label, attribute, iteration), ...)."""
    out = []
    stack = [(path, records)]
    while stack:
        where, found = stack.pop(0)
        for loop_id in sorted(found):
            for record in found[loop_id].values():
                if not record.count:
                    continue        # (a branch not taken)
                out.append((where, record))
                for k, _, inner in record.shown:
                    if inner:
                        stack.append((where + ((record.loop.label(), record.attr, k),), inner))
    return out


def heading(path, record) -> str:
    loop = record.loop
    where = "".join(f" in iteration {k} of {label}" + (f" {attr}" if attr != "body" else "")
                    for label, attr, k in reversed(path))
    shown = "all shown" if len(record.shown) == record.count else f"the first and last {record.keep} shown"
    return (f"loop {loop.label()}: {title_of(loop)}, {loop.role}, built at {loop.source or '?'}{where}: "
            f"{record.attr}, {record.count} iteration{'s' if record.count != 1 else ''} ({shown})")


def block(path, record, fmt) -> str:
    """One loop body's table: a row per body node per iteration shown, in the order they ran."""
    graph = record.graph
    roles = {graph.inputs[k]: text for (attr, k), text in input_roles(record.loop).items()
             if attr == record.attr and k < len(graph.inputs)}
    outputs = {}
    for k, o in enumerate(graph.outputs):
        outputs.setdefault(o, []).append(str(k))
    cells = [("iteration", "node", "op", "value")]
    previous = None
    for k, values, _ in record.shown:
        if previous is not None and k != previous + 1:
            cells.append(("...", f"({k - previous - 1} iterations not recorded)", "", ""))
        previous = k
        for i, node in graph.nodes.items():
            if node.op == "constant" and i not in outputs:
                continue
            label = roles.get(i, node.label())
            if i in outputs:
                label += f" -> output {', '.join(outputs[i])}"
            cells.append((str(k), label, node.op, fmt(values.get(i))))
    widths = [max(len(c[j]) for c in cells) for j in range(3)]
    lines = [heading(path, record)]
    lines += ["  ".join(c[j].ljust(widths[j]) for j in range(3)) + "  " + c[3] for c in cells]
    lines.insert(2, "-" * len(lines[1]))
    return "\n".join(lines)


def find(records, node, attr=None):
    """The :class:`Iterations` of loop ``node`` (a loop tensor or node, one of its ``loop_output`` s,
    or an id) among the outermost loops of ``records``."""
    i = getattr(node, "id", node)
    if i not in records and getattr(node, "inputs", None):
        reads = node.inputs[0]
        i = getattr(reads, "id", reads)      # a loop_output: its loop
    if i not in records:
        raise KeyError(f"node {i} is not a loop whose iterations were recorded (trace with iterations=...)")
    bodies = records[i]
    if attr is None:
        if len(bodies) != 1:
            raise KeyError(f"loop {i} has bodies {sorted(bodies)}: name one")
        attr = next(iter(bodies))
    return bodies[attr]
