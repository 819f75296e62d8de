"""str(fn.report()): the pass table, then what each pass said it did by kind (its row's details)."""
import numpy as np

import staticgrad as sg
from staticgrad.passes.stats import PassStats
from staticgrad.report import Report
from tests.explain.rnn_case import rnn


def test_the_loops_pass_says_what_it_hoisted_sunk_and_merged():
    fn = rnn()["fn"]
    report = fn.report()
    (row,) = [r for r in report.rows if r["pass"] == "loops"]
    details = row["details"]
    assert details["merged"] == 1 and details["hoisted"] > 0 and details["sunk"] > 0
    line = "loops: " + ", ".join(f"{kind} {n}" for kind, n in details.items())
    lines = str(report).splitlines()
    assert line in lines
    # under the table, before the summary of plans
    assert len(report.rows) + 2 <= lines.index(line) < lines.index("plans: 0")
    assert all("prune:" not in text for text in lines)       # a pass with no details gets no line


def test_a_pass_run_twice_numbers_its_lines():
    def tag(graph):
        return graph, PassStats("tagger", details={"looked": len(graph.nodes), "note": "fine"})

    x = sg.placeholder((2,), name="x")
    fn = sg.compile(x * 3.0, inputs=[x], passes=[tag, "dce", tag])
    np.testing.assert_allclose(fn(np.ones(2)), [3.0, 3.0])
    text = str(fn.report())
    assert "tagger (run 1): looked 3, note fine" in text and "tagger (run 2): looked 3, note fine" in text
    assert str(Report([])).splitlines()[1].startswith("---")
