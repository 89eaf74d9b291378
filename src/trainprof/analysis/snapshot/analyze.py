"""What a CUDA memory snapshot says: reserved vs allocated, fragmentation, an OOM's cause, the
top allocation sites, allocations per step and a timeline of live bytes.

Input is the snapshot dict (`trace.snapshot.load_snapshot`); the keys follow
`torch.cuda.memory._snapshot`. Bytes throughout. See docs/memory_snapshots.md.
"""

from __future__ import annotations

from typing import Any

from msgspec import field

from trainprof.analysis.decode import record
from trainprof.analysis.snapshot.breakdown import RecordedBy
from trainprof.analysis.snapshot.history import History, history, step_windows
from trainprof.analysis.snapshot.holders import by_holder
from trainprof.analysis.snapshot.peak import PeakState, live_blocks, peak_state
from trainprof.analysis.snapshot.sites import Site, history_sites, live_block_sites
from trainprof.structs import Derived, Record

#: The caching allocator serves requests up to this size from "small" segments, larger ones from
#: "large" segments: a free block helps a request only in its own pool.
SMALL_REQUEST = 1 << 20
#: Block sizes are multiples of this.
BLOCK_ROUNDING = 512
STATES = ("active_allocated", "active_pending_free", "inactive")


class DeviceState(Record):
    """One device's segments and blocks at the snapshot."""

    json_derived = (Derived("fragmentation_pct", "device_total"),
                    Derived("reserved_to_allocated", "fragmentation_pct"),
                    Derived("reserved_pct_of_device", "reserved_to_allocated"))
    json_internal = frozenset({"free_by_stream"})

    device: int
    segments: int = 0
    segments_by_type: dict[str, int] = field(default_factory=dict)
    expandable_segments: int = 0
    reserved: int = 0
    allocated: int = 0
    requested: int = 0  # what the tensors asked for; allocated minus this is rounding
    pending_free: int = 0
    inactive: int = 0
    inactive_split: int = 0  # free blocks in segments that also hold live ones
    releasable: int = 0  # wholly free segments: empty_cache() would return them
    largest_free: dict[str, int] = field(default_factory=lambda: {"small": 0, "large": 0})
    free_by_pool: dict[str, int] = field(default_factory=lambda: {"small": 0, "large": 0})
    #: (pool, stream) -> [free bytes, largest free block]: a block serves only its own stream.
    free_by_stream: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    blocks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    device_total: int | None = None

    @property
    def fragmentation_pct(self) -> float | None:
        """Free bytes stranded in split segments, as a share of reserved memory."""
        return 100.0 * self.inactive_split / self.reserved if self.reserved else None

    @property
    def reserved_to_allocated(self) -> float | None:
        return self.reserved / self.allocated if self.allocated else None

    @property
    def reserved_pct_of_device(self) -> float | None:
        return 100.0 * self.reserved / self.device_total if self.device_total else None


class OutOfMemory(Record):
    """An out-of-memory error: the failing request against what was free and how it was cut."""

    device: int | None
    requested: int | None
    device_free: int | None  # what the driver still had (outside the cache)
    cached_free: int | None  # free blocks in the cache, in the request's pool
    largest_free_block: int | None  # in the request's pool
    cause: str  # "fragmentation", "capacity", or "unknown"


