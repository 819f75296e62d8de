"""Folding a convolution's bias add and ReLU into the convolution's own kernel, and a ReLU's gradient
through max pooling's."""
from __future__ import annotations

from ..graph import Node
from ..ops.conv_fused import bias_fits
from ..ops.im2col import by_rows
from ..ops.registry import REGISTRY
from ..rewrite import is_scalar_const, rewrite_graph, same_type
from .stats import PassStats


def run(graph):
    """Replace ``relu(conv2d(x, w) + b)`` and ``conv2d(x, w) + b`` by one node ("conv2d+add+relu",
    "conv2d+add") when ``b`` holds one number per output channel and nothing else reads the conv2d's
    result (nor the add's, to fold the relu): outputs, updates and every other node are unchanged, and the
    fused kernel gives the same bits. The folded node keeps the id, name and line of the last node it
    replaces; the others are dropped. Then a convolution and its weight gradient share their patches
    (see :func:`share_patches`).
    """
    graph, masked = rewrite_graph(graph, {"where": [relu_grad_before_pooling]})[:2]
    # (most graphs hold no convolution: then no map of every node's readers, a million lists for a big one)
    if not any(n.op.startswith("conv2d") for n in graph.nodes.values()):
        details = {"max_pool2d_grad masked": masked} if masked else {}
        return graph, PassStats("fold", changed=masked, details=details)
    users = graph.consumers()
    kept = {i for i in graph.outputs} | {i for pair in graph.updates for i in pair}
    folds = {}          # id of the node to replace -> (op, inputs, conv node)
    for node in graph.nodes.values():
        conv = _conv_plus_bias(graph, node, users, kept)
        if conv is None:
            continue
        bias = node.inputs[1] if node.inputs[0] == conv.id else node.inputs[0]
        (after,) = users[node.id] if len(users[node.id]) == 1 else (None,)
        relu = after is not None and node.id not in kept and graph.nodes[after].op == "relu"
        target = after if relu else node.id
        folds[target] = ("conv2d+add+relu" if relu else "conv2d+add", conv.inputs[:2] + [bias], conv)
    if folds:
        graph = graph.rebuild(lambda new, node: _fold(new, node, folds)).without_dead()
    graph, shared = share_patches(graph)
    details = {"conv2d+add+relu": sum(op.endswith("relu") for op, _, _ in folds.values())}
    details["conv2d+add"] = len(folds) - details["conv2d+add+relu"]
    details["max_pool2d_grad masked"] = masked
    details["patches shared"] = shared
    return graph, PassStats("fold", changed=len(folds) + masked + shared,
                            details={k: v for k, v in details.items() if v})


def _fold(new, node, folds):
    if node.id not in folds:
        return node.id
    op, inputs, conv = folds[node.id]
    new.add(node.copy(op=op, inputs=inputs, attrs=dict(conv.attrs)))
    return node.id


_FORWARD = {"conv2d": "conv2d_from_patches", "conv2d+add": "conv2d_from_patches+add",
            "conv2d+add+relu": "conv2d_from_patches+add+relu"}


def share_patches(graph):
    """A conv2d (or a fused one) and the conv2d_weight of the same input, attributes and kernel size, in
    im2col's row layout (stride 1, patches at least twice the output channels: both then copy the same
    patches), read one "conv2d_patches" node: "conv2d_from_patches[+add[+relu]]" and
    "conv2d_weight_from_patches" keep the ids of the nodes they replace and give the same bits."""
    pairs = _patch_pairs(graph)
    if not pairs:
        return graph, 0
    made = {}           # conv node id -> the patches node's id

    def visit(new, node):
        if node.id in made:
            a, w, x = node.attrs, new.nodes[node.inputs[1]], new.nodes[node.inputs[0]]
            attrs = {"kernel": tuple(w.shape[2:]), "padding": a["padding"], "dilation": a["dilation"]}
            shape, dtype = REGISTRY["conv2d_patches"].infer([x], **attrs)
            made[node.id] = new.add(Node("conv2d_patches", [x.id], attrs, shape, dtype, role=node.role,
                                         source=node.source, scope=node.scope))
            new.add(node.copy(op=_FORWARD[node.op], inputs=[made[node.id]] + node.inputs[1:],
                              attrs={"groups": a["groups"], "width": node.shape[3]}))
        elif node.id in pairs:
            new.add(node.copy(op="conv2d_weight_from_patches", inputs=[made[pairs[node.id]], node.inputs[1]],
                              attrs={"groups": node.attrs["groups"]}))
        return node.id

    made.update((conv, None) for conv in pairs.values())
    return graph.rebuild(visit), len(pairs)


