"""Recording a training run: the torch profiler done safely, the step timer, `trainprof run`.

Everything here imports torch; the analysis side of trainprof never imports this package.
"""
