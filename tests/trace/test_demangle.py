"""Mangled kernel symbols (ROCm traces) read as their qualified names, checked against
binutils' c++filt where it is installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from trainprof.report.names import short_name as short_kernel_name
from trainprof.trace.demangle import readable_name

CASES = {
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_":
        "at::native::vectorized_elementwise_kernel<…>",
    "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIfffEEjfLi4EEEEEvT1_":
        "at::native::reduce_kernel<…>",
    "_ZN12_GLOBAL__N_116softmax_warp_fwdIfffLi10ELb0EEEvPT0_PKT_iii":
        "(anonymous namespace)::softmax_warp_fwd<…>",
    "_Z10add_kernelPfS_": "add_kernel",
    # A lambda in the template arguments: the kernel's own name is what is kept.
    "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIZZZNS0_23direct_"
    "copy_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE1_clEvENKUlvE8_clEvEUlN3c104HalfEE_EEvS4_"
    "RKT_EUliE_EEviT1_": "at::native::elementwise_kernel<…>",
}


@pytest.mark.parametrize(("mangled", "readable"), CASES.items())
def test_mangled_names_read_as_qualified_names(mangled, readable):
    assert readable_name(mangled) == readable
    assert len(short_kernel_name(mangled)) < 60


@pytest.mark.parametrize("mangled", list(CASES))
def test_the_qualified_name_is_c_plus_plus_filt_s(mangled):
    if shutil.which("c++filt") is None:
        pytest.skip("binutils' c++filt is not installed")
    full = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
    head = readable_name(mangled).removesuffix("<…>")
    assert full.removeprefix("void ").startswith(head)


@pytest.mark.parametrize("name", ["Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1",
                                  "void foo<int>(int)", "_Zgarbage", "_ZN3abc", "ncclDevKernel_AllReduce"])
def test_other_names_are_left_as_they_are(name):
    assert readable_name(name) == name
