"""What the hardware can do: a table of devices (peak FLOP/s per dtype, memory and link
bandwidth), matched by the device name a trace records. docs/hardware.md."""

from trainprof.hardware.table import (
    DTYPES,
    Device,
    device_for,
    load_devices,
    load_hardware_file,
)

__all__ = ["DTYPES", "Device", "device_for", "load_devices", "load_hardware_file"]
