"""GPU check of the draft/verify probe on vLLM's names: accuracy against CUDA-event ground truth,
and overhead. The vLLM twin of probe_gpu_check.py (same method, same cycle sizes).

One run does everything (about 3-4 minutes on one H200):
  PYTHONPATH=. python3 scripts/probe_gpu_check_vllm.py --out "$OUT"

It writes stand-in ``vllm.v1.worker.gpu_model_runner``, ``vllm.v1.spec_decode.eagle`` and
``vllm.v1.sample.rejection_sampler`` modules with vLLM 0.2x/0.33's class and method names and
call order (``GPUModelRunner.execute_model`` runs the target forward and keeps its state,
``GPUModelRunner.sample_tokens`` runs ``RejectionSampler.forward``, reads the sampled tokens on
the host as vLLM does, and calls ``EagleProposer.propose``). The phases are bf16 matmuls
calibrated to about 25 ms of target forward, 0.25 ms of rejection sampling and 1 ms of drafting.
Child processes drive the runner like vLLM's worker does, alternately without and with the probe
injected exactly as the host session injects it:

* heavy cycles: the probe's draft and verify spans against events recorded inside the method
  bodies (truth verify = forward start to rejection-sampler end), and the loop's wall time;
* light cycles (one tiny kernel per phase, one host sync per cycle like vLLM's bookkeeping):
  the probe's CPU cost per cycle, which is what could slow a real server.

Results: ``<out>/probe_gpu_check_vllm.json`` and a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The same injection, calibration and child runs as for SGLang.
from probe_gpu_check import calibrate, run_child, write_probe

TARGET_MS = {"forward": 25.0, "reject": 0.25, "draft": 1.0}
MATRIX_SIZE = {"forward": 8192, "reject": 2048, "draft": 4096}
WARMUP_CYCLES = 30
HEAVY_CYCLES = 1000
LIGHT_CYCLES = 5000
BATCH_SIZE = 8
NUM_SPEC_TOKENS = 3

COMMON = """
import json
import os

import torch

_REPS = json.loads(os.environ["STANDIN_REPS"])
_SIZE = json.loads(os.environ["STANDIN_SIZE"])
_BUFFERS = {}
for _phase, _n in _SIZE.items():
    _a = torch.randn(_n, _n, device="cuda", dtype=torch.bfloat16)
    _BUFFERS[_phase] = (_a, torch.randn_like(_a), torch.empty_like(_a))
TINY = torch.zeros(64, device="cuda")
# Ground-truth events are made and recorded up front, so creating them costs nothing inside
# the measured bodies.
_EVENTS = [torch.cuda.Event(enable_timing=True) for _ in range(int(os.environ["STANDIN_EVENTS"]))]
for _event in _EVENTS:
    _event.record()
torch.cuda.synchronize()
_NEXT = iter(_EVENTS)
TRUTH = []  # (phase, start event, end event), recorded inside the method bodies
LIGHT = [False]


def event():
    return next(_NEXT)


def work(phase):
    start, end = event(), event()
    start.record()
    if LIGHT[0]:
        TINY.add_(1.0)
    else:
        a, b, c = _BUFFERS[phase]
        for _ in range(_REPS[phase]):
            torch.mm(a, b, out=c)
    end.record()
    TRUTH.append((phase, start, end))
"""

REJECTION = """
from vllm_standin_common import work


class RejectionSampler:
    def __call__(self, *args):  # torch.nn.Module.__call__ -> forward
        return self.forward(*args)

    def forward(self, metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata):
        work("reject")
        return target_logits
"""

EAGLE = """
from vllm_standin_common import work


class EagleProposer:
    def propose(self, target_token_ids, target_positions, target_hidden_states, next_token_ids,
                token_indices_to_sample, common_attn_metadata, sampling_metadata):
        work("draft")
        return target_token_ids
"""

RUNNER = """
import torch
from vllm_standin_common import TINY, TRUTH, event, work
from vllm.v1.sample.rejection_sampler import RejectionSampler
from vllm.v1.spec_decode.eagle import EagleProposer


class ModelRunnerOutput:
    def __init__(self, req_ids, sampled_token_ids):
        self.req_ids = req_ids
        self.sampled_token_ids = sampled_token_ids


