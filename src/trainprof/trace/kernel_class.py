"""What a device kernel does: communication, compute on Tensor Cores, or other compute.

Decided once, here, from everything the trace says: the kernel's name first, and for a name of
no known family, the host op or Python frame that launched it (a kernel launched under
``nccl:all_reduce``, ``record_param_comms`` or a ``dispatch``/``combine`` function is
communication). A name of no known family that nothing else explains stays compute and is
reported as *unclassified* with its time, so that a reader sees what was guessed. On AMD GPUs
the Tensor Core class is the matrix cores (MFMA): ROCm's attention, MIOpen's XDLOPS and
Tensile's MFMA kernels, as MI300 traces name them (a code object's ``.kd`` symbol suffix, as in
``attn_fwd.kd``, is left out before matching). See docs/kernel_classes.md.
"""

from __future__ import annotations

import functools
import re
from enum import IntEnum

import msgspec
import numpy as np

from trainprof.lazy import LazyPattern


class KernelClass(IntEnum):
    """What a kernel's time is spent on."""

    COMPUTE = 0
    TENSOR_CORE = 1
    COMMUNICATION = 2


class CaselessPattern:
    """A regular expression searched without regard to case, fast on ASCII text: there the
    text is lower-cased once and searched by a case-sensitive copy of the pattern (several
    times faster than ``re.IGNORECASE`` on long alternations such as ``_TENSOR_CORE``); other
    text is searched with ``re.IGNORECASE``, whose Unicode case folding may differ from
    ``str.lower``. The pattern's letters must be lower case (escapes such as ``\\W`` aside)."""

    def __init__(self, pattern: str) -> None:
        if re.search(r"(?<!\\)[A-Z]", pattern):
            raise ValueError(f"an upper-case letter in a caseless pattern: {pattern!r}")
        self.pattern = pattern
        self._ascii = LazyPattern(pattern)  # compiled on first use: import stays cheap
        self._any = LazyPattern(pattern, re.IGNORECASE)  # rarely needed

    def search(self, text: str) -> re.Match[str] | None:
        """The first match in ``text`` (in its lower-cased copy where it is ASCII), or None."""
        if text.isascii():
            return self._ascii.search(text.lower())
        return self._any.search(text)


#: JSON and table labels of the classes, in KernelClass order.
CLASS_LABELS = ("compute", "tensor_core", "communication")

# Communication kernels: NCCL (ncclKernel_*, ncclDevKernel_*), RCCL, NCCLX, MSCCL/MSCCL++,
# NVSHMEM, expert-parallel dispatch/combine/notify kernels (DeepEP's deep_ep::intranode::,
# internode::, internode_ll::; pplx's a2a_*), custom all-reduce kernels (vLLM's
# cross_device_reduce, TensorRT-LLM's oneShot/twoShot/lamport all-reduce), TransformerEngine's
# userbuffers, torch symmetric memory (c10d::symmetric_memory::, multimem_*), and any kernel
# named after a collective (all_reduce, all_gather, reduce_scatter, all_to_all).
_COMMUNICATION = CaselessPattern(
    r"^(?:void )?(?:nccl|rccl)|msccl|nvshmem|(?:^|\W)(?:deep_ep|ep|intranode|internode|"
    r"internode_ll)::\w*(?:dispatch|combine|notify)|(?:^|\W)(?:intranode|internode|internode_ll)::"
    r"|notify_(?:dispatch|combine)|a2a_(?:dispatch|combine)|cross_device_reduce|lamport"
    r"|userbuffers|symmetric_memory|symm_mem|multimem_"
    r"|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",
)

