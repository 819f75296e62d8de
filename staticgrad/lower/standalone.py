"""A plan as a Python module that runs on its own (what ``Function.save_source`` writes).

A plan's generated ``run`` reads names staticgrad binds when it builds the plan: the parameters ``P``,
workspace buffers, constants, attributes, kernels, a loop's runner. :func:`module_source` writes those
bindings out as Python: arrays whose values matter go into an ``.npz`` file beside the module (loaded
with ``allow_pickle=False``), workspace buffers become ``np.empty`` of their planned shapes, an array
that is a view of another stays a view of it (a plan writes some arrays through others), kernels are
imported, a loop's body becomes a function of its own, and a loop's runner is its staticgrad class with
its state. What cannot be written so (a function of the user's, a body built per call) is refused by name.

The saved module imports :class:`Parameter`, :class:`Body`, :func:`restore` and :func:`load_arrays` from here.
"""
from __future__ import annotations

import importlib
import io
import math
import os
import textwrap
import tokenize

import numpy as np

from ..ops.registry import REGISTRY
from ..tensor import StaticgradError, Tensor, format_shape
from .codegen import Program
from .interpret import StepProgram
from .loops import LazyProgram

_HERE = __name__
_LITERALS = (bool, int, str, type(None))


class Parameter:
    """A saved plan's parameter: its ``name``, and ``_value``, the array ``run`` reads (``step`` replaces it)."""

    __slots__ = ("name", "_value")

    def __init__(self, name, value):
        self.name, self._value = name, value

    @property
    def value(self):
        return self._value

    def __repr__(self):
        return f"<Parameter {self.name!r} shape={format_shape(self._value.shape)} dtype={self._value.dtype}>"


class Body:
    """A loop body in a saved module: the function a loop's runner calls (``run``), and whether the loop
    itself is written in it (``loop``)."""

    def __init__(self, run, loop=False):
        self.run, self.loop = run, loop


def restore(cls, state):
    """An instance of ``cls`` holding ``state`` (attribute -> value), made without running its __init__."""
    obj = cls.__new__(cls)
    for key, value in state.items():
        object.__setattr__(obj, key, value)
    return obj


def load_arrays(module_file) -> dict:
    """The arrays of the .npz file beside ``module_file`` (same name), read in full, no pickles."""
    with np.load(os.path.splitext(module_file)[0] + ".npz", allow_pickle=False) as saved:
        return {key: saved[key] for key in saved.files}


def module_source(program, name, feeds, outputs, updated) -> tuple[str, dict]:
    """(the text of module ``name``, which runs ``program`` on its own; {npz key: array} it loads).

    For its docstring: ``feeds`` the (dtype, shape) of each feed, ``outputs`` the outputs' labels.
    ``updated``: (index in ``P``, label) of the parameter each new value ``run`` returns is for, in order
    (the module's ``step`` assigns them).
    """
    writer = _ModuleWriter()
    writer.program(program, "run")
    code = program.code
    args = code[code.index("(") + 1:code.index(")")]
    doc = _doc(name, args, feeds, outputs, [label for _, label in updated])
    lines = [f'"""{doc}"""', "import numpy as np", ""]
    lines += _grouped(writer.imports.values()) + ["", "_ARRAYS = load_arrays(__file__)", ""]
    lines += writer.lines
    lines += ["", "# The parameters run's new values are for, in order.",
              f"_UPDATED = [{', '.join(f'P[{k}]' for k, _ in updated)}]", "", "", "def step(*feeds):",
              '    """run(*feeds), then each parameter it updates takes its new value (a copy: run may hand back',
              '    workspace buffers the next call overwrites). Returns the outputs."""',
              "    outputs, new_values = run(*feeds)",
              "    for param, value in zip(_UPDATED, new_values):",
              "        param._value = np.array(value, dtype=param._value.dtype)",
              "    return outputs", ""]
    return "\n".join(lines), writer.arrays


