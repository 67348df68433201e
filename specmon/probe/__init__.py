"""The draft/verify timing probe injected into a real SGLang server (see records.py for the
record schema the probe and the simulator both write)."""
