from types import SimpleNamespace

import numpy as np

from staticgrad.lower import sums


def _chain_of_adds():
    """Leaves 0-3 and the running sum 4 = 0 + 1, 5 = 4 + 2, 6 = 5 + 3, as sums._links reads a graph."""
    def node(i, op, inputs=()):
        return SimpleNamespace(id=i, op=op, inputs=list(inputs), dtype=np.dtype(np.float64))
    nodes = {i: node(i, "placeholder") for i in range(4)}
    nodes.update({4: node(4, "add", (0, 1)), 5: node(5, "add", (4, 2)), 6: node(6, "add", (5, 3))})
    users = {0: [4], 1: [4], 2: [5], 3: [6], 4: [5], 5: [6], 6: []}
    return SimpleNamespace(nodes=nodes), list(nodes), {i: (3,) for i in nodes}, users


def _links(row_of):
    graph, order, shapes, users = _chain_of_adds()
    return sums._links(graph, order, shapes, {6}, row_of, lambda node: True, users)


def test_adds_link_into_a_running_sum():
    assert _links({}) == {4: 5, 5: 6, 6: None}


def test_an_add_a_batched_op_writes_as_a_row_is_in_no_running_sum():
    # (its value comes from the batched op's buffer: a fold taking it too would compute it twice)
    assert _links({4: ("buffer", 0)}) == {4: None, 5: 6, 6: None}
    assert _links({5: ("buffer", 1)}) == {4: None, 5: None, 6: None}
