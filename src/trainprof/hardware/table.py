"""The device table (``devices.json``, package data) and the ``--hardware FILE.json`` override."""

from __future__ import annotations

import json
import pkgutil
from pathlib import Path
from typing import Any

from msgspec import field

from trainprof.errors import HardwareError
from trainprof.lazy import LazyPattern
from trainprof.structs import Record

#: Dtype classes a peak is given for (the roofline's compute ceilings).
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
_TOKEN = LazyPattern(r"[a-z0-9]+")


# A frozen record (hashable, as the device table's entries were): msgspec allows it, mypy's
# dataclass rules do not (Record itself is not frozen).
class Device(Record, frozen=True):  # type: ignore[misc]
    """One device's peaks. TFLOP/s per dtype (None: not offered), TB/s, GB/s (bidirectional).
    Its JSON leaves out the name-matching rules."""

    json_internal = frozenset({"match"})

    name: str
    sms: int | None
    peak_tflops: dict[str, float | None]
    hbm_tb_s: float
    link: str = ""
    link_gb_s: float | None = None
    nic_gb_s: float | None = None
    source: str = ""
    match: tuple[tuple[str, ...], ...] = field(default=())

    def peak(self, dtype: str) -> float | None:
        """Peak TFLOP/s for a dtype class; None when the device has no such units."""
        return self.peak_tflops.get(dtype)

    def ridge(self, dtype: str) -> float | None:
        """Arithmetic intensity (FLOP/byte) where the compute and memory roofs meet."""
        peak = self.peak(dtype)
        return peak / self.hbm_tb_s if peak and self.hbm_tb_s else None

    def matches(self, device_name: str) -> bool:
        tokens = set(_TOKEN.findall(device_name.lower()))
        return any(all(t in tokens for t in rule) for rule in self.match)


def device_from_dict(d: Any, where: str) -> Device:
    """One table entry (or a ``--hardware`` file) as a Device; HardwareError when malformed."""
    if not isinstance(d, dict):
        raise HardwareError(f"{where} is not a JSON object describing a device.")
    peaks = d.get("peak_tflops")
    hbm = d.get("hbm_tb_s")
    if not isinstance(d.get("name"), str) or not isinstance(peaks, dict):
        raise HardwareError(f"{where} needs a 'name' and a 'peak_tflops' object (see "
                            "docs/hardware.md).")
    if not _positive(hbm):
        raise HardwareError(f"{where} needs 'hbm_tb_s', the memory bandwidth in TB/s, as a "
                            "positive number.")
    unknown = sorted(set(peaks) - set(DTYPES))
    if unknown or not all(v is None or _positive(v) for v in peaks.values()):
        raise HardwareError(f"{where} has a bad 'peak_tflops': keys must be among "
                            f"{', '.join(DTYPES)} and values positive numbers or null.")
    for key in ("link_gb_s", "nic_gb_s", "sms"):
        if d.get(key) is not None and not _positive(d[key]):
            raise HardwareError(f"{where} has a bad '{key}': a positive number or null.")
    match = d.get("match") or [[d["name"].lower()]]
    if not (isinstance(match, list) and all(isinstance(rule, list) and rule and all(
            isinstance(t, str) for t in rule) for rule in match)):
        raise HardwareError(f"{where} has a bad 'match': a list of lists of words.")
    return Device(
        name=d["name"], sms=None if d.get("sms") is None else int(d["sms"]),
        peak_tflops={k: _float(peaks.get(k)) for k in DTYPES},
        hbm_tb_s=float(hbm or 0.0), link_gb_s=_float(d.get("link_gb_s")),
        nic_gb_s=_float(d.get("nic_gb_s")), link=str(d.get("link", "")),
        source=str(d.get("source", "")),
        match=tuple(tuple(str(t).lower() for t in rule) for rule in match),
    )


def _positive(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < float("inf")


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def load_devices() -> list[Device]:
    """The built-in table, in matching order (specific names before general ones)."""
    # pkgutil reads package data through the package's loader, as importlib.resources does,
    # without the readers and zipfile that importlib.resources imports (several ms)
    data = pkgutil.get_data("trainprof.hardware", "devices.json")
    if data is None:
        raise HardwareError("the built-in device table (devices.json) is missing.")
    text = data.decode("utf-8")
    return [device_from_dict(d, "devices.json") for d in json.loads(text)["devices"]]


def load_hardware_file(path: str | Path) -> Device:
    """A device described in a JSON file (``--hardware``); HardwareError in one sentence."""
    p = Path(path)
    try:
        data = json.loads(p.read_text("utf-8"))
    except FileNotFoundError:
        raise HardwareError(f"{p} does not exist.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HardwareError(f"{p} cannot be read ({exc.__class__.__name__}).") from None
    except json.JSONDecodeError as exc:
        raise HardwareError(f"{p} is not valid JSON (line {exc.lineno}).") from None
    except RecursionError:
        raise HardwareError(f"{p} is nested too deeply to be a device description.") from None
    return device_from_dict(data, str(p))


def device_for(device_name: str) -> Device | None:
    """The table's entry for a device name (``NVIDIA H100 80GB HBM3``), or None."""
    return next((d for d in _table() if d.matches(device_name)), None)


_CACHE: list[Device] = []


def _table() -> list[Device]:
    if not _CACHE:
        _CACHE.extend(load_devices())
    return _CACHE

