"""The simulator's engine, shared by every server personality: decode cycles, the performance
model, the simulated GPUs and their agent, faults, the HTTP serving seam, process shape and the
multi-node rendezvous.

A personality (a server's command line, log lines, HTTP API and metrics) lives in its backend's
folder, ``specmon/backends/<name>/sim/``; ``python -m specmon.sim`` (SGLang) and
``python -m specmon.sim.vllm serve`` keep their published names here. See docs/simulator.md.
"""