class GPUModelRunner:
    def __init__(self):
        self.drafter = EagleProposer()
        self.rejection_sampler = RejectionSampler()
        self.execute_model_state = None

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        start = event()
        start.record()
        work("forward")
        self.execute_model_state = (scheduler_output, start)
        return None

    def sample_tokens(self, grammar_output):
        (scheduler_output, start), self.execute_model_state = self.execute_model_state, None
        self.rejection_sampler("metadata", None, "logits", "bonus", "sampling")
        # vLLM's bookkeeping reads the sampled tokens on the host: one sync per cycle.
        req_ids = list(scheduler_output.num_scheduled_tokens)
        flags = (TINY[: len(req_ids)] >= 0).int().tolist()
        sampled = [[7] * (1 + (i % 4)) * flag for i, flag in enumerate(flags)]
        self.drafter.propose("ids", "pos", "hidden", "next", "idx", "attn", "sampling")
        end = event()
        end.record()
        TRUTH.append(("cycle", start, end))
        return ModelRunnerOutput(req_ids, sampled)
"""


def write_stand_in(root: Path) -> None:
    files = {
        "vllm_standin_common.py": COMMON,
        "vllm/__init__.py": '__version__ = "stand-in"\n',
        "vllm/v1/__init__.py": "",
        "vllm/v1/worker/__init__.py": "",
        "vllm/v1/sample/__init__.py": "",
        "vllm/v1/spec_decode/__init__.py": "",
        "vllm/v1/sample/rejection_sampler.py": REJECTION,
        "vllm/v1/spec_decode/eagle.py": EAGLE,
        "vllm/v1/worker/gpu_model_runner.py": RUNNER,
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


class _SchedulerOutput:
    def __init__(self) -> None:
        req_ids = [f"req-{i}" for i in range(BATCH_SIZE)]
        self.num_scheduled_tokens = {r: 1 + NUM_SPEC_TOKENS for r in req_ids}
        self.scheduled_spec_decode_tokens = {r: [-1] * NUM_SPEC_TOKENS for r in req_ids}


def child(result_path: Path) -> None:
    import torch
    import vllm_standin_common as common
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    runner = GPUModelRunner()
    scheduler_output = _SchedulerOutput()
    probed = hasattr(GPUModelRunner.sample_tokens, "__wrapped__")
    timings = {}
    for name, cycles, light in (
        ("warmup", WARMUP_CYCLES, False),
        ("light", LIGHT_CYCLES, True),
        ("heavy", HEAVY_CYCLES, False),
    ):
        common.LIGHT[0] = light
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(cycles):
            if runner.execute_model(scheduler_output) is None:
                runner.sample_tokens(None)
        torch.cuda.synchronize()
        timings[name] = time.perf_counter() - started
    truth = [(phase, s.elapsed_time(e)) for phase, s, e in common.TRUTH]
    # truth verify: forward start to rejection-sampler end (events of one cycle)
    spans = []
    current: dict = {}
    for phase, s, e in common.TRUTH:
        current[phase] = (s, e)
        if phase == "cycle":
            spans.append(current["forward"][0].elapsed_time(current["reject"][1]))
            current = {}
    report = {"probed": probed, "wall_s": timings, "truth": truth, "truth_verify": spans}
    hook = sys.modules.get("specmon_probe_hook")
    recorder = hook.recorder() if hook is not None else None
    if recorder is not None:
        recorder.close()
        report["writer_seconds"] = recorder.flush_seconds
        report["writer_lines"] = recorder.written
    result_path.write_text(json.dumps(report))


def truth_cycles(truth: list, truth_verify: list) -> list[dict[str, float]]:
    cycles, current = [], {}
    for phase, ms in truth:
        current[phase] = ms
        if phase == "cycle":
            cycles.append(current)
            current = {}
    for cycle, verify in zip(cycles, truth_verify, strict=True):
        cycle["verify"] = verify
    return cycles


def compare(records: list[dict], truth: list[dict[str, float]]) -> dict:
    out = {}
    for phase, key in (("draft", "draft_ms"), ("verify", "verify_ms"), ("cycle", "cycle_ms")):
        rel = [abs(r[key] - t[phase]) / t[phase] for r, t in zip(records, truth, strict=True)]
        out[phase] = {
            "truth_mean_ms": statistics.fmean(t[phase] for t in truth),
            "probe_mean_ms": statistics.fmean(r[key] for r in records),
            "mean_abs_rel_diff": statistics.fmean(rel),
            "max_abs_rel_diff": max(rel),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("probe_gpu_out"))
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pairs", type=int, default=2, help="without/with runs (default 2)")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0

    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).resolve()
    repo = script.parent.parent
    work = Path(tempfile.mkdtemp(prefix="specmon-probe-gpu-vllm-"))
    stand_in_root, probe_dir = work / "standin", work / "probe"
    write_stand_in(stand_in_root)
    sys.path.insert(0, str(repo))
    write_probe(probe_dir, "vllm")
    from specmon.model.events import ProbeTiming
    from specmon.probe import launch_env
    from specmon.probe.records import parse_probe_line

    reps = calibrate(MATRIX_SIZE, TARGET_MS)
    common = {
        "STANDIN_REPS": json.dumps(reps),
        "STANDIN_SIZE": json.dumps(MATRIX_SIZE),
        "STANDIN_EVENTS": str(10 * (WARMUP_CYCLES + LIGHT_CYCLES + HEAVY_CYCLES)),
    }
    base_path = ":".join(
        p for p in (str(stand_in_root), str(repo), os.environ.get("PYTHONPATH")) if p
    )
    summary: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "reps": reps,
        "matrix_size": MATRIX_SIZE,
        "cycles": {"warmup": WARMUP_CYCLES, "light": LIGHT_CYCLES, "heavy": HEAVY_CYCLES},
        "runs": [],
    }
    for pair in range(args.pairs):
        for probed in (False, True):
            label = f"{'with' if probed else 'without'}_{pair}"
            env = dict(common)
            pythonpath = base_path
            if probed:
                probe_file = work / f"{label}.jsonl"
                merged = launch_env(str(probe_dir), str(probe_file), base_path)
                env["SPECMON_PROBE_FILE"] = merged["SPECMON_PROBE_FILE"]
                pythonpath = merged["PYTHONPATH"]
            result = run_child(script, work, label, env, pythonpath)
            run = {"label": label, "probed": result["probed"], "wall_s": result["wall_s"]}
            if "writer_lines" in result:
                run["writer_us_per_cycle"] = result["writer_seconds"] / result["writer_lines"] * 1e6
            if probed:
                lines = probe_file.read_text().splitlines()
                parsed = [parse_probe_line(line) for line in lines]
                records = [
                    json.loads(line)
                    for line, record in zip(lines, parsed, strict=True)
                    if isinstance(record, ProbeTiming)
                ]
                truth = truth_cycles(result["truth"], result["truth_verify"])
                run["records"] = len(records)
                run["warnings"] = [line for line in lines if '"warning"' in line]
                run["clock"] = sorted({r.get("clock") for r in records})
                run["batch_size_ok"] = all(r["batch_size"] == BATCH_SIZE for r in records)
                run["draft_tokens_ok"] = all(
                    r["draft_tokens"] == BATCH_SIZE * NUM_SPEC_TOKENS for r in records
                )
                run["accepted_tokens"] = sorted({r["accepted_tokens"] for r in records})
                run["accepted_per_position"] = records[-1].get("accepted_per_position")
                heavy_from = WARMUP_CYCLES + LIGHT_CYCLES
                if len(records) == len(truth):
                    run["accuracy_heavy"] = compare(records[heavy_from:], truth[heavy_from:])
                else:
                    run["accuracy_heavy"] = f"record count {len(records)} != cycles {len(truth)}"
            summary["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "warnings"}), flush=True)

    def mean_wall(kind: str, probed: bool) -> float:
        return statistics.fmean(r["wall_s"][kind] for r in summary["runs"] if r["probed"] == probed)

    heavy_off, heavy_on = mean_wall("heavy", False), mean_wall("heavy", True)
    light_off, light_on = mean_wall("light", False), mean_wall("light", True)
    summary["heavy_cycle_ms"] = {
        "without": heavy_off / HEAVY_CYCLES * 1e3,
        "with": heavy_on / HEAVY_CYCLES * 1e3,
    }
    summary["heavy_slowdown_pct"] = (heavy_on - heavy_off) / heavy_off * 100
    summary["light_cycle_us"] = {
        "without": light_off / LIGHT_CYCLES * 1e6,
        "with": light_on / LIGHT_CYCLES * 1e6,
    }
    summary["probe_cpu_cost_per_cycle_us"] = (light_on - light_off) / LIGHT_CYCLES * 1e6
    summary["probe_cost_pct_of_25ms_cycle"] = summary["probe_cpu_cost_per_cycle_us"] / 25000 * 100
    summary["writer_us_per_cycle"] = statistics.fmean(
        r["writer_us_per_cycle"] for r in summary["runs"] if "writer_us_per_cycle" in r
    )
    (args.out / "probe_gpu_check_vllm.json").write_text(json.dumps(summary, indent=2))
    for key in (
        "gpu",
        "reps",
        "heavy_cycle_ms",
        "heavy_slowdown_pct",
        "light_cycle_us",
        "probe_cpu_cost_per_cycle_us",
        "probe_cost_pct_of_25ms_cycle",
        "writer_us_per_cycle",
    ):
        print(f"{key}: {summary[key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
