"""Rules about getting the input to the device: the data loader, inline preprocessing, copies."""

from __future__ import annotations

from trainprof.analysis.results import RankAnalysis
from trainprof.diagnose import verdicts
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import ms_of, rank_finding, step_evidence, where
from trainprof.diagnose.verdicts import (  # noqa: F401 (the rule's thresholds, by its module)
    DATA_LOADING_PCT,
    DataWait,
)

# data_loading's thresholds and verdict: diagnose/verdicts.py (shared with the live view).
# input_preprocessing: host-only work before a step's first GPU work, outside a DataLoader.
INPUT_PREP_PCT = 10.0
# host_to_device_copies: copies running with no compute or communication (exposed).
COPIES_PCT = 5.0

_SINGLE_PROCESS = "_SingleProcessDataLoaderIter"

WORKERS = Fix(
    summary="Load batches in background worker processes, pinned, and keep the workers alive.",
    pytorch=(
        "loader = DataLoader(dataset, batch_size=bs, shuffle=True,\n"
        "                    num_workers=4, pin_memory=True,\n"
        "                    persistent_workers=True, prefetch_factor=2)"
    ),
    accelerate=(
        "loader = DataLoader(dataset, batch_size=bs, num_workers=4, pin_memory=True,\n"
        "                    persistent_workers=True)\n"
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"
    ),
)
FASTER_WORKERS = Fix(
    summary=(
        "The workers cannot keep up: add workers (up to the free cores), prefetch more, make "
        "__getitem__ cheaper (decode once, cache, move augmentation to the GPU)."
    ),
    pytorch=(
        "loader = DataLoader(dataset, batch_size=bs, num_workers=os.cpu_count() - 1,\n"
        "                    pin_memory=True, persistent_workers=True, prefetch_factor=4)"
    ),
    accelerate=(
        "from accelerate.utils import DataLoaderConfiguration\n"
        "accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))\n"
        "loader = DataLoader(dataset, batch_size=bs, num_workers=8, pin_memory=True,\n"
        "                    prefetch_factor=4)"
    ),
)
PREPROCESS_IN_WORKERS = Fix(
    summary=(
        "Prepare inputs in a Dataset served by DataLoader workers (or a background thread), so "
        "the next batch is ready while the GPU runs this one."
    ),
    pytorch=(
        "class Prepared(Dataset):\n"
        "    def __getitem__(self, i):\n"
        "        return preprocess(raw[i])      # decoding, resizing, tokenising\n"
        "loader = DataLoader(Prepared(), batch_size=bs, num_workers=4, pin_memory=True)\n"
        "for batch in loader:\n"
        "    out = model(batch.to('cuda', non_blocking=True))"
    ),
    accelerate=(
        "loader = DataLoader(Prepared(), batch_size=bs, num_workers=4, pin_memory=True)\n"
        "model, loader = accelerator.prepare(model, loader)"
    ),
)
PINNED_COPIES = Fix(
    summary=(
        "Copy from pinned memory with non_blocking=True so copies overlap compute; keep data "
        "on the device instead of moving it back and forth."
    ),
    pytorch=(
        "loader = DataLoader(dataset, batch_size=bs, num_workers=4, pin_memory=True)\n"
        "x = x.to('cuda', non_blocking=True)"
    ),
    accelerate=(
        "from accelerate.utils import DataLoaderConfiguration\n"
        "accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))\n"
        "loader = DataLoader(dataset, batch_size=bs, pin_memory=True)"
    ),
)


def data_loaders(r: RankAnalysis) -> list[str]:
    """The DataLoader iterators the rank's trace names."""
    return list(r.sections.host.data_loaders) if r.sections.host is not None else []


def loader_fix(r: RankAnalysis) -> Fix:
    """Worker processes for a loader in the main process (or an unnamed one); faster workers
    for workers that cannot keep up."""
    loaders = data_loaders(r)
    return WORKERS if not loaders or any(_SINGLE_PROCESS in n for n in loaders) \
        else FASTER_WORKERS