def _doc(name, args, feeds, outputs, updated) -> str:
    fed = ", ".join(f"{a} {dtype} {format_shape(shape)}" for a, (dtype, shape) in zip(args.split(", "), feeds))
    text = (f"run takes the feeds ({fed or 'none'}: the shapes this plan is for) and returns two lists: the "
            f"outputs ({', '.join(outputs)}) and the new values of the parameters it updates "
            f"({', '.join(updated) or 'none'}), which may be buffers the next call writes again (copy what you "
            "keep). step returns the outputs and gives each updated parameter its new value, so each call "
            "trains on from the last. P holds the parameters (each one's array in ._value); they and the "
            f"plan's constants load from {name}.npz beside this file. The code is staticgrad's numpy plan: "
            "each line's comment names its op and the line of the model code that made it.")
    doc = (f"{name}: a compiled staticgrad function, saved as a module that runs on its own.\n\n"
           f"    import {name}\n    outputs, new_values = {name}.run({args})\n"
           f"    outputs = {name}.step({args})      # run, then each updated parameter takes its new value\n\n"
           + textwrap.fill(text, 100) + "\n")
    return doc.replace("\\", "\\\\").replace('"""', '\\"""')      # (names are user text)


class _ModuleWriter:
    """The definitions of a saved module, in the order they must run, and what they import and load."""

    def __init__(self):
        self.lines = []
        self.imports = {"load_arrays": f"from {_HERE} import load_arrays"}     # name -> its import line
        self.aliases = {}         # (module, name) -> the name it is imported as
        self.arrays = {}          # npz key -> array
        self.memo = {}            # id(object) -> the expression that names it, once defined
        self.kept = []            # (the objects memo refers to: their ids must stay theirs)
        self.preferred = {}       # id(object) -> the name a namespace gives it
        self.workspace = set()    # ids of workspace buffers: their contents need not be saved
        self.taken = {"np", "step", "_ARRAYS", "_UPDATED", "load_arrays", "Parameter", "Body", "restore", "REGISTRY"}
        self.kernels = None

    # ------------------------------------------------------------------ programs
    def program(self, program, name) -> str:
        """Define ``program``'s bindings and its function, named ``name``; returns ``name``."""
        if not isinstance(program, Program):
            what = "a plan run as steps (over 500,000 nodes)" if isinstance(program, StepProgram) else repr(program)
            raise StaticgradError(f"save_source: {name} is {what}, not Python source")
        ns = program.namespace
        names = {key: key if name == "run" else f"{name}__{key}" for key in ns if key not in ("np", "__builtins__")}
        names["run"] = name
        self.taken.update(names.values())
        self.workspace.update(id(ns[key]) for key in program.workspace)
        for key, value in ns.items():
            if key in names and key not in ("run", "P"):
                self.preferred.setdefault(id(value), names[key])
        if "P" in ns:
            self.parameters(ns["P"], names["P"])
        for key, value in ns.items():
            if key not in ("np", "__builtins__", "run", "P"):
                self.bind(names[key], value)
        code = program.code if name == "run" else _renamed(program.code, names)
        self.lines += ["", "", code.rstrip("\n"), ""]
        self._remember(program.run, name)
        return name

    def parameters(self, params, name):
        items = []
        for k, t in enumerate(params):
            if id(t) in self.memo:
                items.append(self.memo[id(t)])
                continue
            if not isinstance(t, Tensor) or t.op != "parameter":
                raise StaticgradError(f"save_source: {name}[{k}] is not a parameter ({t!r})")
            self.arrays[f"{name}{k}"] = t._value
            items.append(f"Parameter({t.label()!r}, _ARRAYS[{f'{name}{k}'!r}])")
        self.imports.setdefault("Parameter", f"from {_HERE} import Parameter")
        self.lines.append(f"{name} = [" + "".join(f"\n    {item}," for item in items) + ("\n]" if items else "]"))
        for k, t in enumerate(params):
            self._remember(t, f"{name}[{k}]")
            self._remember(t._value, f"{name}[{k}]._value")

    def bind(self, name, value):
        expression = self.value(value, name)
        if expression != name:
            self.lines.append(f"{name} = {expression}")

    def name_for(self, obj, hint) -> str:
        """The name ``obj`` is defined under: the one its namespace gives it, else a new one after ``hint``."""
        name = self.preferred.get(id(obj))
        if name is None:
            name = _unused(hint, self.taken)
            self.taken.add(name)
        return name

    def define(self, obj, hint, expression, name=None) -> str:
        """Bind ``expression`` (which makes ``obj``) to a name of its own; later uses of ``obj`` use it."""
        name = name or self.name_for(obj, hint)
        self.lines.append(f"{name} = {expression}")
        self._remember(obj, name)
        return name

    def _remember(self, obj, expression):
        self.memo[id(obj)] = expression
        self.kept.append(obj)

    # ------------------------------------------------------------------ values
    def value(self, v, hint) -> str:
        """A Python expression for ``v``, defining what it needs first; ``hint`` names what it defines."""
        if id(v) in self.memo:
            return self.memo[id(v)]
        if isinstance(v, _LITERALS) or v is Ellipsis:
            return repr(v)
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f"float('{v}')"
        if isinstance(v, np.ndarray):
            return self.array(v, hint)
        if isinstance(v, np.generic):
            return f"np.{type(v).__name__}({self.value(v.item(), hint)})"
        if isinstance(v, np.dtype):
            return _dtype(v, hint)
        if isinstance(v, (tuple, list, set, frozenset, dict, slice, range)):
            return self.container(v, hint)
        if isinstance(v, (Program, StepProgram)):
            run = self.value(v.run, hint) if isinstance(v, Program) else self.program(v, hint)
            self.imports.setdefault("Body", f"from {_HERE} import Body")
            return f"Body({run}, loop={bool(getattr(v, 'loop', False))})"
        if _is_function(v):
            return self.function(v, hint)
        return self.instance(v, hint)

    def container(self, v, hint) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{self.value(k, hint)}: {self.value(x, f'{hint}_{k}')}"
                                   for k, x in v.items()) + "}"
        if isinstance(v, (slice, range)):
            kind = type(v).__name__
            return f"{kind}({self.value(v.start, hint)}, {self.value(v.stop, hint)}, {self.value(v.step, hint)})"
        items = ", ".join(self.value(x, f"{hint}_{k}") for k, x in enumerate(v))
        if isinstance(v, tuple):
            return f"({items},)" if items else "()"
        return f"[{items}]" if isinstance(v, list) else f"{type(v).__name__}([{items}])"

    def array(self, a, hint) -> str:
        if a.dtype.hasobject:
            raise StaticgradError(f"save_source: {hint} is an array of Python objects (no .npz holds one "
                                  "without pickles)")
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root is not a and root.base is None and (root.flags.c_contiguous or root.flags.f_contiguous):
            buffer = self.value(root, f"{hint}_base")
            buffer += "" if root.flags.c_contiguous else ".T"
            offset = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
            return self.define(a, hint, f"np.ndarray({a.shape!r}, {self.value(a.dtype, hint)}, buffer={buffer}, "
                                        f"offset={offset}, strides={a.strides!r})")
        if id(a) in self.workspace:
            order = ", order='F'" if a.flags.f_contiguous and not a.flags.c_contiguous else ""
            return self.define(a, hint, f"np.empty({a.shape!r}, {self.value(a.dtype, hint)}{order})")
        name = self.name_for(a, hint)
        self.arrays[name] = a
        return self.define(a, hint, f"_ARRAYS[{name!r}]", name)

    def function(self, f, hint) -> str:
        program = getattr(f, "program", None)
        if isinstance(program, Program) and program.run is f:
            expression = self.program(program, hint)
        else:
            expression = self.imported(f) or self.kernel(f)
        if expression is None:
            raise StaticgradError(f"save_source: {hint} is {f!r}, which a module cannot import (define it at "
                                  "the top level of an importable module)")
        self._remember(f, expression)
        return expression

    def imported(self, f) -> str | None:
        if isinstance(f, np.ufunc) and getattr(np, f.__name__, None) is f:
            return f"np.{f.__name__}"
        owner = getattr(f, "__self__", None)
        if isinstance(owner, np.ufunc) and getattr(np, owner.__name__, None) is owner:
            return f"np.{owner.__name__}.{f.__name__}"
        module, qualname = getattr(f, "__module__", None), getattr(f, "__qualname__", None)
        if not module or not qualname or "<" in qualname or _find(module, qualname) is not f:
            return None
        if module == "numpy" or module.startswith("numpy."):
            return f"np.{module[6:] + '.' if module != 'numpy' else ''}{qualname}"
        head, _, rest = qualname.partition(".")
        alias = self.aliases.get((module, head))
        if alias is None:
            alias = self.aliases[module, head] = _unused(head, self.taken)
            self.taken.add(alias)
            self.imports[alias] = f"from {module} import {head}" + (f" as {alias}" if alias != head else "")
        return alias + (f".{rest}" if rest else "")

    def kernel(self, f) -> str | None:
        """An op's kernel that is not importable by name (made by a factory): through the op registry."""
        if self.kernels is None:
            self.kernels = {}
            for name, opdef in REGISTRY.items():
                self.kernels.setdefault(id(opdef.kernel), f"REGISTRY[{name!r}].kernel")
                for other, k in opdef.paired.items():
                    self.kernels.setdefault(id(k), f"REGISTRY[{name!r}].paired[{other!r}]")
        expression = self.kernels.get(id(f))
        if expression is not None:
            self.imports.setdefault("REGISTRY", "from staticgrad.ops.registry import REGISTRY")
        return expression

    def instance(self, v, hint) -> str:
        """An object of staticgrad's (a loop's runner, a gather of rows): its class, with its state."""
        cls = type(v)
        if isinstance(v, LazyProgram):
            raise StaticgradError(f"save_source: {hint} is a loop body built at each call for the sizes it is "
                                  "fed (a while_loop's backward pass, or sizes the plan does not know)")
        if not cls.__module__.startswith("staticgrad.") or isinstance(v, Tensor) or self.imported(cls) is None:
            raise StaticgradError(f"save_source: {hint} is {type(v).__name__} object {v!r:.80}, which cannot be "
                                  "written as source")
        state = dict(getattr(v, "__dict__", {}))
        for klass in cls.__mro__:
            for slot in getattr(klass, "__slots__", ()):
                if slot not in ("__dict__", "__weakref__") and hasattr(v, slot):
                    state[slot] = getattr(v, slot)
        items = ", ".join(f"{key!r}: {self.value(x, f'{hint}_{key}')}" for key, x in state.items())
        self.imports.setdefault("restore", f"from {_HERE} import restore")
        return self.define(v, hint, f"restore({self.imported(cls)}, {{{items}}})")


