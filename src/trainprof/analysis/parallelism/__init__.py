"""Which parallelism a job uses, and the figures of each: pipeline stages, FSDP layers
(docs/parallelism.md)."""
