"""The rules in force and every finding id: the list the engine runs (diagnose/engine.py), the
docs' order (docs/rules.md) and the tests' (tests/diagnose/test_rules.py) come from here.

A rank rule takes one ``RankAnalysis`` and returns a ``Finding`` or None; a job rule takes the
whole ``Analysis`` and the rank findings, and returns a list. The rules themselves live in
``diagnose/rules/``, one small function per finding id, grouped by theme.
"""

from __future__ import annotations

from collections.abc import Callable

from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import Finding
from trainprof.diagnose.rules import (
    compilation,
    distributed,
    gpu,
    hardware,
    host,
    input,
    memory,
    model_parallel,
    outside_training,
    parallelism,
    precision,
    training,
)

RankRule = Callable[[RankAnalysis], Finding | None]
JobRule = Callable[[Analysis, list[Finding]], list[Finding]]

RANK_RULES: list[RankRule] = [
    input.data_loading,
    input.input_preprocessing,
    input.host_to_device_copies,
    host.host_bound,
    host.small_kernels,
    host.sync_points,
    host.logging_overhead,
    host.step_variance,
    gpu.low_occupancy,
    gpu.no_tensor_cores,
    gpu.attention_not_fused,
    hardware.far_from_roofline,
    hardware.slow_collectives,
    training.optimizer_overhead,
    training.fp16_scaler_overhead,
    memory.memory_pressure,
    memory.memory_headroom,
    memory.memory_growth,
    memory.memory_fragmentation,
]
RANK_RULES += [compilation.compilation, compilation.untraced_time, host.cuda_api_time]
RANK_RULES += [precision.wide_precision, outside_training.outside_training]
RANK_RULES += [model_parallel.tensor_parallel_communication]
JOB_RULES: list[JobRule] = [
    distributed.communication_exposed,
    distributed.straggler,
]
JOB_RULES += [parallelism.pipeline_imbalance, parallelism.pipeline_bubble,
              parallelism.fsdp_exposed_communication]
JOB_RULES += [model_parallel.expert_imbalance]

#: Every finding id, in the order docs/rules.md lists them.
FINDING_IDS = [
    "data_loading", "input_preprocessing", "host_to_device_copies", "host_bound",
    "small_kernels", "sync_points", "logging_overhead", "step_variance", "low_occupancy",
    "no_tensor_cores", "attention_not_fused", "optimizer_overhead", "fp16_scaler_overhead",
    "memory_pressure", "memory_headroom", "memory_growth", "memory_fragmentation",
    "communication_exposed", "straggler", "far_from_roofline", "slow_collectives",
]
FINDING_IDS += ["compilation", "untraced_time", "cuda_api_time"]
FINDING_IDS += ["wide_precision", "outside_training"]
FINDING_IDS += ["pipeline_imbalance", "pipeline_bubble", "fsdp_exposed_communication"]
FINDING_IDS += ["tensor_parallel_communication", "expert_imbalance"]
