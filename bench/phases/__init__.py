"""bench/run's phases, one module per family of metrics (create, exec, files, idle and pause, snapshots, the
vm tier, egress), over the test kit in tests/lib. Each phase_*(d, ..., res, notes) adds its metrics to res
and what it could not measure, with the reason, to notes."""
