"""Synthetic traces for the savings tests (tests/diagnose/test_one_cause_one_saving.py).

* ``mi300_ddp``: one rank of a DDP step on an AMD Instinct MI300X in the shape ROCm's Kineto
  writes: ``hipLaunchKernel`` / ``hipExtLaunchKernel`` runtime calls in the ``cuda_runtime``
  category and a Tensile ``Cijk_*`` GEMM (the AMD spellings tests/trace/test_formats.py reads),
  the collective kernel named as NCCL 2.19+ and RCCL name their generic kernel
  (``ncclDevKernel_Generic``, which does not say which collective it runs), ``record_param_comms``
  with the collective's sizes as PyTorch's c10d records them, and ``deviceProperties`` with the
  keys Kineto writes from the device's properties struct (on ROCm ``hipDeviceProp_t``: the
  MI300X's 304 compute units as ``numSms``, a 64-wide wavefront). No real MI300 trace is in
  this repository; this one is built to that shape. The gradient all-reduce runs alone on its
  stream after the backward GEMM, and the next kernel waits for it; the host launches that
  kernel late, so overlapping the all-reduce saves far less than the exposed time (the
  situation seen on a real MI300 trace: exposed ~62%, the what-if ~19%).
* ``overfull_job``: two CPU ranks whose findings, added, pass the step: rank 0 (the slowest)
  waits for data most of the step, with a per-tensor optimizer and two slow episodes; rank 1
  waits less for data and spends more in the optimizer.
"""

from __future__ import annotations

from pathlib import Path

from helpers.tracegen import TraceBuilder

MI300X = {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 205822885888,
          "computeMajor": 9, "computeMinor": 4, "maxThreadsPerBlock": 1024,
          "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 64,
          "sharedMemPerBlock": 65536, "numSms": 304}
#: The step of ``mi300_ddp`` (µs) and its parts.
STEP_US = 9020.0
GEMM_END = 2000.0  # the backward GEMM on the compute stream (7)
ALL_REDUCE = (2010.0, 8000.0)  # on the communication stream (20), after the GEMM
HOST_BUSY_UNTIL = 6000.0  # host-only work before it launches the next kernel
ADD_LAUNCH_END = 6010.0  # the next kernel's launch call ends here
ADD_KERNEL = (8010.0, 9010.0)  # it waits for the all-reduce
SYNC_END = 9011.0
STEPS = 4
#: The all-reduce: 1 MiB of fp32 over 8 ranks, latency-bound (far under the link).
ALL_REDUCE_ELEMS = 2**18


def mi300_ddp(path: Path) -> Path:
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [MI300X]
    b.metadata["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 8}
    for n in range(STEPS):
        t = n * STEP_US
        b.step(n, t, STEP_US)
        mm = b.op("aten::mm", t + 5, 25)
        b.stream = 7
        b.launch(t + 10, 5, k_ts=t + 20, k_dur=GEMM_END - 20, name="Cijk_Ailk_Bljk_SB_MT128x128",
                 launcher="hipLaunchKernel", external_id=mm["args"]["External id"])
        comm = b.op("record_param_comms", t + 40, 50, args={
            "Collective name": "allreduce", "In msg nelems": ALL_REDUCE_ELEMS,
            "Out msg nelems": ALL_REDUCE_ELEMS, "Group size": 8, "dtype": "Float"})
        b.stream = 20
        b.launch(t + 50, 5, k_ts=t + ALL_REDUCE[0], k_dur=ALL_REDUCE[1] - ALL_REDUCE[0],
                 name="ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
                 launcher="hipExtLaunchKernel", external_id=comm["args"]["External id"])
        b.op("aten::index", t + 100, HOST_BUSY_UNTIL - 100)  # host work, no launch
        add = b.op("aten::add", t + HOST_BUSY_UNTIL, 30)
        b.stream = 7
        b.launch(t + ADD_LAUNCH_END - 5, 5, k_ts=t + ADD_KERNEL[0],
                 k_dur=ADD_KERNEL[1] - ADD_KERNEL[0], name="elementwise_kernel",
                 launcher="hipLaunchKernel", external_id=add["args"]["External id"])
        b.event("cuda_runtime", "hipDeviceSynchronize", t + HOST_BUSY_UNTIL + 40,
                SYNC_END - HOST_BUSY_UNTIL - 40)
    return b.write(path)


LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
#: Per-tensor optimizer ops per step (over OPT_PER_TENSOR_OPS: a for-loop step).
OPT_OPS = 120


def _cpu_rank(rank: int, steps: list[tuple[float, float]]) -> TraceBuilder:
    """A CPU rank: each step (data ms, optimizer ms) is a DataLoader wait, then an SGD step
    of OPT_OPS small ops filling the optimizer time."""
    b = TraceBuilder()
    b.metadata["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
    t = 0.0
    for n, (data_ms, opt_ms) in enumerate(steps):
        data, opt = data_ms * 1000, opt_ms * 1000
        b.step(n, t, data + opt)
        b.op(LOADER, t + 1, data - 2)
        b.annotation("Optimizer.step#SGD.step", t + data, opt - 1)
        each = (opt - 2) / OPT_OPS
        for i in range(OPT_OPS):
            b.op("aten::add_", t + data + 1 + i * each, each * 0.9)
        t += data + opt
    return b


#: rank 0: mostly 6 ms of data + 4 ms of optimizer, two slow steps of 26 ms of data.
RANK0_STEPS = [(6.0, 4.0), (26.0, 4.0), (6.0, 4.0), (6.0, 4.0), (26.0, 4.0), (6.0, 4.0)]
#: rank 1: 1.5 ms of data + 7.5 ms of optimizer, steady (a median step under rank 0's 10 ms).
RANK1_STEPS = [(1.5, 7.5)] * 6


def overfull_job(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, steps in ((0, RANK0_STEPS), (1, RANK1_STEPS)):
        _cpu_rank(rank, steps).write(folder / f"rank{rank}.json")
    return folder