# Tensor Core kernels: everything that issues MMA instructions. NVIDIA PyProf's list (h884,
# s1688, hmma ...), CUTLASS 2 (tensorop, OpClassTensorOp), CUTLASS 3/CuTe (sm90_/sm100_ kernels,
# GemmUniversal/CollectiveMma templates, wgmma/gmma, TMA warp-specialised), cuBLAS(Lt) on Hopper
# (nvjet, xmma), FP8 GEMMs (_scaled_mm, GEMMs named e4m3/e5m2/fp8), FlashAttention 1/2/3
# (flash_fwd/flash_bwd, FlashAttnFwd/Bwd, compute_attn, fmha), cuDNN's fused attention and MMA
# engines, Triton kernels built on tl.dot (Inductor's mm/bmm templates, names with mm/dot/mma,
# the tutorial names matmul_kernel and _attn_fwd/_attn_bwd that many projects keep),
# AMD Tensile/hipBLASLt (Cijk_*MFMA*, _MI16x16x...), Composable Kernel (ck::, ck_tile::, xdl);
# the AMD families of _ROCM_MATRIX_CORES below are searched too.
_TENSOR_CORE = CaselessPattern(
    r"h884|s884|h1688|s1688|c1688|i8816|16816|16832|s161616|hmma|imma|bmma|dmma|qmma|tensorop"
    r"|opclasstensorop|wgmma|gmma|tcgen05|nvjet|xmma|sm(?:75|80|86|89|90a?|100a?|120)_"
    r"(?:gemm|xmma|fmha|fprop|dgrad|wgrad)|cutlass3x|cutlass::gemm::kernel::gemmuniversal"
    r"|collectivemma|tmawarpspecialized|_scaled_mm|scaled_mm|(?:e4m3|e5m2|fp8).*(?<!fb)gemm"
    r"|(?<!fb)gemm.*(?:e4m3|e5m2|fp8)"
    r"|cutlass.*(?:bf16|f16|tf32|fp8)|dgrad_1x1_stride_2x2|first_layer_wgrad_kernel|conv1x1"
    r"|conv2d_c1_k1|direct_group|flash_fwd|flash_bwd|flash::|flash_attn|flashattn|compute_attn"
    r"|fmha|sdpa|_mma_|mma_sync|triton_tem_|triton_(?:mm|bmm)|triton\w*_(?:mm|bmm|dot|mma)(?:_|$)"
    r"|ampere_.*gemm.*(?:bf16|fp16|h16)|cijk_.*mfma|cijk_.*_mi\d+x\d+|(?:^|\W)ck::|ck_tile::"
    r"|_xdl|xdlops|wmma|matmul_kernel|_attn_(?:fwd|bwd)",
)
# AMD kernels on the matrix cores (MFMA), as MI200/MI300 traces name them: Triton/CK flash
# attention (``attn_fwd``, ``attn_bwd``: the Triton kernels of ROCm's SDPA and flash_attn,
# without the tutorial's underscore), MIOpen's implicit-GEMM XDLOPS convolutions
# (``igemm_fwd_gtcx3_nhwc_bf16_..._wt32x32x8_...``: gtcx/gtcx2/gtcx3 are the XDLOPS
# generations, ``wt`` the wave tile of MFMA instructions), and Tensile/hipBLASLt ``Cijk_`` GEMMs
# whose ``MI32x32x8`` tile names the MFMA instruction (also in _TENSOR_CORE).
_ROCM_MATRIX_CORES = CaselessPattern(
    r"(?:^|_)attn_(?:fwd|bwd)|igemm_\w*gtcx|igemm_\w*_wt\d+x\d+x\d+|cijk_\w*_mi\d+x\d+x\d+")
# AMD kernels of no MMA whose names would match a family above or of no family: MIOpen's
# OpenCL/assembly kernels (``MIOpenBatchNormFwdTrainSpatial``, ``MIOpenConv1x1``,
# ``miopenSp3AsmConv_...`` Winograd), its tensor ops (``SubTensorOpWithCastTensor1d`` is an
# elementwise cast although its name holds "TensorOp"; ``Op2dTensorGeneric``), its naive
# convolutions (``naive_conv_ab_nonpacked_fwd_nchw_half_double_half``), non-XDLOPS implicit
# GEMMs (``igemm_v4r1_dynamic``), and Tensile GEMMs without an MFMA tile (vector ALU).
_ROCM_VECTOR = CaselessPattern(
    r"^miopen|subtensorop|^op\dd?tensor|optensor|naive_conv_|igemm_|^cijk_")
#: Names that say the kernel runs on the CUDA cores although a family above matches: cuBLAS's
#: FP32 ``sm80_xmma_gemm_f32f32_..._ffma_...`` (TF32 off), CUTLASS ``simt`` and ``sgemm``, and
#: PyTorch's own elementwise/reduction kernels (whose template arguments can name anything).
_CUDA_CORES = CaselessPattern(
    r"ffma|simt|sgemm|opclasssimt|^(?:void )?at::native::|^miopen|subtensorop")

# Compute kernels of known families (no MMA): PyTorch's own kernels, cub, cuDNN's non-MMA engines
# (batch norm, Winograd, FFT, layout changes), SIMT GEMMs and GEMVs, Triton pointwise/reduction
# kernels, FBGEMM, optimizer and copy kernels, and the common names of elementwise work.
_KNOWN_COMPUTE = CaselessPattern(
    r"at::native::|at_cuda_detail::|(?:^|\W)cub::|cudnn|cask_|sgemm|gemv|gemmk1|splitkreduce"
    r"|winograd|fft|triton|fbgemm|split_embedding|elementwise|reduce|softmax|norm|copy"
    r"|nchwtonhwc|nhwctonchw|im2col|col2im|convolve|conv|pool|scatter|gather|index|sort|scan"
    r"|dropout|embedding|permute|transpose|fill|cast|multi_tensor_apply|adam|sgd|epilogue"
    r"|bounds_check|magma|compute_cuda_kernel|cunn_|upsample|interpolate|random|philox|topk"
    r"|memset|memcpy|kernelinit|cumsum|loss|activation|gelu|relu|silu|rope|rotary"
    r"|wgrad_alg|dgrad_alg|_engine|cgemm|zgemm|dgemm|gemmsn|quantize",
)

