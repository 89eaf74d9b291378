"""Rules about work inside the step that is not training: validation passes, checkpoints,
logging that run as ops outside data, forward, backward and the optimizer."""

from __future__ import annotations

import re

from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.sections.host_outside import OutsideWork
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import rank_finding, step_evidence, where
from trainprof.lazy import LazyPattern

# outside_training: in at least half the steps (the median step), host ops fill at least
# OUTSIDE_MIN_PCT of the step outside the training phases (analysis/sections/host_outside.py).
# The median leaves out work done every N steps only (step_variance's finding).
OUTSIDE_MIN_PCT = 25.0

# What the work is, from the op names and call sites: the model's compute (inference, as in a
# validation pass), checkpoint writes, logging and metrics.
_INFERENCE = LazyPattern(
    r"^aten::(?:linear|addmm|mm|bmm|matmul|baddbmm|conv\w*|_convolution|scaled_dot_product\w*"
    r"|layer_norm|batch_norm|group_norm|rms_norm|embedding|lstm|gru|relu|gelu|silu|tanh|sigmoid"
    r"|softmax|dropout)$|^nn\.Module:", re.IGNORECASE)
_CHECKPOINT = LazyPattern(r"serialization|torch\.save|\bsave\b|checkpoint|state_dict",
                           re.IGNORECASE)
_LOGGING = LazyPattern(r"log|print|wandb|tensorboard|add_scalar|summary|metric|mlflow",
                        re.IGNORECASE)

EVALUATE_LESS = Fix(
    summary=(
        "Model inference runs inside every training step (a validation pass, under no_grad): "
        "validate every N steps or once per epoch, outside the training step, in "
        "inference_mode and with larger batches."
    ),
    pytorch=(
        "if step % eval_every == 0:   # not every step\n"
        "    model.eval()\n"
        "    with torch.inference_mode():\n"
        "        val_loss = sum(loss_fn(model(x), y) for x, y in val_loader)\n"
        "    model.train()"
    ),
    accelerate=(
        "if accelerator.sync_gradients and step % eval_every == 0:\n"
        "    model.eval()\n"
        "    with torch.inference_mode():\n"
        "        val_loss = sum(loss_fn(model(x), y) for x, y in val_loader)\n"
        "    model.train()"
    ),
)
CHECKPOINT_LESS = Fix(
    summary=(
        "Checkpoints are written inside the step: save every N steps, and asynchronously "
        "(torch.distributed.checkpoint.async_save, or a copy to the CPU written by a thread)."
    ),
    pytorch=(
        "if step % save_every == 0:\n"
        "    import torch.distributed.checkpoint as dcp\n"
        "    pending = dcp.async_save({'model': model.state_dict()}, checkpoint_id=path)"
    ),
    accelerate="if step % save_every == 0:\n    accelerator.save_state(output_dir)",
)
LOG_LESS = Fix(
    summary=(
        "Metrics are computed and logged inside every step: log every N steps, keep running "
        "sums on the device and read them once."
    ),
    pytorch="if step % log_every == 0:\n    logger.log({'loss': loss.item()})",
)
MOVE_OUT = Fix(
    summary=(
        "Ops outside forward, backward and the optimizer take much of every step: move that "
        "work out of the training step, or run it every N steps."
    ),
    pytorch="if step % every == 0:\n    extra_work()   # not inside each step",
)


def kind_of(work: OutsideWork) -> str:
    """"checkpoint", "logging", "inference" or "other", by the op's name and call site."""
    text = f"{work.name} {work.source or ''}"
    if _CHECKPOINT.search(text):
        return "checkpoint"
    if _INFERENCE.search(work.name):
        return "inference"
    return "logging" if _LOGGING.search(work.source or "") else "other"


_FIXES = {"inference": EVALUATE_LESS, "checkpoint": CHECKPOINT_LESS, "logging": LOG_LESS,
          "other": MOVE_OUT}
_WORDS = {"inference": "model inference (a validation pass?)", "checkpoint": "checkpoint writes",
          "logging": "logging and metrics", "other": "ops"}


def outside_training(r: RankAnalysis) -> Finding | None:
    host = r.sections.host
    out = host.outside_training if host is not None else None
    if out is None or out.median_pct < OUTSIDE_MIN_PCT:
        return None
    weight: dict[str, float] = {}
    for w in out.top:
        weight[kind_of(w)] = weight.get(kind_of(w), 0.0) + w.ms_per_step
    kind = max(weight, key=lambda k: weight[k]) if weight else "other"
    evidence = [
        Evidence("step time filled by ops outside data, forward, backward and optimizer",
                 out.mean_pct, "%", where(r)),
        Evidence("per step", out.ms_per_step, "ms", where(r)),
        Evidence("in the median step", out.median_pct, "%", where(r)),
        *[Evidence(f"{kind_of(w)}: {w.name}", w.ms_per_step, "ms/step",
                   where(r, f"{w.calls} calls",
                         f"called from {w.source}" if w.source else "call site not recorded"))
          for w in out.top[:3]],
        step_evidence(r),
    ]
    return rank_finding(
        r, "outside_training", saving_severity(out.mean_pct),
        f"{out.mean_pct:.0f}% of each step runs outside the training phases: {_WORDS[kind]}",
        "After (or around) forward, backward and the optimizer, the step runs more ops that "
        "do not train the model: they lengthen every step.",
        evidence, out.mean_pct, "the work leaves the training step (run every N steps it "
        "costs 1/N of this per step)", _FIXES[kind],
    )
