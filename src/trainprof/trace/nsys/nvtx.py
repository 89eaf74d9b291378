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
from trainprof.trace.nsys.schema import TORCH_FIELDS, Export, Texts
from trainprof.trace.nsys.tables import Catalog, Rows, empty_rows, host_lane, process_of
from trainprof.vocabulary import NVTX_RANK_MARK

#: ``ENUM_NSYS_EVENT_TYPE`` ids of NVTX ranges (push/pop, start/end, and their NVTXT twins).
NVTX_RANGE_TYPES = {59: "NvtxPushPopRange", 60: "NvtxStartEndRange", 70: "NvtxtPushPopRange",
                    71: "NvtxtStartEndRange"}
#: The fields torch's emit_nvtx appends to an op's name, in its order.
_TORCH_FIELDS = tuple(", " + f for f in TORCH_FIELDS)
_TORCH_FIELDS_AFTER_COMMA = TORCH_FIELDS
_SIZES_AFTER_COMMA, _INPUT_OP_IDS = "sizes = ", ", input_op_ids = "
#: torch ``record_function`` scopes that Kineto records as user annotations, not CPU ops.
_TORCH_ANNOTATION = re.compile(r"^FSDP::|^## .* ##$|^Optimizer\.|^ProfilerStep#")
#: NVTX ranges that mark a numbered training step.
STEP_MARKER = re.compile(r"^(?:ProfilerStep#|step[ _#:]?|iteration[ _#:]?|iter[ _#:]?)(\d{1,18})$",
                         re.IGNORECASE)
#: NVTX ranges that mark a step without a number (numbered in time order, from 1).
UNNUMBERED_STEP = re.compile(r"^(?:train_step|training_step|train step)$", re.IGNORECASE)


def nvtx_ranges(db: Export, cat: Catalog, step_marker: re.Pattern[str] | None = None,
                number: bool = True) -> tuple[Rows | None, list[str], dict[int, int]]:
    """The NVTX push/pop and start/end ranges, notes on how steps were named, and the ranks
    the recorder's marks say (``rank_marks``), from one scan of the table. ``number``: number
    the step markers without a number here (else their name stays -1: ``number_steps`` numbers
    them once every piece of the table is read)."""
    table = "NVTX_EVENTS"
    cols = db.columns(table)
    if not {"start", "end"} <= cols:
        return None, [], rank_marks(db)
    kinds = set(db.enum("ENUM_NSYS_EVENT_TYPE", NVTX_RANGE_TYPES).items())
    range_types = [i for i, n in kinds if n in NVTX_RANGE_TYPES.values()] or list(NVTX_RANGE_TYPES)
    event_type = '"eventType"' if "eventType" in cols else str(range_types[0])
    gtid = db.pick(table, "globalTid", default="0")
    # An end before the start (NULL: a mark) is no range.
    m, (key, sized) = db.fetch(f'SELECT start, COALESCE("end", start - 1), {gtid}, '
                               f"COALESCE({event_type}, -1), {_texts(db, cols)} FROM "
                               f"{db.source(table)} ORDER BY rowid", "iiiin")
    marks = _marks(key, m[:, 0], m[:, 2])
    ranges = np.flatnonzero((m[:, 1] >= m[:, 0]) & np.isin(m[:, 3], range_types))
    if not len(ranges):
        return None, [], marks
    m = m[ranges]
    process = process_of(m[:, 2])
    names, shapes, kinds_of = _classified(cat, (key[0][ranges], key[1]), (sized[0][ranges],
                                          sized[1]), step_marker)
    if number:
        number_steps(cat, np.flatnonzero(names < 0).tolist(), m[:, 0], process, names, kinds_of)
    out = empty_rows(len(m), start=m[:, 0], end=m[:, 1], process=process,
                     lane=host_lane(m[:, 2]), kind=kinds_of, name=names, shape=shapes)
    return out, step_notes(int(np.count_nonzero(out.kind == Kind.STEP))), marks


def _marks(key: Texts, start: np.ndarray, gtid: np.ndarray) -> dict[int, int]:
    """``rank_marks`` from the keys of every NVTX event (``nvtx_key``: ``X<text>``), with
    SQL's ``LIKE 'trainprof.rank=%'`` (ASCII case ignored) and its ``ORDER BY start``."""
    codes, keys = key
    prefix = NVTX_RANK_MARK.lower()
    rank_of = {k: int(text[len(prefix) + 1:]) for k, text in enumerate(keys)
               if text[1:len(prefix) + 1].lower() == prefix and text.startswith("X")
               and text[len(prefix) + 1:].isdigit()}
    if not rank_of:
        return {}
    rows = np.flatnonzero(np.isin(codes, list(rank_of)))
    rows = rows[np.argsort(start[rows], kind="stable")]
    return {int(g) >> 24: rank_of[int(c)] for g, c in zip(gtid[rows].tolist(),
                                                          codes[rows].tolist(), strict=True)}


def rank_marks(db: Export) -> dict[int, int]:
    """Process key -> the rank its ``trainprof.rank=N`` NVTX mark says (its last one)."""
    cols = db.columns("NVTX_EVENTS")
    if not cols & {"text", "textId"}:
        return {}
    gtid = db.pick("NVTX_EVENTS", "globalTid", default="0")
    out: dict[int, int] = {}
    sql = (f"SELECT g, t FROM (SELECT start, {gtid} AS g, {_texts(db, cols)} AS t FROM "
           f"NVTX_EVENTS) WHERE t LIKE '{NVTX_RANK_MARK}%' ORDER BY start")
    for piece in db.query(sql):
        for g, text in piece:
            number = str(text)[len(NVTX_RANK_MARK):]
            if number.isdigit():
                out[int(g) >> 24] = int(number)
    return out


