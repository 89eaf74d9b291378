"""Short import paths for the framework integrations (`trainprof.integrations.lightning`)."""
