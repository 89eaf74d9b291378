"""Rules about the parameter update: the optimizer step and mixed-precision loss scaling."""

from __future__ import annotations

from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.sections.operators import GRAD_SCALER_OPS
from trainprof.diagnose import verdicts
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import (
    rank_finding,
    share_of_steps,
    step_evidence,
    where,
)
from trainprof.diagnose.verdicts import (  # noqa: F401 (the rule's thresholds, by its module)
    FUSED_OPTIMIZERS,
    OPT_PER_TENSOR_OPS,
    OPTIMIZER_PCT,
    OPTIMIZER_RECOVERABLE_FOREACH,
    OPTIMIZER_RECOVERABLE_FUSED,
    OptimizerFacts,
)

# optimizer_overhead's thresholds and verdict: diagnose/verdicts.py (shared with the live view
# and the checklist).
# fp16_scaler_overhead: GradScaler's ops, host or device time, as a share of the step.
SCALER_PCT = 3.0

MULTI_TENSOR = Fix(
    summary=(
        "Use the fused optimizer implementation (Adam, AdamW, SGD, Adagrad; CUDA and, since "
        "PyTorch 2.4, CPU), else the multi-tensor one (foreach=True)."
    ),
    pytorch=(
        "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)\n"
        "# other optimizers: foreach=True"
    ),
    accelerate=(
        "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)\n"
        "model, optimizer = accelerator.prepare(model, optimizer)"
    ),
)
FEWER_TENSORS = Fix(
    summary=(
        "The multi-tensor step still pays per tensor here: use fused=True on the GPU, compile "
        "the step, or merge many tiny parameters into a few larger ones."
    ),
    pytorch=(
        "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)  # on CUDA\n"
        "step = torch.compile(optimizer.step)   # elsewhere"
    ),
    accelerate=(
        "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)\n"
        "model, optimizer = accelerator.prepare(model, optimizer)"
    ),
)
NO_SCALER = Fix(
    summary=(
        "Train in bf16 (no loss scaling needed on Ampere and newer), or let a fused optimizer "
        "unscale inside its own kernel."
    ),
    pytorch=(
        "with torch.autocast('cuda', dtype=torch.bfloat16):   # and drop the GradScaler\n"
        "    loss = loss_fn(model(x), y)\n"
        "loss.backward(); optimizer.step()\n"
        "# keeping fp16: torch.optim.AdamW(params, fused=True) with scaler.step(optimizer)"
    ),
    accelerate="accelerator = Accelerator(mixed_precision='bf16')",
)


def optimizer_overhead(r: RankAnalysis) -> Finding | None:
    share = r.phases_pct["optimizer"]
    host = r.sections.host
    opt = host.optimizer if host is not None else None
    if opt is None:
        return None
    facts = OptimizerFacts(share, opt.ops_per_step, opt.name, opt.implementation)
    verdict = verdicts.optimizer_overhead(facts)
    if verdict is None:
        return None
    recoverable = verdicts.optimizer_recoverable(facts)
    fused = recoverable == OPTIMIZER_RECOVERABLE_FUSED
    saving = verdict.saving_pct
    label = opt.name or "optimizer"
    evidence = [
        Evidence("optimizer phase", share, "%", where(r)),
        Evidence("optimizer time per step", r.phases_ms["optimizer"], "ms", where(r)),
        Evidence("ops per optimizer step", round(opt.ops_per_step), "",
                 where(r, f"{label}, {opt.implementation} implementation")),
        step_evidence(r),
    ]
    if opt.mean_op_us is not None:
        evidence.insert(3, Evidence("mean op", opt.mean_op_us, "µs", where(r)))
    return rank_finding(
        r, "optimizer_overhead", verdict.severity,
        f"The {label} step takes {share:.0f}% of each step ({opt.ops_per_step:.0f} ops)",
        "Updating the parameters costs a large share of the step, in hundreds or thousands of "
        "small ops: the step pays Python and dispatch overhead for every parameter tensor, "
        "where a fused or multi-tensor step updates them in a few kernels.",
        evidence, saving, f"a {'fused' if fused else 'multi-tensor'} optimizer removes "
        f"{recoverable:.0%} of the optimizer time",
        MULTI_TENSOR if opt.implementation == "for-loop" else FEWER_TENSORS,
    )


def fp16_scaler_overhead(r: RankAnalysis) -> Finding | None:
    ops = r.sections.operators
    if ops is None:
        return None
    calls, host_us, device_us = ops.time_of(GRAD_SCALER_OPS)
    if not calls:
        return None
    share = share_of_steps(r, max(host_us, device_us))
    if share <= SCALER_PCT:
        return None
    evidence = [
        Evidence("GradScaler ops (unscale, inf check, scale update)", share, "%", where(r)),
        Evidence("their host / device time", f"{host_us / 1000:.1f} ms / "
                 f"{device_us / 1000:.1f} ms", "", where(r, f"{calls} calls")),
        step_evidence(r),
    ]
    return rank_finding(
        r, "fp16_scaler_overhead", saving_severity(share),
        f"fp16 loss scaling (GradScaler) takes {share:.0f}% of each step",
        "The GradScaler unscales every gradient, checks it for inf/nan and updates the scale "
        "each step, as separate ops (and a host sync to read the check).",
        evidence, share, "bf16 needs no loss scaling; a fused optimizer unscales in its kernel",
        NO_SCALER,
    )
