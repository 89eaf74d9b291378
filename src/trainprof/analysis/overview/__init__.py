"""Every rank's overview: steps, breakdown, phases, GPU figures, timeline."""