def _patch_pairs(graph):
    """{id of a conv2d_weight node: id of the conv2d-like node whose patches it may read}."""
    pairs = {}
    forward = {}        # (x id, padding, dilation, groups, kernel size) -> conv node
    for node in graph.nodes.values():
        a = node.attrs
        if node.op in _FORWARD and a["stride"] == (1, 1):
            w = graph.nodes[node.inputs[1]].shape
            if None not in w + node.shape[2:] and by_rows((1, 1), w[1] * w[2] * w[3], w[0] // a["groups"]) \
                    and _corners_cover(w[2], a["dilation"][0], node.shape[2]):
                forward.setdefault((node.inputs[0], a["padding"], a["dilation"], a["groups"], w[2:]), node)
        elif node.op == "conv2d_weight" and len(node.inputs) == 2 and a["stride"] == (1, 1):
            conv = forward.get((node.inputs[0], a["padding"], a["dilation"], a["groups"], tuple(a["kernel"])))
            if conv is not None and node.dtype == conv.dtype:
                pairs[node.id] = conv.id
    return pairs


def _corners_cover(kh, dh, oh):
    """Whether the patches of the first and the last kernel offsets together cover the whole padded input
    (their runs along the rows start (kh - 1) * dh rows apart and are OH rows long): what
    conv2d_weight_from_patches checks for an inf or a NaN before its product."""
    return (kh - 1) * dh < oh


def relu_grad_before_pooling(rw, node):
    """``where(x > 0, max_pool2d_grad(x, g, pooled), 0)`` (a ReLU's gradient after max pooling's, x the ReLU's
    result) as ``max_pool2d_grad(x, where(pooled > 0, g, 0), pooled)``: the gradient lands only on each
    window's pick, whose x is the window's maximum, so the mask is taken per window, on arrays a quarter
    the size for 2x2 windows, in place of two passes over x's shape. The same numbers: only zeros may
    change sign (g * 0 at an element that is not picked, where the ReLU's mask gave +0)."""
    cond, grad, zero = rw.inputs(node)
    if cond.op != "greater" or grad.op != "max_pool2d_grad" or len(grad.inputs) != 3:
        return None
    _, g, pooled = rw.inputs(grad)
    bound = rw.inputs(cond)
    if (cond.inputs[0] != grad.inputs[0] or not is_scalar_const(rw, bound[1], 0) or not is_scalar_const(rw, zero, 0)
            or not same_type(node, grad) or zero.dtype != g.dtype):
        return None
    mask = rw.make("greater", [pooled, bound[1]])
    return rw.make("max_pool2d_grad", [bound[0], rw.make("where", [mask, g, zero]), pooled], grad.attrs)


def _conv_plus_bias(graph, node, users, kept):
    """The conv2d node that ``node`` adds a per-channel bias to, when it may be folded; else None."""
    if node.op != "add" or len(node.inputs) != 2:
        return None
    for j, other in (node.inputs, node.inputs[::-1]):
        conv, bias = graph.nodes[j], graph.nodes[other]
        if (conv.op == "conv2d" and users[j] == [node.id] and j not in kept and j != other
                and conv.dtype == node.dtype == bias.dtype and tuple(conv.shape) == tuple(node.shape)
                and bias_fits(bias.shape, node.shape)):
            return conv
    return None
