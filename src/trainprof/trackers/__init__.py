"""Experiment trackers: trainprof's figures, findings and reports in MLflow, Weights & Biases
and TensorBoard (docs/trackers.md). Each tracker is an optional extra, imported only when used.
"""

#: The trackers ``--log-to`` and ``log_to=`` accept by name.
TRACKER_NAMES = ("mlflow", "wandb", "tensorboard")
