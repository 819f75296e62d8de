"""Lowering: an optimized graph becomes a runnable program for the concrete sizes of one call."""
