"""What ``fn.report()`` returns: the pass ledger as a table, and a summary of the plans built so far."""
from __future__ import annotations


def _num(value) -> str:
    return "?" if value is None else f"{value:,}"


class Report:
    """What each pass did, as ``.rows`` (one dict per pass run); ``str(report)`` is a table, then a line
    per pass run that reported what it did by kind (its row's ``details``: "loops: hoisted 6, sunk 3").

    It is also the sequence of those rows (``len``, ``report[0]``, iteration), and ``report["plans"]``
    reads the summary that follows the table (plans, backend, memory of the newest plan, ...).
    """

    def __init__(self, rows, summary=None):
        self.rows = rows
        self.summary = summary or {}

    def __str__(self):
        # peak bytes of intermediates with memory planning, and with every one kept until the call returns
        header = (f"{'pass':<15}{'before':>7}{'after':>7}{'changed':>8}{'ms':>8}{'flops':>11}{'peak B':>10}"
                  f"{'unplanned':>10}{'fixed':>6}  ops removed / added")
        lines = [header, "-" * len(header)]
        for r in self.rows:
            delta = ", ".join([f"-{n} {op}" for op, n in r["removed"].items()] +
                              [f"+{n} {op}" for op, n in r["added"].items()])
            lines.append(f"{r['pass']:<15}{r['nodes_before']:>7}{r['nodes_after']:>7}{str(r['changed']):>8}"
                         f"{r['seconds'] * 1e3:>8.2f}{_num(r.get('flops')):>11}{_num(r.get('peak_bytes')):>10}"
                         f"{_num(r.get('peak_bytes_unplanned')):>10}"
                         f"{'yes' if r.get('fixed_point', True) else 'no':>6}  {delta}")
        lines += self._details()
        for key, value in self.summary.items():
            lines.append(f"{key}: {value}")
        return "\n".join(lines)

    def _details(self) -> list:
        """A line per pass run that said what it did by kind ("loops: merged 1, hoisted 6, sunk 3"),
        numbered where one pass ran more than once."""
        runs = {}
        for r in self.rows:
            runs[r["pass"]] = runs.get(r["pass"], 0) + 1
        seen, lines = {}, []
        for r in self.rows:
            seen[r["pass"]] = seen.get(r["pass"], 0) + 1
            details = r.get("details") or {}
            if not details:
                continue
            name = r["pass"] + (f" (run {seen[r['pass']]})" if runs[r["pass"]] > 1 else "")
            lines.append(f"{name}: " + ", ".join(f"{kind} {_num(n) if isinstance(n, int) else n}"
                                                 for kind, n in details.items()))
        return lines

    def __repr__(self):
        return str(self)

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.summary[key]
        return self.rows[key]

    def __contains__(self, key):
        # "plans" in report: the summary's keys, as report["plans"] reads them (a row is there too)
        return key in self.summary if isinstance(key, str) else key in self.rows

    def get(self, key, default=None):
        return self.summary.get(key, default)