class SnapshotAnalysis(Record):
    """Everything `trainprof memory` shows about one snapshot."""

    # The JSON keys the devices of `holders` and `holder_sites` as text.
    json_derived = (Derived("holders", "histories", "holders_by_name"),
                    Derived("holder_sites", "holders", "holder_sites_by_name"))
    json_internal = frozenset({"holders", "holder_sites"})

    source: str
    devices: list[DeviceState]
    ooms: list[OutOfMemory]
    live_sites: list[Site]
    allocated_sites: list[Site]
    histories: list[History]
    #: Per device, bytes live at the snapshot by holder (holders.py: an estimate from stacks).
    holders: dict[int, dict[str, int]]
    holder_sites: dict[int, dict[str, list[Site]]]
    #: Per device with history: what was live at the peak of the history.
    peaks: list[PeakState]
    allocator_settings: dict[str, Any]
    recorded_by: dict[str, Any]  # what trainprof added (rank, step, reason, breakdown)
    notes: list[str] = field(default_factory=list)

    @property
    def recorder(self) -> RecordedBy:
        """`recorded_by` as typed fields (the keys it has besides them are left out)."""
        found: RecordedBy = record(self.recorded_by, RecordedBy, "snapshot's recorded_by")
        return found

    @property
    def holders_by_name(self) -> dict[str, dict[str, int]]:
        """`holders` keyed by the device as text (the JSON's keys)."""
        return {str(k): v for k, v in self.holders.items()}

    @property
    def holder_sites_by_name(self) -> dict[str, dict[str, list[Site]]]:
        """`holder_sites` keyed by the device as text (the JSON's keys)."""
        return {str(k): v for k, v in self.holder_sites.items()}


class SnapshotResult(SnapshotAnalysis, kw_only=True):
    """One snapshot as `trainprof memory --format json` and the HTML report's
    `memory_snapshots` write it (`diagnose.snapshot.snapshot_result`): the analysis, its findings
    (their JSON objects: the diagnosis is a layer above; `diagnose.findings.typed_findings`) and
    the sentences on what holds the peak."""

    findings: list[dict[str, Any]] = field(default_factory=list)
    verdict: list[str] = field(default_factory=list)


class UnreadSnapshot(Record):
    """A snapshot beside a report's traces that could not be read: its file and why."""

    source: str
    error: str


class MemorySnapshotReport(Record):
    """`trainprof memory --format json`: every snapshot of its input."""

    schema: str
    snapshots: list[SnapshotResult]


def analyze_snapshot(snapshot: dict[str, Any], source: str = "") -> SnapshotAnalysis:
    """The analysis of a snapshot dict in `torch.cuda.memory._snapshot`'s format."""
    segments = [s for s in snapshot.get("segments", []) if isinstance(s, dict)]
    traces = snapshot.get("device_traces") or []
    extra: dict[str, Any] = (snapshot["trainprof"] if isinstance(snapshot.get("trainprof"), dict)
                             else {})
    devices = device_states(segments, traces, extra.get("device_totals") or {})
    steps = step_windows(snapshot.get("external_annotations"))
    by_id = {d.device: d for d in devices}
    histories = [history(i, entries, by_id[i].allocated + by_id[i].pending_free, by_id[i].reserved,
                         steps)
                 for i, entries in enumerate(traces) if entries and i in by_id]
    peaks = [peak_state(h.device, traces[h.device], h.peak_entry, segments,
                        h.peak_ms if h.has_time else None, h.peak_step)
             for h in histories if h.peak_entry is not None]
    held = live_holders(segments, devices)
    settings = snapshot.get("allocator_settings")
    notes = [] if any(traces) else [
        "the snapshot has no allocator history (record it with "
        "torch.cuda.memory._record_memory_history, or trainprof.profile(memory_snapshot=True)): "
        "no timeline, no per-step allocations"]
    return SnapshotAnalysis(
        source=source, devices=devices, ooms=out_of_memory_errors(traces, by_id, extra),
        live_sites=live_block_sites(segments),
        allocated_sites=history_sites([e for entries in traces for e in entries]),
        histories=histories, holders={k: v[0] for k, v in held.items()},
        holder_sites={k: v[1] for k, v in held.items()}, peaks=peaks,
        allocator_settings=settings if isinstance(settings, dict) else {},
        recorded_by={k: v for k, v in extra.items() if k != "device_totals"}, notes=notes)


def live_holders(segments: list[dict[str, Any]], devices: list[DeviceState]
                 ) -> dict[int, tuple[dict[str, int], dict[str, list[Site]]]]:
    """Bytes in use at the snapshot per device and holder, and each holder's top sites."""
    return {d.device: by_holder(list(live_blocks(segments, d.device).values())) for d in devices}


