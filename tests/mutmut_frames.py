"""A pytest plugin for the mutation run only (pyproject's [tool.mutmut] loads it; docs/mutation.md).

mutmut calls each mutated function through a trampoline in its own package. staticgrad names the user's line
of a node (``built at file:line``, errors' ``(at file:line)``) as the innermost frame outside the staticgrad
package, and would name the trampoline's. Filed under the package, the trampoline's frames are skipped as
staticgrad's own. Done before staticgrad is imported: each trampoline is made at import time.
"""
import importlib.util
import os
import types

from mutmut.mutation import trampoline

_PACKAGE = importlib.util.find_spec("staticgrad").submodule_search_locations[0]


def _filed_under(code, filename):
    consts = tuple(_filed_under(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


trampoline.wrap_in_trampoline.__code__ = _filed_under(trampoline.wrap_in_trampoline.__code__,
                                                      os.path.join(_PACKAGE, "mutmut_trampoline.py"))
