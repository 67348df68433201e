"""Runs speculative cycles through a stand-in SGLang worker, as SGLang's scheduler would, and
prints what it saw as one JSON object: the workers' results, whether the methods were wrapped,
and the phase times measured inside the method bodies.

usage: python drive.py {v1|v2} CYCLES [--prefill] [--load-plugins]
"""

from __future__ import annotations

import importlib
import json
import os
import sys

from stand_in_timing import TRUTH_MS, Batch

BATCH_SIZES = (1, 3, 8)


def main() -> int:
    family, cycles = sys.argv[1], int(sys.argv[2])
    if "--load-plugins" in sys.argv:
        from sglang.srt.plugins import LOADED, load_plugins

        load_plugins()
        loaded = list(LOADED)
    else:
        loaded = []
    if family == "v1":
        module = importlib.import_module("sglang.srt.speculative.eagle_worker")
        worker = module.EAGLEWorker()
        methods = {
            "cycle": module.EAGLEWorker.forward_batch_generation,
            "draft": module.EAGLEWorker.draft,
            "extend": module.EAGLEWorker.forward_draft_extend_after_decode,
        }
        methods["verify"] = getattr(module.EAGLEWorker, "verify", None)
    else:
        module = importlib.import_module("sglang.srt.speculative.eagle_worker_v2")
        worker = module.EAGLEWorkerV2()
        methods = {
            "cycle": module.EAGLEWorkerV2.forward_batch_generation,
            "draft": module.EagleDraftWorker.draft,
            "verify": module.EAGLEWorkerV2.verify,
            "extend": module.EagleDraftWorker._draft_extend_for_decode,
        }
    results = []
    if "--prefill" in sys.argv:
        results.append(worker.forward_batch_generation(Batch(seq_lens=[5, 6], is_prefill=True)))
    for index in range(cycles):
        size = BATCH_SIZES[index % len(BATCH_SIZES)]
        batch = Batch(seq_lens=[10] * size, accepted_per_request=[index % 4] * size)
        results.append(worker.forward_batch_generation(batch))
    report = {
        "results": results,
        "wrapped": {k: hasattr(v, "__wrapped__") for k, v in methods.items() if v is not None},
        "truth_ms": TRUTH_MS,
        "batch_sizes": BATCH_SIZES,
        "plugins_loaded": loaded,
        "host_sitecustomize": os.environ.get("HOST_SITECUSTOMIZE_RAN"),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
