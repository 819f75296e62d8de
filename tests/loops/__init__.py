"""Tests of staticgrad.loops: scan (and the control flow built on it)."""