# Launch context: host ranges and Python functions whose kernels are communication when their
# names say nothing (a collective op's own kernels, DeepEP's Buffer.dispatch/combine).
_COMM_FRAME = CaselessPattern(r"\):\s*(?:\w+\.)*\w*(?:dispatch|combine)\w*\s*$")


# Persistent kernels size their grid to the SMs they may use (one block per free SM, looping over
# tiles): CUTLASS 3 warp-specialised cooperative/ping-pong schedules, stream-K, and kernels that
# say "persistent" (Triton's persistent matmul, FlashAttention 3's tile scheduler).
_PERSISTENT = CaselessPattern(
    r"persistent|warpspecializedcooperative|warpspecializedpingpong|stream_?k")


#: Fused attention, by kernel or op name (FlashAttention, memory-efficient and cuDNN attention,
#: SDPA): what attention_not_fused looks for.
FUSED_ATTENTION = CaselessPattern(
    r"flash|fmha|efficient_attention|scaled_dot_product|_cudnn_attention|sdpa|attention_fwd"
    r"|attn_fwd|mem_eff")


#: The suffix of an AMD code object's kernel symbol (``attn_fwd.kd``, ``Cijk_..._WGM8.kd``: the
#: kernel descriptor launched by ``hipExtModuleLaunchKernel``), left out before matching.
CODE_OBJECT_SUFFIX = ".kd"

#: Only this many leading characters of a name are matched: real kernel names (C++ templates)
#: stay far below it, and a damaged multi-megabyte name must not take seconds per pattern.
NAME_LIMIT = 16_384


def _base_name(name: str) -> str:
    """The name as matched: its first NAME_LIMIT characters, without a ``.kd`` suffix."""
    name = name[:NAME_LIMIT]
    return name[:-len(CODE_OBJECT_SUFFIX)] if name.endswith(CODE_OBJECT_SUFFIX) else name


def is_persistent_kernel(name: str) -> bool:
    """Whether a kernel name says its grid is sized to the SMs free to it (a persistent kernel)."""
    return bool(_PERSISTENT.search(name[:NAME_LIMIT]))


def uses_tensor_cores(name: str) -> bool:
    """Whether a kernel name says it issues Tensor Core (MMA) instructions; on AMD, matrix
    core (MFMA) instructions."""
    name = _base_name(name)
    if _ROCM_MATRIX_CORES.search(name):
        return True
    return bool(_TENSOR_CORE.search(name)) and not _CUDA_CORES.search(name)


@functools.lru_cache(maxsize=1 << 16)
def is_communication_kernel(name: str) -> bool:
    """Whether a kernel name is that of a communication kernel (cached: a load asks it of each
    kernel name twice, as the names are classified and in ``name_class``)."""
    return bool(_COMMUNICATION.search(_base_name(name)))


@functools.lru_cache(maxsize=1 << 16)
def name_class(name: str) -> tuple[KernelClass, bool]:
    """The class a kernel name says, and whether the name is of a known family."""
    if is_communication_kernel(name):
        return KernelClass.COMMUNICATION, True
    if uses_tensor_cores(name):
        return KernelClass.TENSOR_CORE, True
    name = _base_name(name)
    return KernelClass.COMPUTE, bool(_KNOWN_COMPUTE.search(name) or _ROCM_VECTOR.search(name))


def is_communication_frame(name: str) -> bool:
    """Whether a Python frame (``path/file.py(12): dispatch``) is an expert-parallel exchange."""
    return bool(_COMM_FRAME.search(name[-NAME_LIMIT:]))


class KernelClasses(msgspec.Struct):
    """Per event: its kernel class and how it was decided (only kernels are meaningful)."""

    cls: np.ndarray  # uint8, a KernelClass
    by_name: np.ndarray  # bool: the name is of a known family
    by_launch: np.ndarray  # bool: communication because of the op or frame that launched it

    @property
    def unclassified(self) -> np.ndarray:
        """Kernels whose class is a guess: an unknown name and no telling launch context."""
        return ~self.by_name & ~self.by_launch


def classes_of_names(names: list[str], used: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per name index: (class, known family), computed for the indices in ``used`` only."""
    cls = np.zeros(len(names), dtype=np.uint8)
    known = np.zeros(len(names), dtype=bool)
    for i in used.tolist():
        cls[i], known[i] = name_class(names[i])
    return cls, known
