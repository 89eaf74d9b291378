"""A copy of a trace with trainprof's verdict on its timeline."""
