"""Rules about tensor and expert parallelism (analysis/parallelism/tensor.py, expert.py; see
docs/parallelism.md): tensor-parallel collectives that hold a large share of the step's
critical path, and all-to-all time spread unevenly across expert-parallel ranks."""

from __future__ import annotations

from trainprof.analysis.parallelism.result import ProcessGroup
from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import rank_finding, where

# tensor_parallel_communication: the tensor-parallel collectives' share of the critical path
# (the path's steps) above this; below it, a layer's all-reduces are the usual cost of tensor
# parallelism (docs/rules.md).
TENSOR_PARALLEL_PATH_PCT = 20.0
# expert_imbalance: the slowest rank's all-to-all time minus the ranks' mean above this share
# of the step (docs/rules.md).
EXPERT_IMBALANCE_PCT = 10.0
#: Layers named in a finding's evidence.
_LAYERS_SHOWN = 3
#: A tensor-parallel group larger than this crosses nodes on 8-GPU machines.
_NODE_GPUS = 8

TENSOR_PARALLEL_FIX = Fix(
    summary="Take the tensor-parallel collectives off the critical path: sequence parallelism "
            "(SequenceParallel on the norms and dropout: reduce-scatter + all-gather in place "
            "of each all-reduce, on 1/TP of the activations), async tensor parallelism "
            "(torch.compile with micro-pipelined TP: each collective split and overlapped with "
            "its matmul), or a smaller tensor-parallel degree, kept inside one node (NVLink) "
            "with data or pipeline parallelism across nodes.",
    pytorch="from torch.distributed.tensor.parallel import SequenceParallel\n"
            "plan = {'norm': SequenceParallel(),\n"
            "        'attn.wq': ColwiseParallel(input_layouts=Shard(1)),\n"
            "        'attn.wo': RowwiseParallel(output_layouts=Shard(1))}\n"
            "torch._inductor.config._micro_pipeline_tp = True   # async TP under torch.compile\n"
            "from torch.distributed._symmetric_memory import enable_symm_mem_for_group\n"
            "enable_symm_mem_for_group(tp_mesh.get_group().group_name)",
)
EXPERT_BALANCE_FIX = Fix(
    summary="Balance the tokens per expert: an auxiliary load-balancing loss (or DeepSeek-V3's "
            "auxiliary-loss-free balancing: a per-expert bias on the router's scores, nudged "
            "each step against the load), a capacity factor that drops or reroutes the excess "
            "tokens, and expert placement that spreads the hot experts (replicate them, as "
            "DeepSeek's EPLB does) so no rank receives more tokens than the others.",
    pytorch="# auxiliary-loss-free balancing: bias the routing, not the loss\n"
            "scores = router(x)                               # [tokens, experts]\n"
            "top = (scores + expert_bias).topk(k, dim=-1).indices\n"
            "load = torch.bincount(top.flatten(), minlength=n_experts)\n"
            "expert_bias += 1e-3 * torch.sign(load.float().mean() - load)   # each step",
)


def tensor_parallel_communication(r: RankAnalysis) -> Finding | None:
    p = r.sections.parallelism
    tp = p.tensor if p is not None else None
    share = tp.on_path_pct if tp is not None else None
    if p is None or tp is None or share is None or share <= TENSOR_PARALLEL_PATH_PCT:
        return None
    worst = sorted(tp.layers, key=lambda x: -x.on_path_ms)[:_LAYERS_SHOWN]
    k = tp.path_steps
    evidence = [
        Evidence("tensor-parallel collectives on the critical path", share, "%",
                 where(r, f"{tp.on_path_ms * k:.1f} of {(tp.path_ms or 0) * k:.1f} "
                          "ms of the path's steps")),
        Evidence("tensor-parallel collectives", tp.comm_ms, "ms/step",
                 where(r, f"{tp.exposed_ms:.1f} ms/step with no compute beside")),
    ]
    evidence += [Evidence(f"layer {x.layer}", 100.0 * x.on_path_ms / tp.path_ms, "% of the path",
                          where(r, f"{x.calls_per_step:.0f} collectives/step, "
                                   f"{x.comm_ms:.2f} ms/step"))
                 for x in worst if tp.path_ms]
    top = worst[0].layer if worst else ""
    return rank_finding(
        r, "tensor_parallel_communication", saving_severity(share),
        f"Tensor-parallel collectives hold {share:.0f}% of the step's critical path, most in "
        f"{top}",
        "Tensor parallelism all-reduces (or gathers and reduce-scatters) each split layer's "
        "activations in forward and their gradients in backward; the next layer needs the "
        "result, so unless the collective is overlapped the step waits for it every layer."
        + _degree_note(p.process_groups),
        evidence, share, "upper bound: every tensor-parallel collective on the path hidden "
        "under compute", TENSOR_PARALLEL_FIX, layer=top)


def _degree_note(groups: list[ProcessGroup]) -> str:
    big = [g for g in groups if g.size > _NODE_GPUS]
    return (f" A process group of {big[0].size} ranks spans more than one {_NODE_GPUS}-GPU "
            "node: tensor parallelism across nodes runs over the slower network."
            if big else "")


def expert_imbalance(analysis: Analysis, found: list[Finding]) -> list[Finding]:
    balance = analysis.job.experts
    slow = balance.slowest if balance is not None else None
    heavy = balance.overloaded if balance is not None else None
    if balance is None or slow is None or heavy is None:
        return []
    saving = balance.imbalance_pct
    if saving <= EXPERT_IMBALANCE_PCT:
        return []
    # Given to the overloaded rank, the cause, as a straggler finding is (savings.SAME_TIME).
    r = next(x for x in analysis.ranks if x.rank == heavy.rank)
    evidence = [Evidence(f"rank {x.rank} all-to-all", x.all_to_all_ms, "ms/step",
                         f"{x.hidden_pct:.0f}% beside compute") for x in balance.ranks]
    evidence += [Evidence("mean all-to-all", balance.mean_ms, "ms/step", "every rank"),
                 Evidence("slowest rank over the mean", balance.imbalance_ms, "ms/step",
                          f"rank {slow.rank}")]
    finding = rank_finding(
        r, "expert_imbalance", saving_severity(saving),
        f"Expert parallelism is unbalanced: rank {slow.rank} waits {balance.imbalance_ms:.1f} "
        f"ms per step more than the mean in all-to-all, for rank {heavy.rank}'s experts",
        "Each all-to-all waits for the rank that computes longest: the ranks whose experts "
        "receive fewer tokens finish first and wait in the next dispatch or combine. The "
        "spread of the all-to-all time across ranks is what the imbalance costs.",
        evidence, saving, "every rank's all-to-all at the mean: the slowest rank's excess "
        "over it saved", EXPERT_BALANCE_FIX, slowest_rank=slow.rank)
    finding.saving_ms = balance.imbalance_ms
    return [finding]

