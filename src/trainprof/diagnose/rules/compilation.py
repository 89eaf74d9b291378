"""Rules about step time the training does not spend training: compiling, and time no recorded
op covers (JIT outside torch, I/O, sleeps)."""

from __future__ import annotations

from trainprof.analysis.results import RankAnalysis
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import rank_finding, where

# compilation: torch.compile's compiler running inside the profiled steps, % of step time.
COMPILE_PCT = 5.0
# untraced_time: step time in gaps (>= 1 ms) that no recorded op or device work covers and no
# other rule claims (data wait, input lead-in, work after the optimizer), % of step time.
UNTRACED_PCT = 50.0
#: host parts (analysis/sections/host.py) whose own rules already explain untraced time in them.
_CLAIMED_PARTS = ("data", "communication", "lead_in", "after_optimizer")

FIRST_COMPILE = Fix(
    summary=(
        "Compilation runs once, on the first steps: record after it. Give the profiler "
        "schedule enough skip_first/wait/warmup steps to cover the compiling steps, so the "
        "trace shows the steady state."
    ),
    pytorch=(
        "schedule = torch.profiler.schedule(skip_first=3, wait=1, warmup=1, active=3)\n"
        "# or: trainprof.profile(schedule_option=dict(skip_first=3, wait=1, warmup=1, active=3))"
    ),
    accelerate=(
        "ProfileKwargs(schedule_option=dict(skip_first=3, wait=1, warmup=1, active=3))"
    ),
)
RECOMPILE = Fix(
    summary=(
        "Stop the recompilations: each one is a guard that failed, usually an input shape "
        "that changes (variable sequence lengths, the last partial batch) or a Python value "
        "that changes. Run with TORCH_LOGS=recompiles to see the guard; mark the varying "
        "dimension dynamic (torch._dynamo.mark_dynamic, or torch.compile(dynamic=True)), pad "
        "to a few fixed sizes or use drop_last=True, and keep Python scalars that change out "
        "of the compiled function (pass them as tensors)."
    ),
    pytorch=(
        "torch._dynamo.mark_dynamic(batch, 0)   # the dimension that varies\n"
        "model = torch.compile(model, dynamic=True)\n"
        "loader = DataLoader(dataset, batch_size=64, drop_last=True)\n"
        "# TORCH_LOGS=recompiles python train.py   shows which guard failed"
    ),
    accelerate=(
        "from accelerate.utils import TorchDynamoPlugin\n"
        "accelerator = Accelerator(dynamo_plugin=TorchDynamoPlugin(backend='inductor',\n"
        "                                                          dynamic=True))"
    ),
)
UNTRACED = Fix(
    summary=(
        "Find what runs in the untraced time: it is outside every op the profiler records "
        "(a JIT compiler outside torch, file or network I/O, sleeps, waits on a lock or "
        "another process). Record Python frames (with_stack=True) or wrap suspect code in "
        "torch.profiler.record_function to name it, then move it out of the step or overlap it."
    ),
    pytorch=(
        "with torch.profiler.record_function('load_shard'):\n"
        "    shard = read_next_shard()   # now visible in the trace"
    ),
)


def compilation(r: RankAnalysis) -> Finding | None:
    c = r.sections.compilation
    if c is None or c.compile_pct is None or c.compile_pct <= COMPILE_PCT:
        return None
    recompiling = c.recompilations > 0 and c.recompile_ms > 0
    steps = len(c.steps_compiling)
    evidence = [
        Evidence("compile time per step", c.compile_ms, "ms", where(r)),
        Evidence("of step time", c.compile_pct, "%", where(r)),
        Evidence("steps that compile", f"{steps} of {c.steps}", "",
                 where(r, "steps " + ", ".join(f"#{s}" for s in c.steps_compiling[:8]))),
        Evidence("first compilations", c.first_compilations, "",
                 where(r, f"{c.first_ms:.1f} ms/step")),
        Evidence("recompilations", c.recompilations, "",
                 where(r, f"{c.recompile_ms:.1f} ms/step")),
    ]
    if recompiling:
        title = (f"torch.compile recompiles in {steps} of {c.steps} steps: {c.compile_pct:.0f}% "
                 "of step time is compilation")
        explanation = ("The compiler (TorchDynamo, AOTAutograd, Inductor, Triton) runs again "
                       "inside the steps: a guard of an already compiled frame failed, usually "
                       "because an input shape or a Python value changed, and the frame is "
                       "compiled anew. Each recompilation costs as much as the first.")
        assumption = "no recompilations, and the first compilation recorded outside the steps"
        fix = RECOMPILE
    else:
        title = (f"The first torch.compile compilation is {c.compile_pct:.0f}% of the "
                 "recorded step time")
        explanation = ("The profiled steps include the one-time compilation (TorchDynamo, "
                       "AOTAutograd, Inductor, Triton): those steps are not what training "
                       "costs once compiled, and every other figure here is skewed by them.")
        assumption = ("the one-time compilation left out of the recorded steps (training "
                      "itself pays it once per run)")
        fix = FIRST_COMPILE
    first_step = c.steps_compiling[0] if c.steps_compiling else None
    extra = {"step": first_step} if first_step is not None else {}
    return rank_finding(
        r, "compilation", saving_severity(c.compile_pct), title,
        explanation, evidence, c.compile_pct, assumption, fix,
        recompilations=c.recompilations, **extra,
    )


def untraced_left_pct(r: RankAnalysis) -> float:
    """Untraced share of the step that no other rule (data, lead-in, after-optimizer) claims."""
    c = r.sections.compilation
    if c is None or c.untraced_pct is None:
        return 0.0
    host = r.sections.host
    claimed = sum((host.pct.get(p) or 0.0) for p in _CLAIMED_PARTS) if host is not None else 0.0
    return max(c.untraced_pct - claimed, 0.0)


def untraced_time(r: RankAnalysis) -> Finding | None:
    c = r.sections.compilation
    left = untraced_left_pct(r)
    if c is None or left <= UNTRACED_PCT:
        return None
    evidence = [
        Evidence("step time outside every recorded op and device work", c.untraced_pct or 0.0, "%",
                 where(r, "gaps of 1 ms or more")),
        Evidence("per step", c.untraced_ms, "ms", where(r)),
    ]
    if c.longest_untraced:
        evidence.append(Evidence("longest gap", c.longest_untraced[1], "ms",
                                 where(r, f"step {c.longest_untraced[0]}")))
    evidence += [Evidence("Python in that time", f.ms_per_step, "ms/step", f.name)
                 for f in c.untraced_frames]
    step = {"step": c.longest_untraced[0]} if c.longest_untraced else {}
    return rank_finding(
        r, "untraced_time", saving_severity(left),
        f"{left:.0f}% of each step runs outside every recorded op",
        "For this share of the step no CPU op, annotation, CUDA API call or device work is "
        "recorded on any thread: the time goes to code the profiler does not see (a JIT "
        "compiler outside torch, I/O, sleeps, waits). A larger batch or CUDA graphs would not "
        "help: find that code first.",
        evidence, left, "the untraced work moved out of the step or overlapped with it",
        UNTRACED, **step,
    )
