"""staticgrad.data: batches, run_batches, fit and its tqdm bar, History.plot, predict."""
import io
import sys

import numpy as np
import pytest
from tqdm.std import tqdm

import staticgrad as sg
from staticgrad import data, nn, optim


def test_batches_cover_the_data_in_order_without_shuffle():
    X, y = np.arange(10).reshape(10, 1), np.arange(10) * 2
    b = data.batches(X, y, batch_size=4)
    assert len(b) == 3
    got = list(b)
    assert [len(xb) for xb, _ in got] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([xb for xb, _ in got])[:, 0], np.arange(10))
    np.testing.assert_array_equal(np.concatenate([yb for _, yb in got]), np.arange(10) * 2)


def test_drop_last_skips_the_short_batch():
    b = data.batches(np.arange(10), batch_size=4, drop_last=True)
    assert len(b) == 2
    assert [len(x) for x in b] == [4, 4]
    assert len(data.batches(np.arange(3), batch_size=4, drop_last=True)) == 0


def test_shuffle_is_seeded_keeps_pairs_together_and_changes_each_epoch():
    X, y = np.arange(20), np.arange(20) * 10
    a = data.batches(X, y, batch_size=5, shuffle=True, seed=3)
    b = data.batches(X, y, batch_size=5, shuffle=True, seed=3)
    first_a, first_b = [xb for xb, _ in a], [xb for xb, _ in b]
    for xa, xb in zip(first_a, first_b):
        np.testing.assert_array_equal(xa, xb)
    for xb, yb in a:
        np.testing.assert_array_equal(yb, xb * 10)
    epoch1, epoch2 = np.concatenate(first_a), np.concatenate([xb for xb, _ in a])
    assert sorted(epoch1) == list(range(20)) and sorted(epoch2) == list(range(20))
    assert not np.array_equal(epoch1, epoch2)
    assert not np.array_equal(epoch1, np.arange(20))


def test_a_single_array_gives_plain_batches():
    batch = next(iter(data.batches(np.ones((5, 2)), batch_size=2)))
    assert isinstance(batch, np.ndarray) and batch.shape == (2, 2)


def test_batches_reject_bad_input():
    with pytest.raises(ValueError, match="share their first axis"):
        data.batches(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="batch_size"):
        data.batches(np.ones(3), batch_size=0)
    with pytest.raises(ValueError, match="at least one"):
        data.batches()


def _linear_step(lr=0.1):
    x, t = sg.placeholder((None, 2), name="x"), sg.placeholder((None,), name="t")
    model = nn.Linear(2, 1, seed=0)
    pred = sg.reshape(model(x), (-1,))
    loss = nn.mse(pred, t)
    step = sg.compile(loss, inputs=[x, t], updates=optim.SGD(model, lr=lr).updates(loss))
    return step, sg.compile(pred, inputs=[x]), model


def test_run_batches_calls_the_function_once_per_batch_in_any_feed_style():
    x = sg.placeholder((None,), name="x")
    double = sg.compile(x * 2.0, inputs=[x])
    out = data.run_batches(double, data.batches(np.arange(5.0), batch_size=2), progress=False)
    assert [o.tolist() for o in out] == [[0, 2], [4, 6], [8]]
    assert data.run_batches(double, [{"x": np.ones(2)}, (np.zeros(1),)], progress=False)[0].tolist() == [2, 2]


def test_run_batches_advances_a_given_tqdm_bar_with_the_running_loss_and_leaves_it_open():
    step, _, _ = _linear_step()
    X, y = np.ones((8, 2)), np.ones(8)
    out = io.StringIO()
    bar = tqdm(total=4, file=out, mininterval=0)
    losses = data.run_batches(step, data.batches(X, y, batch_size=2), progress=bar)
    assert bar.n == 4 and not bar.disable                         # advanced, not closed: the caller's bar
    bar.close()
    text = out.getvalue()
    assert len(losses) == 4
    assert "4/4" in text and f"loss={tqdm.format_num(float(np.mean(losses)))}" in text