def data_loading(r: RankAnalysis) -> Finding | None:
    # On a GPU run only the wait nothing overlaps costs time (the breakdown's DataLoader); on a
    # CPU run the data phase is the wait.
    gpu = r.gpu is not None
    share = r.breakdown_pct["dataloader"] if gpu else r.phases_pct["data"]
    verdict = verdicts.data_loading(DataWait(share))
    if verdict is None:
        return None
    loaders = data_loaders(r)
    single = any(_SINGLE_PROCESS in name for name in loaders)
    measure = "DataLoader time with nothing else running" if gpu else "data phase"
    how = ("in the main process (num_workers=0)" if single
           else "in worker processes that cannot keep up" if loaders else "")
    evidence = [
        Evidence(measure, share, "%", where(r)),
        Evidence("mean wait per step", ms_of(r, share), "ms", where(r)),
        step_evidence(r),
    ]
    if loaders:
        name = loaders[0].split("#", 1)[-1].removesuffix(".__next__")
        evidence.append(Evidence("data loader", name, "", f"batches made {how}"))
    return rank_finding(
        r, "data_loading", verdict.severity,
        f"Waiting for data takes {share:.0f}% of each step",
        "The training loop waits for the next batch: the DataLoader prepares batches "
        + (how or "too slowly") + ", and the model sits idle meanwhile.",
        evidence, verdict.saving_pct,
        "batches prepared in background workers fully overlap the step",
        loader_fix(r),
    )


def input_preprocessing(r: RankAnalysis) -> Finding | None:
    host = r.sections.host
    share = host.pct.get("lead_in") if host is not None else None
    if host is None or share is None or share <= INPUT_PREP_PCT:
        return None
    spots = host.spots.get("lead_in", [])
    evidence = [
        Evidence("GPU idle before the step's first GPU work (host busy, no DataLoader)", share,
                 "%", where(r)),
        Evidence("per step", ms_of(r, share), "ms", where(r)),
        step_evidence(r),
        *[Evidence("host work in that time", s.ms_per_step, "ms/step", s.name) for s in spots],
    ]
    return rank_finding(
        r, "input_preprocessing", saving_severity(share),
        f"The GPU waits {share:.0f}% of each step for input prepared on the host",
        "Each step starts with host work (decoding, resizing, tokenising, pipeline "
        "pre-processing) outside any DataLoader, and the GPU has nothing to run until it ends.",
        evidence, share, "the preprocessing runs in DataLoader workers and overlaps GPU work",
        PREPROCESS_IN_WORKERS,
    )


def host_to_device_copies(r: RankAnalysis) -> Finding | None:
    copies = r.sections.copies
    if copies is None or not copies.rows:
        return None
    d = copies.to_dict()
    share = d["exposed_pct"]
    pageable = [k for k in d["kinds"] if k["pageable_count"]]
    if share <= COPIES_PCT and not pageable:
        return None
    evidence = [Evidence("copy time with no compute running (exposed)", share, "%", where(r))]
    for k in d["kinds"]:
        if k["kind"] == "memset":
            continue
        detail = f"{k['count_per_step']:.1f} per step, {k['bytes_per_step'] / 1e6:.1f} MB/step"
        if k["bandwidth_gbps"] is not None:
            detail += f", {k['bandwidth_gbps']:.1f} GB/s"
        if k["pageable_count"]:
            detail += f", {k['pageable_count']} from pageable memory"
        evidence.append(Evidence(f"{k['kind']} copies exposed", k["exposed_pct"], "%",
                                 where(r, detail)))
    title = (f"Copies not hidden under compute take {share:.1f}% of each step"
             if share > COPIES_PCT else
             f"{sum(k['pageable_count'] for k in pageable)} copies from pageable memory")
    return rank_finding(
        r, "host_to_device_copies", saving_severity(share), title,
        "Memory copies run while the GPU computes nothing; copies from pageable (not pinned) "
        "host memory are staged and block the host, so they cannot overlap compute.",
        evidence, share, "pinned memory and non_blocking copies overlap them with compute",
        PINNED_COPIES,
    )
