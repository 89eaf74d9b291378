"""What to change for each finding: a short summary and snippets (plain PyTorch, accelerate)."""

from __future__ import annotations

from trainprof.diagnose.findings import Fix

DATA_LOADING = Fix(
    summary="Load batches in background worker processes, pinned, and keep the workers alive.",
    pytorch=(
        "loader = DataLoader(dataset, batch_size=bs, shuffle=True,\n"
        "                    num_workers=4, pin_memory=True,\n"
        "                    persistent_workers=True, prefetch_factor=2)"
    ),
    accelerate=(
        "loader = DataLoader(dataset, batch_size=bs, num_workers=4, pin_memory=True,\n"
        "                    persistent_workers=True)\n"
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"
    ),
)

HOST_BOUND = Fix(
    summary=(
        "Give the GPU more work per launch: a larger batch, torch.compile (fewer, fused "
        "kernels), CUDA graphs (mode='reduce-overhead'), and no host work inside the step."
    ),
    pytorch="model = torch.compile(model, mode='reduce-overhead')",
    accelerate=(
        "from accelerate.utils import TorchDynamoPlugin\n"
        "accelerator = Accelerator(dynamo_plugin=TorchDynamoPlugin(backend='inductor',\n"
        "                                                          mode='reduce-overhead'))"
    ),
)

OPTIMIZER = Fix(
    summary="Use the fused (GPU) or foreach (multi-tensor) optimizer implementation.",
    pytorch=(
        "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)  # on CUDA\n"
        "# or foreach=True on any device"
    ),
    accelerate=(
        "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)\n"
        "model, optimizer = accelerator.prepare(model, optimizer)"
    ),
)

COMMUNICATION = Fix(
    summary=(
        "Overlap gradient communication with backward: tune DDP bucket sizes, skip the "
        "all-reduce on accumulation steps, and keep the model on the NCCL backend."
    ),
    pytorch=(
        "model = DDP(model, bucket_cap_mb=50, gradient_as_bucket_view=True)\n"
        "with model.no_sync():   # on gradient-accumulation micro-steps\n"
        "    loss.backward()"
    ),
    accelerate=(
        "from accelerate.utils import DistributedDataParallelKwargs\n"
        "accelerator = Accelerator(gradient_accumulation_steps=4, kwargs_handlers=[\n"
        "    DistributedDataParallelKwargs(bucket_cap_mb=50, gradient_as_bucket_view=True)])\n"
        "with accelerator.accumulate(model):\n"
        "    ..."
    ),
)

STEP_VARIANCE = Fix(
    summary=(
        "Move periodic work (evaluation, checkpoints, logging) out of the hot loop or make it "
        "asynchronous; avoid shape changes that recompile; check for contention."
    ),
    pytorch=(
        "if step % 500 == 0:   # rarely, and after the optimizer step\n"
        "    torch.save(model.state_dict(), path)"
    ),
)
