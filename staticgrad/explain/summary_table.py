"""What ``sg.summary`` returns: the rows and totals, shown as a box table (``str``) or an HTML table."""
from __future__ import annotations

import html
import math

ROLES = ("forward", "backward", "update")
_FLOPS_HEADERS = {"forward": "Forward FLOPs", "backward": "Backward FLOPs", "update": "Update FLOPs"}


def _num(n) -> str:
    return "?" if n is None else f"{n:,}"


def _size(n) -> str:
    """Bytes with a readable unit: "0 B", "512 B", "397.6 KiB"."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"


class Summary:
    """A model's layers and totals, as ``sg.summary`` found them.

    ``rows``: one dict per layer: ``layer`` (its name scope, or the sub-module's path), ``type`` (the
    module's class, where known), ``params`` (parameters and state the layer reads or updates itself),
    and for a graph ``output_shape`` and its FLOPs by role (``forward``, ``backward``, ``update``), as
    written; for a module without a graph ``weights`` (the parameters' shapes) and ``buffers``.
    Totals: ``total_params`` (trainable + non-trainable + optimizer), ``trainable_params``,
    ``non_trainable_params`` (buffers: running statistics, random keys), ``optimizer_params`` (state that
    only the updates read: moments, the learning rate, step counts), ``param_bytes`` (those, in bytes),
    ``flops`` (per call of the optimized plan; None for a module without a graph), ``flops_by_role``,
    ``flops_as_written`` (the rows' sum), ``peak_bytes`` (of intermediates, the memory planner's figure),
    ``sizes`` ({input: the shape the figures are for}) and ``exact_sizes`` (False: every unknown size was
    taken as 1, so the figures are per example).
    """

    def __init__(self, title, rows, kind="function"):
        self.title, self.rows, self.kind = title, rows, kind
        self.total_params = self.trainable_params = self.non_trainable_params = self.optimizer_params = 0
        self.param_bytes = {"trainable": 0, "non_trainable": 0, "optimizer": 0}
        self.flops = self.flops_as_written = self.peak_bytes = None
        self.flops_by_role, self.sizes, self.exact_sizes = {}, {}, True
        self.notes = []

    # ------------------------------------------------------------------ counting
    def count_state(self, graph):
        """Count a compiled graph's parameters: trainable (read by the model), non-trainable (made with
        requires_grad=False), optimizer (trainable but read by the updates only)."""
        counts, sizes = dict.fromkeys(self.param_bytes, 0), dict.fromkeys(self.param_bytes, 0)
        for i in graph.parameter_ids():
            node = graph.nodes[i]
            kind = "non_trainable" if not node.requires_grad else "optimizer" if node.role == "update" else "trainable"
            counts[kind] += math.prod(node.shape)
            sizes[kind] += math.prod(node.shape) * node.dtype.itemsize
        self._set_counts(counts, sizes)

    def count_module(self, model):
        counts = {"trainable": 0, "non_trainable": 0, "optimizer": 0}
        sizes = dict(counts)
        for kind, tensors in (("trainable", model.parameters()), ("non_trainable", model.buffers())):
            counts[kind] = sum(math.prod(t.shape) for t in tensors)
            sizes[kind] = sum(math.prod(t.shape) * t.dtype.itemsize for t in tensors)
        self._set_counts(counts, sizes)

    def _set_counts(self, counts, sizes):
        self.trainable_params, self.non_trainable_params = counts["trainable"], counts["non_trainable"]
        self.optimizer_params = counts["optimizer"]
        self.total_params = sum(counts.values())
        self.param_bytes = sizes

    def set_sizes(self, names, shapes, exact):
        self.sizes, self.exact_sizes = dict(zip(names, shapes)), bool(exact)

    # ------------------------------------------------------------------ showing
    def columns(self) -> list:
        """[(row key, header, right-aligned)] of the table."""
        if self.kind == "module":
            cols = [("layer", "Layer (type)", False), ("weights", "Weights", False), ("params", "Param #", True)]
            if any(r.get("buffers") for r in self.rows):
                cols.append(("buffers", "Buffer #", True))
            return cols
        cols = [("layer", "Layer (type)", False), ("output_shape", "Output shape", False), ("params", "Param #", True)]
        roles = [r for r in ROLES if self.flops_by_role.get(r) or any(row[r] for row in self.rows)] or ["forward"]
        if roles == ["forward"]:
            return cols + [("forward", "FLOPs", True)]
        return cols + [(r, _FLOPS_HEADERS[r], True) for r in roles]

    def cells(self) -> list:
        """The table's rows as lists of strings, in ``columns()`` order."""
        out = []
        for row in self.rows:
            cells = []
            for key, _, _ in self.columns():
                value = row.get(key, "")
                if key == "layer" and row.get("type"):
                    value = f"{value} ({row['type']})"
                cells.append(_num(value) if isinstance(value, int) else str(value))
            out.append(cells)
        return out

    def totals(self) -> list:
        """The lines under the table."""
        b = self.param_bytes
        lines = [f"Total params: {self.total_params:,} ({_size(sum(b.values()))})",
                 f"Trainable params: {self.trainable_params:,} ({_size(b['trainable'])})",
                 f"Non-trainable params: {self.non_trainable_params:,} ({_size(b['non_trainable'])})"]
        if self.optimizer_params:
            lines.append(f"Optimizer params: {self.optimizer_params:,} ({_size(b['optimizer'])})")
        if self.kind == "module":
            return lines + self.notes
        sizes = ", ".join(f"{name} {_shape(s)}" for name, s in self.sizes.items()) or "(no inputs)"
        if not self.exact_sizes:
            sizes += ": every unknown size taken as 1, so the figures below are per example (give batch= or feeds=)"
        roles = " · ".join(f"{role} {n:,}" for role, n in self.flops_by_role.items())
        peak = "?" if self.peak_bytes is None else f"{self.peak_bytes:,} ({_size(self.peak_bytes)})"
        lines += [f"Sizes: {sizes}",
                  f"FLOPs per call: {_num(self.flops)} ({roles})",
                  f"FLOPs as written: {_num(self.flops_as_written)} (the rows' sum, before the passes)",
                  f"Peak bytes: {peak}, intermediates live at once in the plan"]
        if self.flops_as_written is None:       # (no graph as written: the rows are the plan's)
            del lines[-2]
        return lines + self.notes

    def __str__(self):
        return "\n".join([self.title, box([h for _, h, _ in self.columns()], self.cells(),
                                          [right for _, _, right in self.columns()])] + self.totals())

    def __repr__(self):
        return str(self)

    def _repr_html_(self):
        cols = self.columns()
        head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in cols)
        body = "".join("<tr>" + "".join(f'<td style="text-align:{"right" if right else "left"}">{html.escape(c)}</td>'
                                        for c, (_, _, right) in zip(cells, cols)) + "</tr>"
                       for cells in self.cells())
        return (f"<div><b>{html.escape(self.title)}</b><table><thead><tr>{head}</tr></thead><tbody>{body}"
                f"</tbody></table><pre>{html.escape(chr(10).join(self.totals()))}</pre></div>")


def _shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def box(headers, rows, right) -> str:
    """A table drawn with box characters: the header, a rule, the rows."""
    widths = [max([len(h)] + [len(r[k]) for r in rows]) for k, h in enumerate(headers)]

    def line(cells):
        return "│" + "│".join(f" {c:>{w}} " if r else f" {c:<{w}} " for c, w, r in zip(cells, widths, right)) + "│"

    def rule(left, mid, end):
        return left + mid.join("─" * (w + 2) for w in widths) + end

    return "\n".join([rule("┌", "┬", "┐"), line(headers), rule("├", "┼", "┤")] + [line(r) for r in rows]
                     + [rule("└", "┴", "┘")])
