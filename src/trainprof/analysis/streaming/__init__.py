"""Traces too large to hold at once: the memory budget, spilled traces, windows."""
