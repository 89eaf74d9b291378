"""Ops and collectives against the device's peaks: roofline, bus bandwidth."""
