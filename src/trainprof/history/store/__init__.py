"""The history database and what goes into it: schema, rows, writes, pending rows, sources."""
