"""A small tqdm-style progress bar: one redrawn line on a terminal, silent anywhere else.

Written here rather than depending on tqdm: staticgrad's runtime dependencies stay numpy, networkx and
pydot.
"""
from __future__ import annotations

import sys
import time


def _clock(seconds) -> str:
    seconds = int(seconds)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes:02d}:{seconds:02d}"


def _format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    try:
        return f"{float(value):.4g}" if getattr(value, "ndim", 1) == 0 else str(value)
    except (TypeError, ValueError):
        return str(value)


class Progress:
    """A progress bar over ``total`` steps (None: unknown, then only the count and rate are shown).

    ``enabled=None`` draws only when ``file`` is a terminal, so logs, pipes and CI stay clean. Redraws
    are limited to one every ``min_interval`` seconds because drawing costs more than a small batch.
    """

    def __init__(self, total=None, desc="", file=None, enabled=None, width=24, min_interval=0.1):
        self.file = sys.stderr if file is None else file
        if enabled is None:
            isatty = getattr(self.file, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.total = total
        self.desc = desc
        self.width = width
        self.min_interval = min_interval
        self.count = 0
        self.postfix = {}
        self._start = time.perf_counter()
        self._last_draw = None
        self._last_len = 0
        self._closed = False

    def update(self, n=1, **postfix):
        """Advance by ``n`` steps; keyword arguments replace the values shown after the bar."""
        self.count += n
        if postfix:
            self.postfix.update(postfix)
        if not self.enabled:
            return
        now = time.perf_counter()
        done = self.total is not None and self.count >= self.total
        if self._last_draw is None or done or now - self._last_draw >= self.min_interval:
            self._draw(now)

    def set_description(self, desc):
        self.desc = desc

    def set_postfix(self, **postfix):
        self.postfix.update(postfix)

    def line(self, now=None) -> str:
        """The text of the bar as it would be drawn now."""
        now = time.perf_counter() if now is None else now
        elapsed = now - self._start
        rate = self.count / elapsed if elapsed > 0 else 0.0
        head = f"{self.desc}: " if self.desc else ""
        tail = ", ".join(f"{k}={_format_value(v)}" for k, v in self.postfix.items())
        tail = f", {tail}" if tail else ""
        if self.total:
            frac = min(self.count / self.total, 1.0)
            filled = int(frac * self.width)
            bar = "#" * filled + "-" * (self.width - filled)
            left = (self.total - self.count) / rate if rate > 0 else 0.0
            return (f"{head}{frac * 100:3.0f}%|{bar}| {self.count}/{self.total} "
                    f"[{_clock(elapsed)}<{_clock(left)}, {rate:.1f} it/s{tail}]")
        return f"{head}{self.count} it [{_clock(elapsed)}, {rate:.1f} it/s{tail}]"

    def _draw(self, now):
        text = self.line(now)
        # Pad with spaces so a shorter line fully covers the previous one.
        pad = max(self._last_len - len(text), 0)
        self.file.write("\r" + text + " " * pad)
        self.file.flush()
        self._last_len = len(text)
        self._last_draw = now

    def close(self):
        """Draw the final state and end the line (only once)."""
        if self._closed:
            return
        self._closed = True
        if self.enabled:
            self._draw(time.perf_counter())
            self.file.write("\n")
            self.file.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def progress(iterable, total=None, **kwargs):
    """Yield from ``iterable`` while a :class:`Progress` counts the items (``tqdm(iterable)`` style)."""
    if total is None:
        try:
            total = len(iterable)
        except TypeError:
            total = None
    with Progress(total=total, **kwargs) as bar:
        for item in iterable:
            yield item
            bar.update()
