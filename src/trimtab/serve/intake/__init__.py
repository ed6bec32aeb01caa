"""Intake: what `trimtab serve` accepts and refuses before a job is queued: the API's requests of the daemon,
submissions read, jobs no node could run, placement fields, tenant limits."""
