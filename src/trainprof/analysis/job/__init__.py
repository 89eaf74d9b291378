"""A job's ranks together: the rank table, spread, stragglers and cluster summaries."""
