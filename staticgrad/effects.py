"""State a graph updates by itself: the running statistics of a batch norm, the position of a random stream.

A tensor may carry updates of parameters that ``sg.compile`` adds to the ones the user gives, whenever the
compiled outputs or updates need that tensor: ``effects.add_update(anchor, param, step)``. ``step(value)``
builds the parameter's new value from ``value``, its value before this anchor's effect, so several
anchors updating one parameter (a layer called twice in one graph, two random draws of one key) chain
in the order they were built, as the same code run eagerly would have changed it. A loop body cannot
carry one: its nodes run once per step, the update once per call.
"""
from __future__ import annotations

from .tensor import CONTEXT, StaticgradError, Tensor, building, user_frame


def add_update(anchor: Tensor, param: Tensor, step, what: str):
    """When a compiled function needs ``anchor``, it also sets ``param`` to ``step(value)`` (see above);
    ``what`` names the effect in errors ("batch_norm's running mean")."""
    if not isinstance(param, Tensor) or param.op != "parameter":
        raise TypeError(f"{what}: the state it updates must be a parameter, got {param!r} (at {user_frame()})")
    if CONTEXT.tracing:
        raise StaticgradError(f"{what} inside a scan, cond or while_loop body is not supported: its state "
                              f"would change once per call, not once per step; compute it outside the loop "
                              f"(at {user_frame()})")
    if anchor.meta is None:
        anchor.meta = {}
    # (the step is built at compile time: it gets the name scopes open now, so pictures draw it in its layer)
    anchor.meta.setdefault("updates", []).append((param, step, what, CONTEXT.scopes))


def has_updates(t) -> bool:
    return t.meta is not None and "updates" in t.meta


def implicit_updates(found: dict) -> list:
    """(parameter, new value, what) for every parameter the tensors ``found`` ({id: tensor}) update by
    themselves, their steps chained in the order the anchors were built."""
    chains: dict[int, list] = {}
    for i in sorted(i for i, t in found.items() if t.meta is not None and "updates" in t.meta):
        anchor = found[i]
        for param, step, what, scopes in anchor.meta["updates"]:
            chains.setdefault(param.id, []).append((anchor, param, step, what, scopes))
    out = []
    for chain in chains.values():
        value = chain[0][1]
        for anchor, _, step, _, scopes in chain:
            value = _built_in(scopes, anchor.source, step, value)
        out.append((chain[0][1], value, chain[0][3]))
    return out


def _built_in(scopes, source, step, value):
    """``step(value)`` built in the name scopes ``scopes``, its nodes pointing at ``source``."""
    saved, CONTEXT.scopes = CONTEXT.scopes, scopes
    try:
        with building(role="forward", source=source):
            return step(value)
    finally:
        CONTEXT.scopes = saved
