"""The simulator's SGLang personality: a simulated SGLang EAGLE-3 server on a simulated 8-GPU
host, for the demo and the tests.

``python -m specmon.sim [launch_server flags]`` is a real server process: SGLang 0.5.9's log
lines, HTTP API and metrics over the shared engine (specmon.sim: a performance model calibrated
on a real Kimi-K2.5 / EAGLE-3 / TP8 host, faults on demand, and a GPU state file for
``python -m specmon.sim.gpu_agent``). See docs/simulator.md.
"""
