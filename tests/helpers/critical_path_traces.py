"""Kineto traces of two GPU-bound training steps whose critical path is known, built by a small
simulation that records what each device event waited for.

* ``dualpipe_h800``: an H800 expert-parallel step in the DualPipe style: compute on one stream,
  DeepEP-like all-to-all kernels (``notify_dispatch``, ``dispatch``, ``combine``) on their own,
  the host queueing compute far ahead and then waiting for the notify kernel inside its
  ``dispatch(F)`` / ``combine(B)`` annotations: by polling ``cudaEventQuery`` or by a busy-wait on
  pinned memory (no call recorded), before it launches the all-to-all.
* ``ddp_mi300``: an MI300 DDP ResNet step: MIOpen/Tensile kernels launched with
  ``hipExtModuleLaunchKernel`` and ``hipLaunchKernel`` on the compute stream, RCCL all-reduces
  (``ncclDevKernel_Generic``) on stream 4 launched from the autograd thread, each waiting for its
  bucket's last gradient kernel (``hipStreamWaitEvent``), and the optimizer's kernels waiting for
  the last all-reduce.

The format is the one PyTorch 2.x's Kineto writes, field by field (seen in the H100 traces of
``h100/`` and the HTA test traces): ``ProfilerStep#N`` and annotations as ``user_annotation``,
their device spans as ``gpu_user_annotation`` on the stream, ``cuda_runtime`` calls with a
``correlation`` (also ROCm's category for HIP calls: Kineto's ``RoctracerActivity.h`` gives a
HIP API call ``ActivityType::CUDA_RUNTIME``, written ``cuda_runtime``),
``kernel`` events with ``device``/``stream``/``correlation`` args, and ``ac2g`` flows from each
launch to its kernel.

``Sim.truth`` is each step's critical path as the simulation knows it: from the step's last
event back through what each event waited for (the stream before it, the event it waited on, its
launch, or the host's wait). Tests compare the analysis with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helpers.tracegen import TraceBuilder

H800 = {"id": 0, "name": "NVIDIA H800", "totalGlobalMem": 85_045_379_072, "computeMajor": 9,
        "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132}
MI300 = {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 205_822_885_888,
         "computeMajor": 9, "computeMinor": 4, "maxThreadsPerBlock": 1024,
         "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 64,
         "sharedMemPerBlock": 65536, "numSms": 304}
#: µs from a launch call's end to its kernel's start on an idle stream, and from an awaited
#: event to the waiting stream's next kernel.
LAUNCH_LAG = 6.0
WAIT_LAG = 4.0


@dataclass(eq=False)
class Op:
    """A device event as simulated: its times, and what set its start ("stream", "event",
    "launch" or "step": the stream's work of the step before)."""

    name: str
    stream: int
    start: float
    end: float
    by: str
    after: Op | None  # the event it waited for (stream or event), None for a launch
    launch_end: float  # the host time its launch call returned
    step: int = 0
    host_waited: float = 0.0  # for a launch after a host wait: the wait's end


@dataclass
class Sim:
    """A host thread (or two) and a device's streams, advancing in µs."""

    b: TraceBuilder
    host: float = 0.0
    last: dict[int, Op] = field(default_factory=dict)  # each stream's last op
    ops: list[Op] = field(default_factory=list)
    step_ops: list[list[Op]] = field(default_factory=list)
    woke_at: float | None = None  # the end of the host's last wait (its launch follows)
    woke_for: Op | None = None

    def launch(self, name: str, stream: int, dur: float, wait: Op | None = None,
               launcher: str = "cudaLaunchKernel", tid: int | None = None,
               host_dur: float = 8.0, op: str | None = None) -> Op:
        """A launch call at the host's time (inside an ``op`` when named) and its kernel,
        queued behind the stream's last kernel and, with ``wait``, behind that event (a stream
        wait)."""
        if op is not None:
            self.b.op(op, self.host, host_dur + 4.0, tid=tid)
            self.host += 2.0
        at = self.host
        ready = at + host_dur + LAUNCH_LAG
        prev = self.last.get(stream)
        inputs = [(ready, "launch", None)]
        if prev is not None:
            carried = prev.step != len(self.step_ops) - 1
            inputs.append((prev.end, "step" if carried else "stream", prev))
        if wait is not None:
            inputs.append((wait.end + WAIT_LAG, "event", wait))
        # The latest input sets the start; device work wins a tie (as it does in the analysis).
        start, by, after = max(inputs, key=lambda x: (x[0], x[1] != "launch"))
        self.b.stream = stream
        self.b.launch(at, host_dur, name=name, k_ts=start, k_dur=dur, launcher=launcher,
                      tid=tid, flow=True)
        op = Op(name, stream, start, start + dur, by, after, at + host_dur,
                step=len(self.step_ops) - 1)
        if by == "launch" and self.woke_at is not None:
            op.host_waited, op.after = self.woke_at, self.woke_for
        self.woke_at = self.woke_for = None
        self.host = at + host_dur + (4.0 if op is not None else 2.0)
        self.last[stream] = op
        self.ops.append(op)
        self.step_ops[-1].append(op)
        return op

    def runtime(self, name: str, dur: float = 3.0, tid: int | None = None) -> None:
        """A runtime call that launches nothing (event record, stream wait)."""
        self.b.event("cuda_runtime", name, self.host, dur, {"correlation": -1}, tid=tid)
        self.host += dur + 1.0

    def poll(self, op: Op, every: float = 25.0) -> None:
        """A ``cudaEventQuery`` loop until ``op`` ends: the call that sees it done returns."""
        while True:
            at = self.host
            self.b.event("cuda_runtime", "cudaEventQuery", at, 2.0,
                         {"correlation": self.b._corr})
            self.b._corr += 1
            self.host = at + 2.0
            if at >= op.end:
                break
            self.host = at + every
        self._woke(op)

    def spin(self, op: Op) -> None:
        """A busy-wait on pinned memory (DeepEP's): no call recorded, the host idle until the
        kernel's write lands, 1 µs after it ends."""
        self.host = max(self.host, op.end + 1.0)
        self._woke(op)

    def _woke(self, op: Op) -> None:
        self.host += 2.0  # back in Python
        self.woke_at, self.woke_for = self.host, op

    def truth(self, step: int) -> tuple[float, float, float]:
        """(path µs, device µs, host µs) of a step's path as simulated: from the step's last
        event back through what set each start, to the step's first event."""
        ops = self.step_ops[step]
        op: Op | None = max(ops, key=lambda o: o.end)
        end = op.end
        device = host = 0.0
        while op is not None:
            device += op.end - op.start
            if op.by == "launch":
                if op.after is None:  # launched from host work nobody waited for: stop
                    host += op.start - op.launch_end
                    break
                host += op.start - op.after.end  # the host's wake and launch
            elif op.by != "step":
                device += op.start - op.after.end  # a gap on the device (a stream's wait)
            if op.by == "step" or op.after is None:
                break
            op = op.after
        start = op.start if op is not None else end
        return end - start, device, host


def _annotated(sim: Sim, name: str, body) -> None:
    """``body()`` inside a ``user_annotation`` on the host and its ``gpu_user_annotation``
    over the device events it launched."""
    at, first = sim.host, len(sim.ops)
    sim.host += 1.0
    body()
    sim.host += 1.0
    sim.b.annotation(name, at, sim.host - at)
    ops = sim.ops[first:]
    if ops:
        start, end = min(o.start for o in ops), max(o.end for o in ops)
        sim.b.event("gpu_user_annotation", name, start, end - start,
                    {"device": 0, "stream": ops[0].stream}, on_device=True, tid=ops[0].stream)


def dualpipe_h800(steps: int = 3, chunks: int = 4) -> Sim:
    """The DualPipe-like H800 trace (module docstring): compute on stream 7, all-to-all on 20."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [H800]
    b.metadata["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 1}
    sim = Sim(b)
    compute, comm = 7, 20
    gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1"
    for n in range(steps):
        sim.step_ops.append([])
        step_at = sim.host
        sim.host += 1.0

        def chunk(c: int) -> None:
            for i in range(3):  # attention of micro-batch c, far ahead of the device
                sim.launch(f"{gemm}<attn{i}>", compute, 1600.0, op="aten::mm")
            attn = sim.last[compute]
            sim.runtime("cudaEventRecord")
            sim.runtime("cudaStreamWaitEvent")
            notify = sim.launch("void deep_ep::intranode::notify_dispatch<8>(int const*, int*)",
                                comm, 20.0, wait=attn)
            if c % 2:
                sim.spin(notify)
            else:
                sim.poll(notify)
            moved = sim.launch("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)"
                               if c % 2 == 0 else
                               "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*)",
                               comm, 5500.0)
            sim.runtime("cudaEventRecord")
            sim.runtime("cudaStreamWaitEvent")
            for i in range(6):  # the experts, once the tokens have arrived
                sim.launch(f"{gemm}<expert{i}>", compute, 1600.0, wait=moved if i == 0 else None,
                           op="aten::mm")

        def one_f_one_b() -> None:
            for c in range(chunks):
                _annotated(sim, "dispatch(F)" if c % 2 == 0 else "combine(B)",
                           lambda c=c: chunk(c))

        _annotated(sim, "1F1B", one_f_one_b)
        sim.host += 1.0
        b.annotation(f"ProfilerStep#{n}", step_at, sim.host - step_at)
    return sim


def ddp_mi300(steps: int = 3, buckets: int = 4) -> Sim:
    """The MI300 DDP ResNet trace (module docstring): compute on stream 0, RCCL on stream 4."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [MI300]
    b.metadata["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 8}
    sim = Sim(b)
    compute, comm, autograd = 0, 4, 101
    conv = "igemm_fwd_gtcx3_nhwc_fp32_bx0_ex1_bt128x128x16_wt32x32x2_ws1x1_wr2x2_ta1x8x2x1"
    rccl = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    for n in range(steps):
        sim.step_ops.append([])
        step_at = sim.host
        for _ in range(12):  # forward: the host queues it all
            sim.launch(conv, compute, 420.0, launcher="hipExtModuleLaunchKernel",
                       op="aten::cudnn_convolution")
        reduce = None
        for k in range(buckets):  # backward on the autograd thread, a bucket at a time
            for i in range(4):
                sim.launch(f"{conv}<bwd{i}>", compute, 380.0, launcher="hipExtModuleLaunchKernel",
                           tid=autograd, op="aten::convolution_backward")
            ready = sim.last[compute]
            sim.runtime("hipEventRecord", tid=autograd)
            sim.runtime("hipStreamWaitEvent", tid=autograd)
            reduce = sim.launch(rccl, comm, 900.0 if k < buckets - 1 else 1300.0, wait=ready,
                                launcher="hipLaunchKernel", tid=autograd)
        sim.runtime("hipStreamWaitEvent")  # the optimizer waits for the last all-reduce
        for i in range(6):
            sim.launch("void at::native::(anonymous namespace)::multi_tensor_apply_kernel",
                       compute, 150.0, wait=reduce if i == 0 else None,
                       launcher="hipLaunchKernel", op="aten::_foreach_add_")
        b.annotation(f"ProfilerStep#{n}", step_at, sim.host - step_at)
    return sim
