"""Runs engine steps through a stand-in vLLM model runner, as vLLM's worker does, and prints
what it saw as one JSON object: the runner's results, whether the methods were wrapped, and
the phase times measured inside the method bodies.

usage: python drive.py {v1|v2} STEPS [--prefill] [--async-output]
"""

from __future__ import annotations

import importlib
import json
import os
import sys

from stand_in_timing import TRUTH_MS, SchedulerOutput

BATCH_SIZES = (1, 3, 8)
NUM_SPEC_TOKENS = 3


def step_output(index: int) -> SchedulerOutput:
    size = BATCH_SIZES[index % len(BATCH_SIZES)]
    req_ids = [f"req-{j}" for j in range(size)]
    return SchedulerOutput(
        num_scheduled_tokens={r: 1 + NUM_SPEC_TOKENS for r in req_ids},
        scheduled_spec_decode_tokens={r: [-1] * NUM_SPEC_TOKENS for r in req_ids},
        accept={r: (index + j) % (NUM_SPEC_TOKENS + 1) for j, r in enumerate(req_ids)},
    )


def main() -> int:
    runner_kind, steps = sys.argv[1], int(sys.argv[2])
    if runner_kind == "v1":
        module = importlib.import_module("vllm.v1.worker.gpu_model_runner")
        runner = (
            module.GPUModelRunner(async_output=True)
            if "--async-output" in sys.argv
            else module.GPUModelRunner()
        )
        drafter = type(runner.drafter)
        sampler = type(runner.rejection_sampler)
        methods = {"draft": drafter.propose}
        methods["verify_end"] = getattr(sampler, "forward", None)
    else:
        module = importlib.import_module("vllm.v1.worker.gpu.model_runner")
        runner = module.GPUModelRunner()
        methods = {
            "draft": type(runner.speculator).propose,
            "verify_end": type(runner.rejection_sampler).__call__,
        }
    methods["cycle"] = module.GPUModelRunner.execute_model
    methods["cycle_end"] = getattr(module.GPUModelRunner, "sample_tokens", None)
    results = []

    def run_step(scheduler_output: SchedulerOutput) -> None:
        output = runner.execute_model(scheduler_output)
        if output is None:
            output = runner.sample_tokens(None)
        output = output.get_output() if hasattr(output, "get_output") else output
        results.append([output.req_ids, output.sampled_token_ids])

    if "--prefill" in sys.argv:
        run_step(SchedulerOutput({"req-0": 12}, {}))
    for index in range(steps):
        run_step(step_output(index))
    report = {
        "results": results,
        "wrapped": {k: hasattr(v, "__wrapped__") for k, v in methods.items() if v is not None},
        "truth_ms": TRUTH_MS,
        "host_sitecustomize": os.environ.get("HOST_SITECUSTOMIZE_RAN"),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
