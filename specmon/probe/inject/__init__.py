"""Files copied to the GPU host for the probe (see ``specmon.probe.injection_files``). They are
self-contained, since specmon is not installed there; importing them here has no effect."""
