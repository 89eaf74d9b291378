"""The host call tree, call sites, and which call launched each device event."""
