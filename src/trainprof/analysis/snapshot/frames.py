"""The frames of a snapshot's stacks: which are Python, which are the user's, and the site.

`_record_memory_history()` at its defaults (`stacks="all"`) records C++ frames with the Python
ones interleaved, innermost first: `torch::unwind::unwind()` (file `??`), `gather_with_cpp()`
(`memory_snapshot.cpp`), the allocator (`CUDACachingAllocator.cpp`), `c10::`/`at::` dispatch
(`RegisterCUDA.cpp`), the binding (`python_torch_functions_0.cpp`), then CPython's
`_PyEval_EvalFrameDefault` with the Python frame it ran just before it (torch's
`profiler/combined_traceback.cpp` puts each Python frame in front of its interpreter frame), and
at the bottom `Py_BytesMain`, `__libc_start_main`, `_start`. With `stacks="python"` only the
Python frames are there. Either way a site is a Python frame: C++, interpreter and `??` frames
are never one.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, NamedTuple

from trainprof.trace.model import trainprof_frame

NO_STACK = "(no stack recorded)"
#: A stack with frames but no Python frame at all: the autograd engine's device threads, where
#: gradients and backward temporaries are allocated, record C++ frames only.
NO_PYTHON = "(no Python frame: allocated from C++, e.g. the autograd engine's thread)"
#: Python source files, and the interpreter's pseudo-files (`<stdin>`, `<string>`,
#: `<ipython-input-3-...>`, `<frozen runpy>`, FX's `<eval_with_key>.3`); the unwinder's
#: `<unwind unsupported>` is not one. C++ frames name `??`, a `.cpp`/`.h`/`.c` file, a header
#: without extension (`/usr/include/c++/11/functional`) or a shared library.
_PYTHON_FILE = re.compile(r"\.pyw?$|^<(?!unwind unsupported>)[^>]*>(?:\.\d+)?$")
#: Python code of PyTorch (its compilers and the code Inductor writes); trainprof's own modules
#: are `trace.model.trainprof_frame`.
_FRAMEWORK = re.compile(r"/(?:torch|functorch|triton)/|/torchinductor_|^/<(?:frozen|eval_with_key)")
_PROFILE_FRAME = re.compile(r"^(.+)\((\d+)\): (.+)$")


class Where(NamedTuple):
    """A frame's file, line and function."""

    file: str
    line: int
    function: str


def where(frame: Any) -> Where:
    """(file, line, function). Snapshots that torch converts from a profile
    (`_memory_viz._profile_to_snapshot`) name no file (`none`) and put `path(line): function`
    in the name; their other frames (`<built-in ...>`, `nn.Module: Linear_0`) have no file."""
    if not isinstance(frame, dict):
        return Where("", 0, str(frame))
    filename, name = str(frame.get("filename", "") or ""), str(frame.get("name", "?"))
    line = frame.get("line", 0)
    line = line if isinstance(line, int) else 0
    if filename in ("", "none"):
        match = _PROFILE_FRAME.match(name)
        return Where(match[1], int(match[2]), match[3]) if match else Where("", line, name)
    return Where(filename, line, name)


def frame_text(frame: Any) -> str:
    """`file:line in name`, from a frame dict; a frame of another shape as its text."""
    if not isinstance(frame, dict):
        return str(frame)
    w = where(frame)
    return f"{w.file}:{w.line} in {w.function}" if w.file else w.function


def _path(file: str) -> str:
    return "/" + file.replace("\\", "/")  # relative (torch/nn/...) and Windows paths too


@lru_cache(maxsize=65536)
def _python_file(file: str) -> bool:
    return bool(_PYTHON_FILE.search(file))


@lru_cache(maxsize=65536)
def _framework_file(file: str) -> bool:
    path = _path(file)
    return bool(_FRAMEWORK.search(path) or trainprof_frame().search(path))


def is_python_frame(frame: Any) -> bool:
    """A frame of Python code (a `.py` file), not C++, CPython's C or an unknown `??`."""
    return _python_file(where(frame).file)


def is_framework_frame(frame: Any) -> bool:
    """PyTorch's or trainprof's Python code, or not a Python frame at all: never a site."""
    file = where(frame).file
    return not _python_file(file) or _framework_file(file)


class SiteKey(NamedTuple):
    """What allocation sites are grouped by: the frame's file, line and function (or a label
    for stacks without a user frame, `file` empty)."""

    file: str
    line: int
    function: str

    @property
    def text(self) -> str:
        return f"{self.file}:{self.line} in {self.function}" if self.file else self.function


#: A frame judged once: where it is, whether it is Python, whether it is PyTorch's or trainprof's.
Judged = tuple[Where, bool, bool]


def judged(frame: Any, seen: dict[int, Judged] | None = None) -> Judged:
    """(where, Python?, framework?) of a frame; `seen` caches by the frame object, which real
    snapshots share between stacks (torch symbolises each distinct frame once)."""
    key = id(frame)
    if seen is not None and key in seen:
        return seen[key]
    w = where(frame)
    python = _python_file(w.file)
    out = (w, python, not python or _framework_file(w.file))
    if seen is not None:
        seen[key] = out
    return out


def site_key(frames: Any, seen: dict[int, Judged] | None = None) -> SiteKey:
    """The first Python frame outside PyTorch and trainprof; else the first Python frame (all of
    the stack is PyTorch's); `NO_PYTHON` for C++-only stacks, `NO_STACK` without frames.
    `seen`: a cache of judged frames for one snapshot (`judged`)."""
    if not isinstance(frames, list) or not frames:
        return SiteKey("", 0, NO_STACK)
    first = None
    for frame in frames:
        w, python, framework = judged(frame, seen)
        if not python:
            continue
        if not framework:
            return SiteKey(*w)
        first = first or w
    return SiteKey(*first) if first else SiteKey("", 0, NO_PYTHON)
