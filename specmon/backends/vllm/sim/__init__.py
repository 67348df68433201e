"""The simulator's vLLM personality: ``python -m specmon.sim.vllm serve MODEL [vLLM flags]``.

vLLM 0.33's command line, log formats, HTTP API and ``/metrics`` over the same simulated GPU
host and performance model (the engine, specmon.sim) as the SGLang personality.
"""