def device_states(segments: list[dict[str, Any]], traces: list[Any],
                  totals: dict[str, Any]) -> list[DeviceState]:
    """Per device: segments, reserved, allocated, free blocks split or releasable, by pool."""
    states: dict[int, DeviceState] = {}
    for seg in segments:
        device = int(seg.get("device", 0) or 0)
        d = states.get(device) or states.setdefault(device, DeviceState(device))
        kind = "small" if seg.get("segment_type") == "small" else "large"
        d.segments += 1
        d.segments_by_type[kind] = d.segments_by_type.get(kind, 0) + 1
        d.expandable_segments += bool(seg.get("is_expandable"))
        blocks = [b for b in seg.get("blocks", []) if isinstance(b, dict)]
        total = int(seg.get("total_size") or sum(int(b.get("size", 0)) for b in blocks))
        d.reserved += total
        free = [int(b.get("size", 0)) for b in blocks if b.get("state") not in STATES[:2]]
        used = len(free) < len(blocks)
        for b in blocks:
            state = str(b["state"]) if b.get("state") in STATES else "inactive"
            d.blocks[state] += 1
            if state == "active_allocated":
                d.allocated += int(b.get("size", 0))
                d.requested += int(b["requested_size"] if "requested_size" in b
                                   else b.get("size", 0))
            elif state == "active_pending_free":
                d.pending_free += int(b.get("size", 0))
        d.inactive += sum(free)
        d.inactive_split += sum(free) if used else 0
        d.releasable += 0 if used else sum(free)
        d.largest_free[kind] = max([d.largest_free[kind], *free])
        d.free_by_pool[kind] += sum(free)
        on_stream = d.free_by_stream.setdefault((kind, int(seg.get("stream", 0) or 0)), [0, 0])
        on_stream[0] += sum(free)
        on_stream[1] = max([on_stream[1], *free])
    for device in range(len(traces)):  # a device with history but no segment left
        if traces[device] and device not in states:
            states[device] = DeviceState(device)
    for d in states.values():
        on_device = totals.get(str(d.device))
        d.device_total = int(on_device) if isinstance(on_device, int | float) else None
    return [states[k] for k in sorted(states)]


def out_of_memory_errors(traces: list[Any], devices: dict[int, DeviceState],
                         extra: dict[str, Any]) -> list[OutOfMemory]:
    """Each `oom` entry of the history (or, without one, the error trainprof's observer saw)."""
    seen = [(i, e) for i, entries in enumerate(traces) for e in entries
            if isinstance(e, dict) and e.get("action") == "oom"]
    found = [(i, e.get("size"), e.get("device_free"), e.get("stream")) for i, e in seen]
    oom = extra.get("oom") if isinstance(extra.get("oom"), dict) else None
    if not found and oom is not None:
        found = [(oom.get("device"), oom.get("requested"), oom.get("device_free"), None)]
    return [judge(device, requested, free, devices, stream)
            for device, requested, free, stream in found]


def judge(device: Any, requested: Any, device_free: Any, devices: dict[int, DeviceState],
          stream: Any = None) -> OutOfMemory:
    """Fragmentation when the driver's free memory plus the cache's free blocks would hold the
    request but no single free block of its pool (and stream) does; capacity when even all of
    it would not."""
    state = devices.get(device) if isinstance(device, int) else None
    if state is None or not isinstance(requested, int) or requested < 0:
        free = device_free if isinstance(device_free, int) else None
        return OutOfMemory(device if isinstance(device, int) else None,
                           requested if isinstance(requested, int) else None, free, None, None,
                           "unknown")
    kind = "small" if requested <= SMALL_REQUEST else "large"
    cached, largest = state.free_by_pool[kind], state.largest_free[kind]
    if isinstance(stream, int):  # the entry names the request's stream: only its blocks serve
        largest = state.free_by_stream.get((kind, stream), (0, 0))[1]
    rounded = -(-requested // BLOCK_ROUNDING) * BLOCK_ROUNDING
    driver = device_free if isinstance(device_free, int) else 0
    cause = ("capacity" if driver + cached < rounded else
             "fragmentation" if largest < rounded else "unknown")
    return OutOfMemory(device, requested, device_free if isinstance(device_free, int) else None,
                       cached, largest, cause)
