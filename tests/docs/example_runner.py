"""Runs the Python examples of the docs for tests/docs/test_examples.py, in this one process.

``python example_runner.py SPEC OUT``: SPEC is a JSON list of {"folder", "blocks": [{"id",
"code"}]}, one entry per Markdown file. Each file's blocks run in order in one fresh namespace
(as a reader following the page runs them), in the file's own folder, after READERS_OWN: the
objects a reader's script already has. OUT receives {id: null, or the traceback or trainprof's own warnings}.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback
import warnings

#: What the examples call "your" model, data and optimizer: a reader's training script has
#: them. Tiny, so that every example that trains takes milliseconds.
READERS_OWN = """
import torch
from torch import nn


class MyDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 96  # 12 batches: enough steps for profile()'s default schedule (9)

    def __getitem__(self, i):
        return torch.randn(8, generator=torch.Generator().manual_seed(i)), i % 4


class MyModel(nn.Sequential):
    def __init__(self):
        super().__init__(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def make_model():
    return MyModel()


def make_batch():
    return torch.randn(8, 8), torch.randint(0, 4, (8,))


model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(MyDataset(), batch_size=8)
"""


def run_file(folder: str, blocks: list[dict[str, str]]) -> dict[str, str | None]:
    os.chdir(folder)
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(READERS_OWN, "<the reader's own objects>", "exec"), namespace)
    out: dict[str, str | None] = {}
    for block in blocks:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            with warnings.catch_warnings(record=True) as caught, \
                    contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("always")
                exec(compile(block["code"], block["id"], "exec"), namespace)
            own = [f"{w.category.__name__}: {w.message}" for w in caught
                   if w.category.__module__.startswith("trainprof")]
            out[block["id"]] = "trainprof warned:\n" + "\n".join(own) if own else None
        except BaseException:  # noqa: BLE001 (each block's failure is reported, whatever it is)
            out[block["id"]] = traceback.format_exc(limit=-8)
        print(f"{block['id']}: {time.perf_counter() - start:.2f} s, {time.process_time() - cpu:.2f} s CPU", file=sys.stderr)
    return out


def main() -> None:
    with open(sys.argv[1]) as spec:
        files = json.load(spec)
    results: dict[str, str | None] = {}
    for entry in files:
        results.update(run_file(entry["folder"], entry["blocks"]))
    with open(sys.argv[2], "w") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