def _grouped(imports) -> list:
    """``from m import a`` lines, one per module: ``from m import a, b as c``."""
    names = {}
    for line in imports:
        module, _, name = line.removeprefix("from ").partition(" import ")
        names.setdefault(module, []).append(name)
    return [f"from {module} import {', '.join(sorted(names[module]))}" for module in sorted(names)]


def _dtype(v, hint) -> str:
    if v.fields is not None or v.subdtype is not None:
        raise StaticgradError(f"save_source: {hint} is the structured dtype {v}, which .npz files do not hold")
    if isinstance(getattr(np, v.name, None), type) and np.dtype(getattr(np, v.name)) == v:
        return f"np.{v.name}"
    return f"np.dtype({v.str!r})"


def _is_function(v) -> bool:
    return isinstance(v, type) or type(v).__name__ in ("function", "builtin_function_or_method", "ufunc",
                                                        "_ArrayFunctionDispatcher", "method")


def _find(module, qualname):
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def _unused(name, taken) -> str:
    base, k = name, 0
    while name in taken or not name.isidentifier():
        k += 1
        name = f"{base}_{k}" if base.isidentifier() else f"_value{k}"
    return name


def _renamed(code, names) -> str:
    """``code`` with each name of ``names`` (old -> new) replaced where it is a name, not an attribute or
    a keyword argument's key."""
    lines = code.splitlines(keepends=True)
    tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    edits = []
    for k, tok in enumerate(tokens):
        new = names.get(tok.string) if tok.type == tokenize.NAME else None
        if new is None or new == tok.string or (k and tokens[k - 1].string == "."):
            continue
        if k + 1 < len(tokens) and tokens[k + 1].string == "=":
            continue
        edits.append((tok.start, tok.end, new))
    for (row, col), (_, end), new in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[end:]
    return "".join(lines)
