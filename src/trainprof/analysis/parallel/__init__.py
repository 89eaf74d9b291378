"""Many trace files at once: worker processes, any executor, a Dask cluster."""
