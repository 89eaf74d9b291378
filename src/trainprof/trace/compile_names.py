"""Which host ranges are compilation (TorchDynamo, AOTAutograd, Inductor, Triton), by name.

PyTorch 2.x records its compiler's phases as CPU ops when a profiler runs: ``dynamo``,
``entire_frame_compile``, ``_compile.compile_inner (dynamo_timed)``, ``entire_backward_compile``,
``create_aot_dispatcher_function``, ``inductor_compile``, ``async_compile.wait`` (Triton/C++
codegen), and marks each compiled frame's first run ``Torch-Compiled Region: F/N``, where ``N``
counts the compilations of frame ``F`` (0 = the first, above 0 = a recompilation). Running a
compiled graph (``CompiledFunction``, ``## Call CompiledFxGraph ... ##``, ``TorchDynamo Cache
Lookup``) is not compilation.
"""

from __future__ import annotations

from trainprof.lazy import LazyPattern

#: Exact names of compiler phases (older and newer PyTorch spellings).
COMPILE_NAMES = frozenset({
    "dynamo", "entire_frame_compile", "entire_backward_compile", "backend_compile",
    "create_aot_dispatcher_function", "aot_collect_metadata", "inductor_compile",
    "compile_fx_inner", "fx_codegen_and_compile", "async_compile.wait", "code_gen",
    "compile_file", "TorchDynamo compile", "Torch-Compile", "triton.compile",
})
#: Name patterns of compiler phases: every ``(dynamo_timed)`` range, compile attempts, Triton's
#: and Inductor's own compile steps.
_COMPILE_PATTERN = LazyPattern(
    r"\(dynamo_timed\)$|^compile_attempt_\d+$|^_compile\.|^compile_fx|^triton[._]compile"
    r"|^inductor_compile|^OutputGraph\.call_user_compiler")
#: The marker of a compiled frame's first run after compiling, with frame and compile counter.
_REGION = LazyPattern(r"^Torch-Compiled Region: (\d+)/(\d+)")
#: A compile range that compiles the backward graph (run lazily in the first backward pass).
BACKWARD_COMPILE_NAMES = frozenset({"entire_backward_compile", "backward._backward_impl "
                                    "(dynamo_timed)"})


def is_compile(name: str) -> bool:
    """Whether a host range with this name is the compiler at work."""
    return name in COMPILE_NAMES or bool(_COMPILE_PATTERN.search(name))


def compiled_region(name: str) -> tuple[int, int] | None:
    """(frame, compile counter) of a ``Torch-Compiled Region: F/N`` marker, else None."""
    m = _REGION.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None
