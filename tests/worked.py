"""Worked example 1 of docs/worked_examples.md, built once for the tests that check it by hand.

(Example 3, the sigmoid network, lives in the package: staticgrad.study.workloads.sigmoid_net_graph.)
"""
import staticgrad as sg


def example1(fed=True):
    """y = 2u³ + 3uv + 4v² + 5 one op per line, as the document writes it (u=5, v=7), every tensor named
    after its line so traces and pictures read like the hand computation. u and v are placeholders to
    feed (requiring grad), or with ``fed=False`` parameters holding 5 and 7. Returns the tensors by name."""
    if fed:
        u = sg.placeholder((), name="u", requires_grad=True)
        v = sg.placeholder((), name="v", requires_grad=True)
    else:
        u, v = sg.parameter(5.0, name="u"), sg.parameter(7.0, name="v")
    t1 = u * u
    t2 = t1 * u
    t3 = 2 * t2
    t4 = u * v
    t5 = 3 * t4
    t6 = v * v
    t7 = 4 * t6
    y = t3 + t5 + t7 + 5
    names = dict(u=u, v=v, t1=t1, t2=t2, t3=t3, t4=t4, t5=t5, t6=t6, t7=t7, y=y)
    for name, t in names.items():
        t.name = name
    return names
