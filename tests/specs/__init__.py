"""More op specs, one module per op family (conv, pool, random, ...), so families land without editing one
shared list. Each module imports ``spec`` and the samplers from tests.op_specs and calls ``spec`` at import;
tests/op_specs.py imports every module here once its own specs are made."""
