"""NVTX ranges of an Nsight Systems export as host ops, annotations and steps.

torch's ``emit_nvtx`` names each op's range ``<op>[, seq = N][, op_id = N][, sizes = [[...]]]
[, input_op_ids = [...]]`` (torch/csrc/profiler/stubs/cuda.cpp, ``getNvtxStr``): such a range is
a CPU op named ``<op>`` with its input shapes (Kineto's "Input Dims"), except torch's own
``record_function`` scopes that Kineto writes as user annotations (``FSDP::*``, ``## ... ##``,
``Optimizer.step#...``). Every other range is a user annotation. Ranges that mark training steps
(``ProfilerStep#N``, ``step N``, ``iteration N``, ``train_step``, or a ``step_marker`` pattern)
become the model's steps, named ``ProfilerStep#N`` as trace/model.py reads them.
"""

from __future__ import annotations

import re

import numpy as np

from trainprof.trace import model
from trainprof.trace.model import Kind
from trainprof.trace.nsys.schema import Export
from trainprof.trace.nsys.tables import NVTX_RANGE_TYPES, Catalog, Rows, _host_lane, _process, _rows

_TORCH_RANGE = re.compile(
    r"^(?P<name>.+?)(?P<seq>, seq = -?\d+)?(?P<op>, op_id = \d+)?"
    r"(?:, sizes = (?P<sizes>\[(?:\[[-\d, ]*\](?:, )?)*\]))?(?:, input_op_ids = \[.*\])?$"
)
#: torch ``record_function`` scopes that Kineto records as user annotations, not CPU ops.
_TORCH_ANNOTATION = re.compile(r"^FSDP::|^## .* ##$|^Optimizer\.|^ProfilerStep#")
#: NVTX ranges that mark a numbered training step.
STEP_MARKER = re.compile(r"^(?:ProfilerStep#|step[ _#:]?|iteration[ _#:]?|iter[ _#:]?)(\d{1,18})$",
                         re.IGNORECASE)
#: NVTX ranges that mark a step without a number (numbered in time order, from 1).
UNNUMBERED_STEP = re.compile(r"^(?:train_step|training_step|train step)$", re.IGNORECASE)


def nvtx_ranges(db: Export, cat: Catalog, step_marker: re.Pattern[str] | None = None
                ) -> tuple[Rows | None, list[str]]:
    """The NVTX push/pop and start/end ranges, and notes on how steps were named."""
    table = "NVTX_EVENTS"
    cols = db.columns(table)
    if not {"start", "end"} <= cols:
        return None, []
    texts = _texts(db, cols)
    kinds = set(db.enum("ENUM_NSYS_EVENT_TYPE", NVTX_RANGE_TYPES).items())
    range_types = [i for i, n in kinds if n in NVTX_RANGE_TYPES.values()] or list(NVTX_RANGE_TYPES)
    where = '"end" IS NOT NULL AND "end" >= start'
    if "eventType" in cols:
        where += f" AND eventType IN ({', '.join(map(str, range_types))})"
    gtid = db.pick(table, "globalTid", default="0")
    rows = [r for piece in db.query(f'SELECT start, "end", {gtid}, {texts} FROM NVTX_EVENTS '
                                    f"WHERE {where}") for r in piece]
    if not rows:
        return None, []
    m = np.array([r[:3] for r in rows], dtype=np.int64)
    process = _process(m[:, 2])
    names, shapes, kinds_of = _classified(cat, [r[3] or "" for r in rows], m[:, 0], process,
                                          step_marker)
    out = _rows(len(m), start=m[:, 0], end=m[:, 1], process=process, lane=_host_lane(m[:, 2]),
                kind=kinds_of, name=names, shape=shapes)
    return out, _step_notes(cat, out)


def _texts(db: Export, cols: set[str]) -> str:
    """SQL for a range's text: ``text``, else ``textId`` into ``StringIds``."""
    if "textId" in cols and db.has("StringIds"):
        inline = '"text"' if "text" in cols else "NULL"
        return (f"COALESCE({inline}, (SELECT value FROM StringIds WHERE id = "
                "NVTX_EVENTS.textId))")
    return '"text"' if "text" in cols else "''"


def _classified(cat: Catalog, texts: list[str], start: np.ndarray, process: np.ndarray,
                step_marker: re.Pattern[str] | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(name index, shape index, kind) of each range; a name's kind is worked out once."""
    n = len(texts)
    names, shapes = np.empty(n, np.int32), np.full(n, -1, np.int32)
    kinds = np.empty(n, np.uint8)
    unnumbered: list[int] = []
    known: dict[tuple[str, bool], tuple[int, int] | None] = {}
    for i, text in enumerate(texts):
        name, sizes, torch_op = _split(text)
        key = (name, torch_op)
        hit = known.get(key, ...)
        if hit is ...:
            hit = known[key] = _described(cat, name, torch_op, step_marker)
        if hit is None:
            unnumbered.append(i)
            continue
        kinds[i], names[i] = hit
        if sizes is not None and hit[0] == Kind.CPU_OP:
            shapes[i] = cat.shape(sizes)
    _number_steps(cat, unnumbered, start, process, names, kinds)
    return names, shapes, kinds


def _split(text: str) -> tuple[str, str | None, bool]:
    """(name, sizes JSON or None, whether torch's emit_nvtx named it) of a range's text."""
    if ", op_id = " not in text and ", seq = " not in text and ", sizes = " not in text:
        return text or "(unnamed)", None, False
    match = _TORCH_RANGE.match(text)
    if match is None:
        return text, None, False
    return match["name"], match["sizes"], True


def _described(cat: Catalog, name: str, torch_op: bool, step_marker: re.Pattern[str] | None
               ) -> tuple[int, int] | None:
    """(kind, name index) of a range name; None for a step marker without a number."""
    category = "cpu_op" if torch_op and not _TORCH_ANNOTATION.match(name) else "user_annotation"
    marker = _step_name(name, step_marker)
    if marker == "":
        return None
    if marker is not None:
        name, category = marker, "user_annotation"
    kind = model.classify(category, name)
    return int(kind), cat.name(kind, name)


def _step_name(name: str, custom: re.Pattern[str] | None) -> str | None:
    """``ProfilerStep#N`` for a step marker, "" for one without a number, else None."""
    for pattern in (custom, STEP_MARKER):
        match = pattern.search(name) if pattern is not None else None
        if match:
            number = next((g for g in match.groups() if g and g.isdigit()), None)
            return f"ProfilerStep#{int(number)}" if number is not None else ""
    return "" if UNNUMBERED_STEP.match(name) else None


def _number_steps(cat: Catalog, idx: list[int], start: np.ndarray, process: np.ndarray,
                  names: np.ndarray, kinds: np.ndarray) -> None:
    """Number unnumbered step markers 1, 2, ... in time order within each process."""
    if not idx:
        return
    chosen = np.asarray(idx)
    order = chosen[np.lexsort((start[chosen], process[chosen]))]
    count: dict[int, int] = {}
    for i in order.tolist():
        count[int(process[i])] = number = count.get(int(process[i]), 0) + 1
        kinds[i] = Kind.STEP
        names[i] = cat.name(Kind.STEP, f"ProfilerStep#{number}")


def _step_notes(cat: Catalog, rows: Rows) -> list[str]:
    steps = int(np.count_nonzero(rows.kind == Kind.STEP))
    if not steps:
        return []
    return [f"{steps} NVTX range(s) read as training steps (ProfilerStep#N, step N, "
            "iteration N, train_step or --step-marker)."]
