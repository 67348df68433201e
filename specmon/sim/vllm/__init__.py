"""``python -m specmon.sim.vllm serve ...``: the published name of the vLLM personality, which
lives in specmon/backends/vllm/sim/ (this package holds only its launcher)."""
