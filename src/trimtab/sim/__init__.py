"""The simulator: a deterministic event heap, run-time models and the runs that replay traces on a modelled
cluster."""
