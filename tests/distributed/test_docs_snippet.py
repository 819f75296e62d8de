"""docs/distributed.md's example runs as written (a LocalCluster of its own, in a fresh process)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
def test_the_docs_example_trains_on_a_local_cluster(tmp_path):
    pytest.importorskip("distributed")
    text = (ROOT / "docs" / "distributed.md").read_text()
    script = tmp_path / "example.py"
    script.write_text(re.search(r"```python\n(.*?)```", text, re.S).group(1))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.splitlines()[:2]
    assert float(first) > 0                                  # the step's loss
    assert second.startswith("<History 2 epochs") and "<Traffic 51 steps" in second
