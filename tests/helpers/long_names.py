"""FlashAttention 3 kernels under the names Kineto writes for them on an H100 (CUTLASS 3
templates of a thousand characters), and a trace of one backward pass with them."""

from __future__ import annotations

from helpers.modern_traces import H800, STEP_US
from helpers.tracegen import TraceBuilder


def _fa3_kernel(inner: str) -> str:
    """A FlashAttention 3 kernel as Kineto writes it on an H100 (the demangled CUTLASS 3
    launcher, parameter list included: ``void cutlass::device_kernel<…>(….::Params)``)."""
    return (f"void cutlass::device_kernel<flash::enable_sm90_or_later<{inner} > >"
            f"({inner}::Params)")


def fa3_backward(hdim: int) -> str:
    """FlashAttention 3's main backward kernel for head dimension ``hdim`` (bf16, SM90)."""
    return _fa3_kernel(
        "flash::FlashAttnBwdSm90<flash::CollectiveMainloopBwdSm90<2, cute::tuple<cute::C<1>, "
        f"cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<128>, cute::C<{hdim}> >, "
        "cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, false, false, "
        "true, false, false, 2, 1, 2, 1, false>, flash::CollectiveEpilogueBwd<cute::tuple<"
        f"cute::C<128>, cute::C<128>, cute::C<{hdim}> >, cutlass::bfloat16_t, "
        "cutlass::arch::Sm90, 256, false, false, 2, 1, false>, flash::SingleTileScheduler<"
        "false, false, true> >")


def fa3_backward_preprocess(hdim: int) -> str:
    return _fa3_kernel(
        f"flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>, cute::C<{hdim}> >, "
        "cutlass::bfloat16_t, float, cutlass::arch::Sm90, false, false>")


def fa3_backward_postprocess(hdim: int) -> str:
    return _fa3_kernel(
        f"flash::FlashAttnBwdPostprocessConvertdQ<cute::tuple<cute::C<64>, cute::C<{hdim}> >, "
        "cutlass::bfloat16_t, float, cutlass::arch::Sm90, 256, cute::TiledMMA<cute::MMA_Atom<"
        "cute::SM90_64x128x16_F32BF16BF16_SS<(cute::GMMA::Major)0, (cute::GMMA::Major)1, "
        "(cute::GMMA::ScaleIn)1, (cute::GMMA::ScaleIn)1> >, cute::Layout<cute::tuple<"
        "cute::C<2>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<1>, cute::C<0>, cute::C<0> > "
        ">, cute::tuple<cute::Underscore, cute::Underscore, cute::Underscore> >, false, false, "
        "false>")


def fa3_backward_trace(steps: int = 3) -> TraceBuilder:
    """Per 1000 µs step on an H100: FA3's backward for head dimensions 128 and 64 (preprocess
    [10, 60), main [60, 460) and [460, 760), postprocess [760, 860)), an all-reduce [860, 960)
    and a plain elementwise kernel [960, 990). Kernel time per step: Tensor Core 850 µs,
    communication 100 µs, other compute 30 µs."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [dict(H800, name="NVIDIA H100 80GB HBM3")]
    for n in range(steps):
        t = n * STEP_US
        b.step(n, t, STEP_US)
        b.launch(t + 2, 3, name=fa3_backward_preprocess(128), k_ts=t + 10, k_dur=50)
        b.launch(t + 6, 3, name=fa3_backward(128), k_ts=t + 60, k_dur=400)
        b.launch(t + 9, 3, name=fa3_backward(64), k_ts=t + 460, k_dur=300)
        b.launch(t + 12, 3, name=fa3_backward_postprocess(128), k_ts=t + 760, k_dur=100)
        b.launch(t + 15, 3, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL", k_ts=t + 860,
                 k_dur=100)
        b.launch(t + 18, 3, name="void at::native::vectorized_elementwise_kernel<4, "
                 "at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, "
                 "at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
                 k_ts=t + 960, k_dur=30)
    return b
