"""The scripts in examples/ run and reach what they claim (with fast settings where that is enough)."""
import importlib.util
import pathlib
import subprocess
import sys
import xml.dom.minidom

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_worked_examples_reproduce_every_hand_number(capsys):
    rows = load("worked_examples").main([])
    printed = capsys.readouterr().out
    wrong = [r for r in rows if not r[-1]]
    assert not wrong, wrong
    assert len(rows) >= 50
    assert {r[0][:2] for r in rows} == {f"{k}." for k in range(1, 8)}        # all seven examples
    assert "MISMATCH" not in printed and f"{len(rows)} of {len(rows)} hand values reproduced" in printed


def test_worked_examples_compare_hand_values_to_their_written_digits():
    agrees = load("worked_examples").agrees
    assert agrees("0.9478", 0.94784) and not agrees("0.9478", 0.9479)
    assert agrees("556", 556.0) and not agrees("556", 556.3)
    assert agrees("0", 0.0) and not agrees("0", 1e-6)         # a vanished gradient must be exactly zero


def test_moons_learns_the_two_moons():
    result = load("moons").main(["--epochs", "40"])
    assert result["accuracy"] >= 0.93
    assert result["loss"][-1] < result["loss"][0]


def test_moons_with_sgd_momentum():
    assert load("moons").main(["--epochs", "30", "--optimizer", "sgd"])["accuracy"] >= 0.93


@pytest.mark.slow
def test_digits_reaches_95_percent():
    pytest.importorskip("sklearn", reason="examples/digits.py needs scikit-learn (pip install scikit-learn)")
    assert load("digits").main([])["accuracy"] >= 0.95


def test_digits_without_sklearn_says_so_and_skips(monkeypatch, capsys):
    digits = load("digits")
    monkeypatch.setattr(digits, "load_digits", lambda: None)
    assert digits.main([]) is None
    assert "pip install scikit-learn" in capsys.readouterr().err


def test_regression_matches_least_squares_and_fits_the_sine():
    result = load("regression").main([])
    assert result["linear_gap"] < 1e-6
    assert result["rmse_clean"] < 0.1          # the noise has std 0.1; sin itself is followed closer than that


def test_save_and_load(tmp_path):
    result = load("save_and_load").main(["--out", str(tmp_path), "--epochs", "3"])
    assert result["identical"] and result["moved"] and result["restored"]
    assert (tmp_path / "moons.npz").exists() and (tmp_path / "moons.ckpt.npz").exists()


def test_an_example_runs_as_a_script():
    done = subprocess.run([sys.executable, str(EXAMPLES / "worked_examples.py")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "hand values reproduced" in done.stdout


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_char_lm_learns_and_samples(cell, capsys):
    result = load("char_lm").main(["--steps", "24", "--hidden", "16", "--embed", "8", "--window", "16",
                                   "--sample", "40", "--cell", cell])
    losses = result["loss"]
    assert len(losses) == 24 and np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.5
    before, after = result["held_out"]
    assert after < before - 0.4                       # learned something about text it did not train on
    assert result["sample"].startswith("The ") and len(result["sample"]) == 44
    assert "held-out loss" in capsys.readouterr().out


def test_sequence_classification_compares_padding_with_a_plan_per_length():
    results = load("sequence_classification").main(["--epochs", "6", "--train", "800", "--longest", "6",
                                                    "--hidden", "16", "--lr", "0.03"])
    assert results["padded"]["plans"] == 1
    assert results["per length"]["plans"] == 4                   # lengths 3 to 6, one plan each
    for result in results.values():
        assert result["accuracy"] >= 0.7                         # chance is 0.5
        assert result["loss"][-1] < result["loss"][0] - 0.2


def test_sequence_classification_padding_and_mask_give_the_per_length_logits():
    example = load("sequence_classification")
    rng = np.random.default_rng(1)
    seqs, _ = example.make_sequences(12, 3, 9, rng)
    model = example.Classifier(4, 6, seed=0)
    _, padded = example.compile_padded(model, 0.01)
    _, per_length = example.compile_per_length(model, 0.01)
    got = padded(*example.pad(seqs, 9))
    want = [per_length(s[:, None] + 1)[0] for s in seqs]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)      # the padding after a sequence changes nothing
    seqs, labels = example.make_sequences(200, 3, 9, rng)
    assert [bool(np.any(np.diff(s) == 0)) for s in seqs] == list(labels == 1)       # the task as stated
    assert 0.4 < labels.mean() < 0.6 and {len(s) for s in seqs} == set(range(3, 10))


@pytest.mark.slow
def test_cnn_digits_reaches_98_percent():
    pytest.importorskip("sklearn", reason="examples/cnn_digits.py needs scikit-learn (pip install scikit-learn)")
    assert load("cnn_digits").main([])["accuracy"] >= 0.98


def test_cnn_digits_without_sklearn_says_so_and_skips(monkeypatch, capsys):
    example = load("cnn_digits")
    monkeypatch.setattr(example, "load_digits", lambda: None)
    assert example.main([]) is None
    assert "pip install scikit-learn" in capsys.readouterr().err


def test_cnn_digits_shifts_each_image_by_one_pixel():
    X = np.arange(2 * 9, dtype=np.float32).reshape(2, 1, 3, 3) + 1
    moved, labels = load("cnn_digits").with_shifts(X, np.array([4, 7]))
    assert moved.shape == (10, 1, 3, 3) and list(labels) == [4, 7] * 5
    np.testing.assert_array_equal(moved[2, 0], [[0, 0, 0], [1, 2, 3], [4, 5, 6]])          # down
    np.testing.assert_array_equal(moved[8, 0], [[2, 3, 0], [5, 6, 0], [8, 9, 0]])          # left


def test_cnn_shapes_draws_balanced_classes_reproducibly():
    example = load("cnn_shapes")
    X, y = example.make_shapes(500, seed=4)
    assert X.shape == (500, 1, 28, 28) and X.dtype == np.float32 and 0 <= X.min() and X.max() <= 1
    counts = np.bincount(y)
    assert len(counts) == 5 and counts.min() > 70                          # five classes, none rare
    np.testing.assert_array_equal(example.make_shapes(20, seed=4)[0], example.make_shapes(20, seed=4)[0])
    clean, labels = example.make_shapes(50, noise=0.0, seed=1)
    ink = clean.sum(axis=(1, 2, 3))
    circle, ring = ink[labels == 0].mean(), ink[labels == 4].mean()
    assert ring < circle                                                    # a ring is a circle with a hole


@pytest.mark.slow
def test_cnn_shapes_learns_and_writes_its_training_curve(tmp_path):
    result = load("cnn_shapes").main(["--out", str(tmp_path / "curve")])
    assert result["accuracy"] >= 0.85
    rows = (tmp_path / "curve.csv").read_text().splitlines()
    assert rows[0] == "epoch,loss,test_acc" and len(rows) == 11
    losses = [float(r.split(",")[1]) for r in rows[1:]]
    assert losses[-1] < losses[0] / 2
    assert (tmp_path / "curve.svg").read_text().count("<polyline") == 2


def test_cnn_shapes_runs_quickly_on_a_few_images(tmp_path):
    result = load("cnn_shapes").main(["--out", str(tmp_path / "c"), "--train", "64", "--test", "32", "--epochs", "2",
                                      "--width", "2", "--batch-size", "32"])
    assert [r["epoch"] for r in result["rows"]] == [1, 2]
    xml.dom.minidom.parse(str(tmp_path / "c.svg"))                         # well-formed
