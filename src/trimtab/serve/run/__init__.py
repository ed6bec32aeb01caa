"""The loop's side of `trimtab serve`: its actuator of the world loop, launching attempts on devices, the device
book, the attempt records, recovery after a restart, progress reports and elastic resizes, tenants' Unix users,
the GPU inventory."""
