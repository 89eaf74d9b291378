"""TensorBoard: scalars and the findings (a text table) in an event file; files copied beside.

Writes with the ``tensorboard`` package's own event writer (no torch, no TensorFlow) into
``TENSORBOARD_LOGDIR``, or ``runs/trainprof-<time>``, or the log folder of the writer the code
already has (accelerate's or Lightning's TensorBoard logger). TensorBoard has no artifact store:
the HTML report and the JSON result are copied into ``<logdir>/trainprof/``.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from trainprof.trackers.extras import require


def default_logdir() -> Path:
    return Path(os.environ.get("TENSORBOARD_LOGDIR")
                or Path("runs") / time.strftime("trainprof-%Y%m%d-%H%M%S"))


def _markdown_table(columns: tuple[str, ...], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return ("" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)
                ).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, logdir: str | os.PathLike[str] | None = None) -> None:
        writer = require("tensorboard.summary.writer.event_file_writer", "tensorboard")
        self._pb = require("tensorboard.compat.proto.summary_pb2", "tensorboard")
        self._event = require("tensorboard.compat.proto.event_pb2", "tensorboard").Event
        self._tensor = require("tensorboard.compat.proto.tensor_pb2", "tensorboard")
        self._shape = require("tensorboard.compat.proto.tensor_shape_pb2", "tensorboard")
        self.logdir = Path(logdir) if logdir is not None else default_logdir()
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.writer = writer.EventFileWriter(str(self.logdir), filename_suffix=".trainprof")

    def _add(self, values: list[Any], step: int | None) -> None:
        summary = self._pb.Summary(value=values)
        self.writer.add_event(self._event(wall_time=time.time(), step=step or 0,
                                          summary=summary))

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self._add([self._pb.Summary.Value(tag=k, simple_value=float(v))
                   for k, v in metrics.items()], step)

    def log_findings(self, columns: tuple[str, ...], rows: list[list[Any]],
                     tags: dict[str, str]) -> None:
        text = _markdown_table(columns, rows) if rows else "No findings."
        tensor = self._tensor.TensorProto(
            dtype=7,  # DT_STRING
            string_val=[text.encode()],
            tensor_shape=self._shape.TensorShapeProto(dim=[]))
        metadata = self._pb.SummaryMetadata(
            plugin_data=self._pb.SummaryMetadata.PluginData(plugin_name="text"))
        self._add([self._pb.Summary.Value(tag="trainprof/findings", metadata=metadata,
                                          tensor=tensor)], 0)
        self.writer.flush()

    def log_artifact(self, path: Path) -> None:
        folder = self.logdir / "trainprof"
        folder.mkdir(exist_ok=True)
        shutil.copyfile(path, folder / path.name)

    def close(self) -> None:
        self.writer.close()