def test_run_batches_own_bar_is_tqdms_on_stderr_when_forced(monkeypatch):
    x = sg.placeholder((None,), name="x")
    total = sg.compile(sg.sum(x), inputs=[x])
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    data.run_batches(total, data.batches(np.arange(6.0), batch_size=2), progress=True, desc="scoring", name="sum")
    last = err.getvalue().rstrip("\n").split("\r")[-1]
    assert last.startswith("scoring: 100%|") and "3/3" in last and "batch/s" in last and "sum=5" in last
    data.run_batches(total, data.batches(np.arange(6.0), batch_size=2))          # None: a pipe shows nothing
    assert err.getvalue().count("scoring") and err.getvalue().endswith("\n")
    assert "3/3 [" not in err.getvalue().split("\n", 1)[1]


def test_the_bar_is_tqdm_auto_shown_on_a_terminal_only_unless_forced(monkeypatch):
    import tqdm.auto
    term, pipe = io.StringIO(), io.StringIO()
    term.isatty = lambda: True
    for stream, shown in ((term, True), (pipe, False)):
        monkeypatch.setattr("sys.stderr", stream)
        for progress, expected in ((None, shown), (True, True), (False, False)):
            with data._bar(3, progress) as bar:
                assert isinstance(bar, tqdm.auto.tqdm) and bar.disable is not expected


def test_fit_trains_and_records_the_mean_loss_per_epoch(rng):
    step, predict, model = _linear_step()
    X = rng.normal(size=(64, 2))
    y = X @ np.array([2.0, -1.0]) + 0.5
    history = data.fit(step, data.batches(X, y, batch_size=16, shuffle=True, seed=0), epochs=30, progress=False)
    assert len(history.loss) == 30
    assert history.loss[-1] < 1e-3 < history.loss[0]
    np.testing.assert_allclose(model.weight.value[:, 0], [2.0, -1.0], atol=0.05)
    np.testing.assert_allclose(data.predict(predict, X, batch_size=10), y, atol=0.1)


def test_fit_calls_validate_and_log_each_epoch():
    step, _, _ = _linear_step()
    calls = []
    history = data.fit(step, data.batches(np.ones((4, 2)), np.ones(4), batch_size=2), epochs=3, progress=False,
                       validate=lambda: {"acc": len(calls)}, log=lambda e, loss, m: calls.append((e, m["acc"])))
    assert calls == [(1, 0), (2, 1), (3, 2)]
    assert history.metrics == [{"acc": 0}, {"acc": 1}, {"acc": 2}]


def test_fit_shows_one_bar_for_the_whole_run_on_a_terminal_only(monkeypatch):
    step, _, _ = _linear_step()
    term, pipe = io.StringIO(), io.StringIO()
    term.isatty = lambda: True
    for stream in (term, pipe):
        monkeypatch.setattr("sys.stderr", stream)
        data.fit(step, data.batches(np.ones((4, 2)), np.ones(4), batch_size=2), epochs=3,
                 validate=lambda: {"acc": 0.75})
    assert pipe.getvalue() == ""
    last = term.getvalue().rstrip("\n").split("\r")[-1]
    assert last.startswith("epoch 3/3: 100%|") and "6/6" in last and "loss=" in last and "acc=0.75" in last
    assert term.getvalue().count("\n") == 1


def test_fit_advances_a_given_tqdm_bar_and_leaves_it_open():
    step, _, _ = _linear_step()
    out = io.StringIO()
    with tqdm(total=6, file=out, mininterval=0) as bar:
        history = data.fit(step, data.batches(np.ones((4, 2)), np.ones(4), batch_size=2), epochs=3, progress=bar)
        assert bar.n == 6 and not bar.disable
    assert f"loss={tqdm.format_num(history.loss[-1])}" in out.getvalue()    # the last batch's running mean
    assert "epoch 3/3" in out.getvalue()


def _history():
    history = data.History()
    history.loss = [0.9, 0.5, 0.3]
    history.metrics = [{"val_loss": 1.0, "acc": 0.6}, {"val_loss": 0.7, "acc": 0.8}, {"val_loss": 0.6, "acc": 0.9}]
    return history


