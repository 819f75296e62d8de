"""Tests of the op modules of staticgrad/ops/ (what their specs in tests/specs/ cannot check)."""