def _texts(db: Export, cols: set[str]) -> str:
    """SQL for a range's text: ``text``, else ``textId`` into ``StringIds``."""
    if "textId" in cols and db.has("StringIds"):
        inline = '"text"' if "text" in cols else "NULL"
        return (f"COALESCE({inline}, (SELECT value FROM StringIds WHERE id = "
                "NVTX_EVENTS.textId))")
    return '"text"' if "text" in cols else "''"


def _classified(cat: Catalog, key: Texts, sized: Texts, step_marker: re.Pattern[str] | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(name index, shape index, kind) of each range from its key and sizes (``nvtx_key``);
    a name's kind is worked out once, and each distinct text cut once."""
    codes, keys = key
    pairs: dict[tuple[str, bool], int] = {}
    pair_of = np.zeros(len(keys), np.int64)
    sizes = list(sized[1])
    sizes_of_key = np.full(len(keys), -1, np.int64)
    used = np.zeros(len(keys), bool)
    used[codes] = True
    for i in np.flatnonzero(used).tolist():
        text = keys[i]
        if text.startswith("T"):
            name, torch_op = text[1:], True
        else:
            name, cut, torch_op = _split(text[1:])
            if cut is not None:
                sizes_of_key[i] = len(sizes)
                sizes.append(cut)
        pair_of[i] = pairs.setdefault((name, torch_op), len(pairs))
    described = np.array([_described(cat, name, torch_op, step_marker)
                          for name, torch_op in pairs], dtype=np.int64).reshape(-1, 2)
    index = pair_of[codes]
    kinds = described[index, 0].astype(np.uint8)
    names = described[index, 1].astype(np.int32)
    size = np.where(sized[0] >= 0, sized[0], sizes_of_key[codes])
    shapes = _shapes(cat, size, sizes, kinds == Kind.CPU_OP)
    return names, shapes, kinds


def _shapes(cat: Catalog, size: np.ndarray, sizes: list[str], ops: np.ndarray) -> np.ndarray:
    """Shape index of each range: its sizes text interned for CPU ops (in the order the texts
    first appear), -1 for others."""
    shapes = np.full(len(size), -1, np.int32)
    chosen = np.flatnonzero(ops & (size >= 0))
    if not len(chosen):
        return shapes
    unique, first, inverse = np.unique(size[chosen], return_index=True, return_inverse=True)
    table = np.empty(len(unique), np.int32)
    for u in np.argsort(first, kind="stable").tolist():
        table[u] = cat.shape(sizes[int(unique[u])])
    shapes[chosen] = table[inverse.reshape(-1)]
    return shapes


def _split(text: str) -> tuple[str, str | None, bool]:
    """(name, sizes JSON or None, whether torch's emit_nvtx named it) of a range's text: the
    name ends at the first of ``, seq = ``, ``, op_id = ``, ``, sizes = `` (string search: a
    regular expression per range cost more than the rest of the read)."""
    name, comma, rest = text.partition(", ")
    if not comma or not name:
        return text or "(unnamed)", None, False
    if not rest.startswith(_TORCH_FIELDS_AFTER_COMMA):  # a name with ", " in it (rare)
        cut = text.find(", ", len(name) + 2)
        while cut >= 0 and not text.startswith(_TORCH_FIELDS, cut):
            cut = text.find(", ", cut + 2)
        if cut < 0:
            return text, None, False
        name, rest = text[:cut], text[cut + 2:]
    at = rest.find(_SIZES_AFTER_COMMA)
    if at < 0:
        return name, None, True
    end = rest.find(_INPUT_OP_IDS, at)
    return name, rest[at + len(_SIZES_AFTER_COMMA):end if end >= 0 else len(rest)], True


def _described(cat: Catalog, name: str, torch_op: bool, step_marker: re.Pattern[str] | None
               ) -> tuple[int, int]:
    """(kind, name index) of a range name; (STEP, -1) for a step marker without a number."""
    category = "cpu_op" if torch_op and not _TORCH_ANNOTATION.match(name) else "user_annotation"
    marker = _step_name(name, step_marker)
    if marker == "":
        return int(Kind.STEP), -1
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


def number_steps(cat: Catalog, idx: list[int], start: np.ndarray, process: np.ndarray,
                 names: np.ndarray, kinds: np.ndarray) -> None:
    """Number unnumbered step markers (rows ``idx``) 1, 2, ... in time order within each
    process, ties in row order."""
    if not idx:
        return
    chosen = np.asarray(idx)
    order = chosen[np.lexsort((start[chosen], process[chosen]))]
    count: dict[int, int] = {}
    for i in order.tolist():
        count[int(process[i])] = number = count.get(int(process[i]), 0) + 1
        kinds[i] = Kind.STEP
        names[i] = cat.name(Kind.STEP, f"ProfilerStep#{number}")


def step_notes(steps: int) -> list[str]:
    """The note on ``steps`` NVTX ranges read as steps (none without any)."""
    if not steps:
        return []
    return [f"{steps} NVTX range(s) read as training steps (ProfilerStep#N, step N, "
            "iteration N, train_step or --step-marker)."]