def test_history_plot_draws_losses_left_and_metrics_on_a_second_axis():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    figure = Figure()
    ax = figure.subplots()
    assert _history().plot(ax=ax) is ax
    lines = {line.get_label(): line for a in figure.axes for line in a.get_lines()}
    assert set(lines) == {"training loss", "val_loss", "acc"}
    assert lines["training loss"].axes is ax and lines["val_loss"].axes is ax
    right = lines["acc"].axes
    assert right is not ax and right.get_ylabel() == "acc" and ax.get_xlabel() == "epoch"
    assert lines["training loss"].get_xdata().tolist() == [1, 2, 3]
    assert lines["training loss"].get_ydata().tolist() == [0.9, 0.5, 0.3]
    assert lines["acc"].get_ydata().tolist() == [0.6, 0.8, 0.9]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["training loss", "val_loss", "acc"]
    assert {line.get_marker() for line in lines.values()} == {"."}   # a dot per epoch while there are few
    png = io.BytesIO()
    figure.savefig(png, format="png")                               # renders without a display
    assert png.getvalue().startswith(b"\x89PNG")
    long = data.History()
    long.loss, long.metrics = list(np.linspace(1, 0, 40)), [{"acc": a} for a in np.linspace(0, 1, 40)]
    assert {line.get_marker() for a in long.plot(ax=Figure().subplots()).figure.axes for line in a.get_lines()} \
        == {"None"}


def test_history_plot_of_a_fit_makes_its_own_figure():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    step, _, _ = _linear_step()
    history = data.fit(step, data.batches(np.ones((4, 2)), np.ones(4), batch_size=2), epochs=2, progress=False)
    ax = history.plot()
    try:
        assert len(ax.figure.axes) == 1                             # no metrics: no second axis
        assert ax.get_lines()[0].get_ydata().tolist() == history.loss
    finally:
        plt.close(ax.figure)
    with pytest.raises(ValueError, match="no epochs"):
        data.History().plot()


def test_history_plot_without_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'staticgrad\[plot\]'.*matplotlib"):
        _history().plot()


def test_predict_concatenates_multiple_outputs():
    x = sg.placeholder((None,), name="x")
    both = sg.compile([x + 1.0, x * 3.0], inputs=[x])
    a, b = data.predict(both, np.arange(5.0), batch_size=2)
    assert a.tolist() == [1, 2, 3, 4, 5] and b.tolist() == [0, 3, 6, 9, 12]


def test_function_run_batches_method_when_attached():
    if not hasattr(sg.Function, "run_batches"):
        pytest.skip("Function.run_batches is not attached yet (the lead wires it to data.run_batches)")
    x = sg.placeholder((None,), name="x")
    double = sg.compile(x * 2.0, inputs=[x])
    out = double.run_batches(data.batches(np.arange(4.0), batch_size=3), progress=False)
    assert [o.tolist() for o in out] == [[0, 2, 4], [6]]


class _OneShot:
    """Iterable, but yields its batches only the first time (a file reader, a stream)."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        batches, self.batches = self.batches, []
        return iter(batches)


def test_fit_refuses_data_that_runs_dry_after_the_first_epoch():
    step, _, model = _linear_step()
    X, y = np.ones((8, 2)), np.ones(8)
    with pytest.raises(ValueError, match="one-shot iterator"):
        data.fit(step, iter(data.batches(X, y, batch_size=4)), epochs=3, progress=False)
    assert model.weight.value.tolist() == nn.Linear(2, 1, seed=0).weight.value.tolist()   # nothing trained
    assert data.fit(step, (b for b in data.batches(X, y, batch_size=4)), epochs=1, progress=False).loss
    with pytest.raises(ValueError, match="no batches in epoch 2 after giving some in epoch 1"):
        data.fit(step, _OneShot(list(data.batches(X, y, batch_size=4))), epochs=3, progress=False)
    with pytest.raises(ValueError, match="no batches in epoch 1"):
        data.fit(step, [], epochs=1, progress=False)
