"""Strategy names, combinations and the default set."""

from __future__ import annotations

import pytest
import torch

from trainprof.bench.strategies import (
    BUILTIN,
    DEFAULT_SET,
    Strategy,
    combine,
    resolve,
    resolve_all,
)
from trainprof.errors import BenchError

from bench_helpers import one_thread  # noqa: F401 (an autouse fixture)


def test_default_set_covers_every_builtin_family():
    assert DEFAULT_SET == ("fp32", "bf16", "fp16", "accum4", "compile", "compile-reduce-overhead",
                           "channels-last", "foreach", "fused", "workers", "pinned")
    assert resolve_all(None)[0].name == "fp32"
    assert all(s.description for s in map(resolve, DEFAULT_SET))


def test_names_with_numbers():
    assert resolve("accum8").accumulation == 8
    assert resolve("workers3").num_workers == 3
    assert resolve("batch4x").batch_scale == 4
    assert resolve("for-loop").optimizer_impl == "for-loop"


def test_combined_names_carry_both_changes():
    both = resolve("bf16+compile+channels-last")
    assert both.name == "bf16+compile+channels-last"
    assert (both.autocast, both.compile_mode, both.channels_last) == (torch.bfloat16, "default", True)
    assert (BUILTIN["fused"] + BUILTIN["accum4"]).optimizer_impl == "fused"


def test_conflicting_combination_is_refused():
    with pytest.raises(BenchError, match="both set optimizer_impl"):
        combine(BUILTIN["fused"], BUILTIN["foreach"])


@pytest.mark.parametrize("spec", ["nope", "accum0", "bf16+nope", "batchx"])
def test_unknown_names_list_the_known_ones(spec):
    with pytest.raises(BenchError, match="unknown strategy .*known: fp32"):
        resolve(spec)


def test_duplicates_and_empty_lists_are_refused():
    with pytest.raises(BenchError, match="unique"):
        resolve_all(["fp32", "bf16", "fp32"])
    with pytest.raises(BenchError, match="no strategy"):
        resolve_all([])


def test_bad_fields_are_refused():
    with pytest.raises(BenchError, match="optimizer_impl"):
        Strategy("x", optimizer_impl="turbo")
    with pytest.raises(BenchError, match="accumulation"):
        Strategy("x", accumulation=0)
