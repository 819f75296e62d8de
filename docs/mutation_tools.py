"""The mutation run's two helpers (docs/mutation.md), run from the checkout after ``mutmut run``.

``python docs/mutation_tools.py sample 500 18`` prints a uniform random sample of the mutants mutmut
generated (``mutants/``), one name a line: the same names on every machine for the same source.

``python docs/mutation_tools.py survivors FILE`` prints the names listed in FILE that mutmut's run did not kill
(a mutant that breaks the import fails pytest's collection, which mutmut may report as a timeout: killed).

``python docs/mutation_tools.py recheck NAME...`` runs each mutant against the tests that mirror its module
and prints ``killed`` or ``survived`` per name. mutmut runs a mutant against the tests that called its
function while they ran; a function called only while the package is imported (an op's registration) is
credited to whichever test ran first, so its mutants need this second look.
"""
import json
import os
import pathlib
import random
import subprocess
import sys

NOT_NUMBA = ["--ignore=tests/lower/test_numba_backend.py", "--ignore=tests/lower/test_numba_cache.py"]
MIRRORS = {
    # an op's registration holds its gradient and its scalar code too
    "staticgrad.ops.": ["tests/test_ops.py", "tests/test_ops_torch.py", "tests/study/test_torch_twins.py",
                        "tests/test_tensor.py", "tests/test_autodiff.py", "tests/lower", *NOT_NUMBA],
    "staticgrad.autodiff.": ["tests/test_autodiff.py"],
    "staticgrad.passes.": ["tests/passes"],
    "staticgrad.lower.": ["tests/lower", *NOT_NUMBA],
    "staticgrad.optim.": ["tests/test_optim.py"],
    "staticgrad.nn.": ["tests/test_nn.py", "tests/nn"],
}
PYTEST = ["-x", "-q", "-m", "not slow", "-p", "no:cacheprovider", "--hypothesis-seed=0", "-p", "tests.mutmut_frames"]


def results(root="mutants/staticgrad"):
    """{mutant name: mutmut's exit code for it, None if not run}."""
    found = {}
    for meta in sorted(pathlib.Path(root).rglob("*.py.meta")):
        found.update(json.loads(meta.read_text())["exit_code_by_key"])
    return found


KILLED = {1, 3, 2, 36, 24, -24, 152, 255}      # test failures, pytest errors, timeouts (see mutmut's stats.py)


def recheck(name, timeout=600):
    tests = next(tests for prefix, tests in MIRRORS.items() if name.startswith(prefix))
    env = dict(os.environ, MUTANT_UNDER_TEST=name)
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", *PYTEST, *tests], cwd="mutants", env=env,
                              capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if done.returncode == 0 else "killed"


if __name__ == "__main__":
    if sys.argv[1] == "sample":
        size, seed = int(sys.argv[2]), int(sys.argv[3])
        print("\n".join(random.Random(seed).sample(sorted(results()), size)))
    elif sys.argv[1] == "survivors":
        found = results()
        names = pathlib.Path(sys.argv[2]).read_text().split()
        print("\n".join(f"{found[n]} {n}" for n in names if found[n] not in KILLED))
    else:
        for name in sys.argv[2:]:
            print(recheck(name), name, flush=True)
