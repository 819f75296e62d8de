"""Control flow in the graph: loops and branches traced once into bodies, with their gradients.

``scan`` (a loop over steps), and on top of it ``cond``, ``while_loop`` and ``fori_loop``. Each traces the
user's functions once into :class:`body.Body` subgraphs held by one graph node; on eager tensors each
simply runs as Python control flow, so one model function runs in both modes.
"""
from .. import autodiff
from .body import Body
from .branch import cond
from .pytree import flatten, unflatten
from .reroll import roll
from .scan import scan
from .whiles import fori_loop, while_loop

autodiff.BEFORE_SWEEP.append(roll)

__all__ = ["Body", "cond", "flatten", "fori_loop", "roll", "scan", "unflatten", "while_loop"]
