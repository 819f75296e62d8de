"""staticgrad.progress: the tqdm-style bar."""
import io

from staticgrad.progress import Progress, progress


def test_bar_text_shows_fraction_count_and_postfix():
    bar = Progress(total=4, desc="epoch 1/2", file=io.StringIO(), enabled=True, width=8)
    bar.update(1, loss=0.123456)
    line = bar.line()
    assert line.startswith("epoch 1/2:  25%|##------| 1/4 [")
    assert "loss=0.1235" in line


def test_unknown_total_shows_the_count():
    bar = Progress(file=io.StringIO(), enabled=True)
    bar.update(3)
    assert bar.line().startswith("3 it [")


def test_silent_when_not_a_terminal():
    out = io.StringIO()
    with Progress(total=3, file=out) as bar:
        for _ in range(3):
            bar.update(1, loss=1.0)
    assert out.getvalue() == ""


def test_draws_on_a_terminal_and_ends_the_line_once():
    out = io.StringIO()
    out.isatty = lambda: True
    bar = Progress(total=2, file=out, min_interval=0)
    bar.update()
    bar.update()
    bar.close()
    bar.close()
    text = out.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1
    assert "2/2" in text.splitlines()[-1].split("\r")[-1]


def test_redraws_are_rate_limited():
    out = io.StringIO()
    bar = Progress(total=1000, file=out, enabled=True, min_interval=3600)
    for _ in range(999):
        bar.update()
    assert out.getvalue().count("\r") == 1        # the first draw only; the rest fall inside the interval
    bar.update()
    assert out.getvalue().count("\r") == 2        # reaching the total always draws


def test_a_shorter_line_covers_the_previous_one():
    out = io.StringIO()
    bar = Progress(file=out, enabled=True, min_interval=0)
    bar.update(1, note="a long message here")
    bar.postfix.clear()
    bar.update(1)
    first, second = out.getvalue().split("\r")[1:]
    assert len(second) >= len(first)


def test_progress_wraps_an_iterable():
    out = io.StringIO()
    assert list(progress(range(3), file=out, enabled=True)) == [0, 1, 2]
    assert "3/3" in out.getvalue()
