"""What a block holds (parameters, gradients, optimizer state, activations), estimated from the
stack that allocated it: the files and functions of its frames, Python and C++.

An estimate, by these rules, the first that matches (docs/memory_snapshots.md, "Holders"):

* `optimizer_state`: a frame in `torch/optim/`, a function `_init_group`, or a `step` in a file
  whose name says optim (`optimizers.py`): Adam's `exp_avg` made by `zeros_like` in a step;
* `gradients`: the autograd engine (`torch::autograd::Engine`, `AccumulateGrad`, the generated
  `*Backward` nodes in C++ frames; `Tensor.backward`, `torch.autograd.backward`/`grad`,
  `_engine_run_backward` in Python): the `.grad` tensors and the backward pass's temporaries;
* `parameters`: `Module.to`/`_apply`/`cuda`, `load_state_dict`, `torch/nn/init.py`,
  `reset_parameters`, or a Python `__init__` (a model that makes its weights on the device);
* `activations`: a `forward`, `torch/nn/modules/` or `torch/nn/functional.py`: a forward pass's
  outputs, kept for backward or not yet freed;
* `other`: a Python stack that matches none (data moved to the device, a loss outside a module);
  `unknown`: no stack, or C++ frames that say nothing of the above.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from trainprof.analysis.snapshot.frames import is_python_frame, where
from trainprof.analysis.snapshot.sites import Site, top_sites

HOLDERS = ("parameters", "gradients", "optimizer_state", "activations", "other", "unknown")
_OPTIMIZER_FILE = re.compile(r"/torch/optim/")
_OPTIMIZER_STEP_FILE = re.compile(r"optim[^/]*\.py$", re.IGNORECASE)
_AUTOGRAD_CPP = re.compile(r"torch::autograd::(?:Engine|generated::|AccumulateGrad)|AccumulateGrad")
#: Python frames of a backward pass: `loss.backward()`, `torch.autograd.backward/grad` and the
#: engine's entry (not all of torch/autograd/: a custom Function's `apply` runs in forward).
_BACKWARD_FRAMES = {("/torch/_tensor.py", "backward"), ("/torch/autograd/__init__.py", "backward"),
                    ("/torch/autograd/__init__.py", "grad"),
                    ("/torch/autograd/graph.py", "_engine_run_backward")}
_MODULE_FILE = re.compile(r"/torch/nn/modules/module\.py$")
_MODULE_SETUP = {"to", "_apply", "cuda", "load_state_dict", "_load_from_state_dict", "to_empty"}
_INIT_FILE = re.compile(r"/torch/nn/(?:init|parameter)\.py$")
_FORWARD_FILE = re.compile(r"/torch/nn/(?:modules/|functional\.py$)")


def _is_optimizer(file: str, function: str) -> bool:
    return bool(_OPTIMIZER_FILE.search(file) or function == "_init_group"
                or (function == "step" and _OPTIMIZER_STEP_FILE.search(file)))


def _is_gradient(file: str, function: str, python: bool) -> bool:
    if not python:
        return bool(_AUTOGRAD_CPP.search(function))
    return any(file.endswith(tail) and function == name for tail, name in _BACKWARD_FRAMES)


def _is_parameter(file: str, function: str) -> bool:
    return bool((_MODULE_FILE.search(file) and function in _MODULE_SETUP)
                or _INIT_FILE.search(file) or function in ("reset_parameters", "__init__"))


def _is_activation(file: str, function: str) -> bool:
    return function == "forward" or bool(_FORWARD_FILE.search(file))


#: Per frame, which rules it matches: (optimizer, gradient, parameter, activation, Python).
Flags = tuple[bool, bool, bool, bool, bool]


@lru_cache(maxsize=65536)
def _flags(file: str, function: str, python: bool) -> Flags:
    path = "/" + file.replace("\\", "/")
    if not python:
        return (False, _is_gradient(path, function, False), False, False, False)
    return (_is_optimizer(path, function), _is_gradient(path, function, True),
            _is_parameter(path, function), _is_activation(path, function), True)


def holder_of(frames: Any, seen: dict[int, Flags] | None = None) -> str:
    """The holder a stack points to, by the rules above (one of `HOLDERS`). `seen` caches each
    frame object's flags (frames are shared between a snapshot's stacks)."""
    if not isinstance(frames, list) or not frames:
        return "unknown"
    cache = {} if seen is None else seen
    flags = []
    for frame in frames:
        found = cache.get(id(frame))
        if found is None:
            w = where(frame)
            found = cache[id(frame)] = _flags(w.file, w.function, is_python_frame(frame))
        flags.append(found)
    for rule, holder in enumerate(("optimizer_state", "gradients", "parameters", "activations")):
        if any(f[rule] for f in flags):
            return holder
    return "other" if any(f[4] for f in flags) else "unknown"


#: Sites kept per holder.
HOLDER_SITES = 3


def grouped(items: list[tuple[int, Any]]) -> dict[str, list[tuple[int, Any]]]:
    """(bytes, frames) pairs per holder, every holder listed."""
    out: dict[str, list[tuple[int, Any]]] = {h: [] for h in HOLDERS}
    named: dict[int, str] = {}  # stacks are shared objects in a snapshot: judge each once
    seen: dict[int, Flags] = {}  # and so are frames, between stacks
    for nbytes, frames in items:
        holder = named.get(id(frames)) if isinstance(frames, list) else None
        if holder is None:
            holder = holder_of(frames, seen)
            if isinstance(frames, list):
                named[id(frames)] = holder
        out[holder].append((nbytes, frames))
    return out


def by_holder(items: list[tuple[int, Any]]) -> tuple[dict[str, int], dict[str, list[Site]]]:
    """Bytes per holder (every holder listed, 0 when none), and each holder's top sites."""
    groups = grouped(items)
    return ({h: sum(n for n, _ in g) for h, g in groups.items()},
            {h: top_sites(g, HOLDER_SITES) for h, g in groups.items() if g})
