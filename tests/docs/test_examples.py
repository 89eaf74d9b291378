"""Every ```python block of README.md and docs/*.md runs, so that no example can rot.

A block is skipped only when the line just above its fence says why, as an HTML comment
(invisible once rendered)::

    <!-- example: needs-gpu -->      a CUDA device
    <!-- example: needs-server -->   a running server or cluster (Dask scheduler, SLURM...)

Any other ``<!-- example: ... -->`` fails the test. The blocks of one file run in order in one
namespace (as a reader following the page would run them), in a folder of their own that holds
what the examples name: ``traces/`` (two ranks of one real job) and ``trace.json.gz`` (a real
ResNet-50 training trace with call stacks), and with the names a reader's script already has:
``model``, ``optimizer``, ``loader``, ``make_model``, ``make_batch``, ``MyModel``, ``MyDataset``
(a tiny model and data set: tests/docs/example_runner.py, READERS_OWN). Every file runs in one
subprocess, once for the whole module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.paths import RESNET_W0, ROOT, TRACE_FILTER

RUNNER = Path(__file__).with_name("example_runner.py")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The reasons a block may be skipped for, in its marker comment.
SKIP_REASONS = {
    "needs-gpu": "needs a CUDA device",
    "needs-server": "needs a running server or cluster",
}
#: Set for the examples: no tracker reaches the network, ``torch.compile`` runs the model as is
#: (the example's code path is the same; compiling with inductor takes a minute on a CPU), and
#: the tiny model's ops take one thread each.
EXAMPLE_ENV = {"WANDB_MODE": "disabled", "TORCH_COMPILE_DISABLE": "1", "OMP_NUM_THREADS": "1"}
MARKER = re.compile(r"<!--\s*example:\s*(\S+)\s*-->")
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Example:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    marker: str | None  # the marker comment on the line above, if any

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def examples_of(path: Path) -> list[Example]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        above = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(above)
        found.append(Example(path, line, match.group(1), marker.group(1) if marker else None))
    return found


EXAMPLES = [example for path in DOCS for example in examples_of(path)]


def test_every_python_block_is_found():
    """The parser sees as many blocks as there are ```python fences, and knows every marker."""
    fences = sum(len(re.findall(r"^```python", p.read_text(encoding="utf-8"), re.M))
                 for p in DOCS)
    assert len(EXAMPLES) == fences > 10
    unknown = [e.id for e in EXAMPLES if e.marker is not None and e.marker not in SKIP_REASONS]
    assert not unknown, f"unknown example markers (known: {sorted(SKIP_REASONS)}): {unknown}"


def example_folder(base: Path) -> Path:
    """A folder holding the files the examples name."""
    base.mkdir()
    (base / "traces").mkdir()
    for rank in sorted(TRACE_FILTER.glob("*.json.gz")):
        (base / "traces" / rank.name).symlink_to(rank)
    (base / "trace.json.gz").symlink_to(RESNET_W0)
    return base


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, str | None]:
    """Each runnable example's traceback (None when it ran), all run in one subprocess."""
    tmp = tmp_path_factory.mktemp("examples")
    spec = []
    for n, path in enumerate(DOCS):
        blocks = [{"id": e.id, "code": e.code} for e in EXAMPLES
                  if e.path == path and e.marker is None]
        if blocks:
            spec.append({"folder": str(example_folder(tmp / f"{n}-{path.stem}")),
                         "blocks": blocks})
    (tmp / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path]),
           **EXAMPLE_ENV, "HOME": str(tmp)}  # what trackers and caches write stays in tmp
    subprocess.run([sys.executable, str(RUNNER), str(tmp / "spec.json"), str(tmp / "out.json")],
                   env=env, check=True, timeout=300, cwd=tmp)
    return json.loads((tmp / "out.json").read_text())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_example_runs(example, outcomes):
    if example.marker is not None:
        pytest.skip(f"marked: {SKIP_REASONS.get(example.marker, example.marker)}")
    error = outcomes[example.id]
    assert error is None, f"{example.id} fails:\n{error}"
