"""The package's shape: its import layers, what importing it loads, what it exports, its function lengths."""
import ast
import pathlib
import re
import subprocess
import sys

import networkx as nx

import staticgrad as sg

PACKAGE = pathlib.Path(sg.__file__).resolve().parent
MAX_FUNCTION_LINES = 60


def modules() -> dict:
    """{dotted module name: path} for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imported(name, path, known) -> set:
    """The package's modules ``name`` imports, anywhere in it (a function's own imports too)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "staticgrad")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            elif (node.module or "").split(".")[0] == "staticgrad":
                target = node.module
            else:
                continue
            found.update(f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names)
    found.discard(name)
    return found


def import_graph() -> nx.DiGraph:
    known = modules()
    graph = nx.DiGraph()
    for name, path in known.items():
        graph.add_node(name)
        graph.add_edges_from((name, other) for other in imported(name, path, known))
    return graph


def layers() -> dict:
    """{top-level name: layer number} from the package docstring's list (the first line is layer 0)."""
    text = sg.__doc__.split("Layers:", 1)[1]
    rows = [line for line in text.splitlines() if line.startswith("    ") and line.strip()]
    return {name: k for k, row in enumerate(rows) for name in re.split(r"\s{2,}", row.strip())[0].split()}


def layer_of(module, table):
    parts = module.split(".")
    return table["staticgrad" if len(parts) == 1 else parts[1]]


def test_every_module_has_a_layer():
    table = layers()
    missing = sorted({m.split(".")[1] for m in modules() if "." in m} - set(table))
    assert not missing, f"modules missing from the layer list in staticgrad/__init__.py: {missing}"


def test_no_import_runs_up_the_layers():
    table = layers()
    upward = [(a, b) for a, b in import_graph().edges if layer_of(b, table) > layer_of(a, table)]
    assert not upward, "imports from a higher layer: " + ", ".join(f"{a} -> {b}" for a, b in upward)


def test_imports_form_no_cycle():
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, f"import cycles: {cycles}"


def test_importing_staticgrad_loads_no_study_benchmark_numba_or_dask_module():
    code = ("import sys, staticgrad\n"
            "print(' '.join(m for m in sys.modules if m.startswith(('staticgrad.study', 'benchmarks', 'numba',"
            " 'staticgrad.lower.numba', 'torch', 'staticgrad.distributed', 'dask', 'distributed'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
    assert sg.study.compare.__module__ == "staticgrad.study"          # loaded when asked for
    assert sg.distributed.DataParallel.__module__ == "staticgrad.distributed.parallel"


def test_dir_lists_the_public_api_only():
    names = dir(sg)
    assert set(names) == set(sg.__all__) | {"__version__"}
    assert len(names) == len(set(names)), "a name listed twice"
    assert {"grad", "compile", "placeholder", "tan", "argmax", "study"} <= set(names)
    assert not {"tensor", "graph", "lower", "function", "autodiff", "split"} & set(names)
    for name in sg.__all__:
        assert getattr(sg, name) is not None


def test_exports_come_from_the_registry():
    public = {name for name, op in sg.ops.REGISTRY.items() if op.public}
    assert public <= set(sg.__all__)
    assert set(sg.ops.REGISTRY) <= set(sg.ops.__all__)
    for name, op in sg.ops.REGISTRY.items():
        assert getattr(sg.ops, name) is op.function
        if op.public:
            assert getattr(sg, name) is op.function


def functions():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1


def test_no_function_is_longer_than_sixty_lines():
    long = [f"{where} ({n} lines)" for where, n in functions() if n > MAX_FUNCTION_LINES]
    assert not long, "functions over 60 lines: " + "; ".join(long)
