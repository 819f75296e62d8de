"""The check the op tests share: a bad call raises the error it should, naming the op, the user's line and
what was wrong."""
from __future__ import annotations

import os

import pytest


def assert_refused(error, op, words, make):
    """``make()`` raises ``error`` whose message starts with ``op:``, names the line ``make`` was written on
    and holds each of ``words``."""
    with pytest.raises(error) as info:
        make()
    message = str(info.value)
    line = f"{os.path.basename(make.__code__.co_filename)}:{make.__code__.co_firstlineno}"
    assert message.startswith(f"{op}: ") and line in message, message
    for word in words:
        assert word in message, message
