"""The numba backend's interpreters are kept on disk: a later process loads the machine code."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")
from staticgrad.lower import numba_backend, numba_cache  # noqa: E402  (after the skip: it needs numba)

pytestmark = pytest.mark.slow          # each test starts Python processes that compile interpreters

SCRIPT = """
import numpy as np, staticgrad as sg
from staticgrad.lower import numba_backend
x = sg.placeholder((10,), name="x", requires_grad=True)
h = x
for _ in range(12):
    h = sg.tanh(sg.sin(h) * 0.9 + x)
loss = sg.sum(h)
fn = sg.compile([loss] + sg.grad(loss, [x]), inputs=[x], backend="numba")
loss, g = fn(np.linspace(-0.2, 0.2, 10))
stats = [i.run.stats for i in numba_backend._current]
print(sum(sum(s.cache_hits.values()) for s in stats), float(loss).hex(), *[float(v).hex() for v in g])
"""


def _run(folder):
    env = dict(os.environ, STATICGRAD_CACHE_DIR=folder)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    hits, *values = done.stdout.split()
    return int(hits), values


def test_a_later_process_loads_the_interpreter_and_gets_the_same_bits(tmp_path):
    folder = str(tmp_path / "cache")
    hits, first = _run(folder)
    assert hits == 0 and any(name.endswith(".py") for name in os.listdir(folder))
    hits, second = _run(folder)
    assert hits >= 1 and second == first


def test_an_empty_folder_setting_turns_the_cache_off(monkeypatch):
    monkeypatch.setenv("STATICGRAD_CACHE_DIR", "")
    assert numba_cache.folder() is None
    assert numba_cache.load(numba_backend.interpreter_source({"({0} + {1})"}), numba_backend.helpers) is None


def test_a_folder_that_cannot_be_made_means_compiling_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("STATICGRAD_CACHE_DIR", str(blocker / "cache"))
    assert numba_cache.load(numba_backend.interpreter_source({"({0} + {1})"}), numba_backend.helpers) is None


def test_the_file_name_changes_with_what_the_machine_code_depends_on(monkeypatch):
    source = numba_backend.interpreter_source({"({0} + {1})", "({0} * {1})"})
    base = numba_cache.fingerprint(source, numba_backend.helpers)
    assert numba_cache.fingerprint(numba_backend.interpreter_source({"({0} + {1})"}), numba_backend.helpers) != base
    import numba
    monkeypatch.setattr(numba, "__version__", numba.__version__ + ".other")
    assert numba_cache.fingerprint(source, numba_backend.helpers) != base


def test_default_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("STATICGRAD_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert numba_cache.folder() == os.path.join(str(tmp_path), "staticgrad")
