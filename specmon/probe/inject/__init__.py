"""The probe runtime copied to the GPU host (see ``specmon.probe.injection_files``), the same for
every server; each server's table, shipped beside it, lives in its backend folder. The files are
self-contained, since specmon is not installed there; importing them here has no effect."""
