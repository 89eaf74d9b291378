"""Recording under accelerate (`trainprof.integrations.accelerate`) and Lightning
(`trainprof.integrations.lightning`) with trainprof's options and file layout.

Both build on `trainprof.capture`; each imports its framework only when it is imported itself.
"""
