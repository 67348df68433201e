"""GPU check of the draft/verify probe: accuracy against CUDA-event ground truth, and overhead.

One run does everything (about 3-5 minutes on one H200):
  PYTHONPATH=. python3 scripts/probe_gpu_check.py --out "$OUT"

It writes a stand-in ``sglang.srt.speculative.eagle_worker`` whose ``EAGLEWorker`` has SGLang's
class and method names and does real CUDA work of known size (bf16 matmuls calibrated to about
1 ms of draft, 25 ms of verify and 0.5 ms of draft-extend), then runs child processes that drive
it like SGLang's scheduler does, alternately without and with the probe injected exactly as the
host session injects it (the backend's ``probe_targets()`` files copied to a folder,
``launch_env()`` merged):

* heavy cycles: the probe's per-phase numbers against events recorded inside the method bodies
  (the ground truth), and the loop's wall time with and without the probe;
* light cycles (tiny kernels, one host sync per cycle like v1's verify): the probe's CPU cost
  per cycle, which is what could slow a real server.

``--family v2`` writes the overlap path's stand-in instead (``eagle_worker_v2``: ``EAGLEWorkerV2``
and ``EagleDraftWorker``), whose verify keeps the accept lengths on the GPU and never syncs, as
SGLang's v2 does; the probe copies them to pinned host memory without a sync, and every record's
``accepted_per_request`` is checked against the known values.

Results: ``<out>/probe_gpu_check_<family>.json`` and a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = {"draft": 1.0, "verify": 25.0, "extend": 0.5}
MATRIX_SIZE = {"draft": 4096, "verify": 8192, "extend": 4096}
WARMUP_CYCLES = 30
HEAVY_CYCLES = 1000
LIGHT_CYCLES = 5000
BATCH_SIZE = 8
DRAFT_TOKENS_PER_REQUEST = 4

STAND_IN_WORKER = '''
"""Stand-in EAGLE worker with real CUDA work: SGLang's names, calibrated matmuls."""
import json
import os

import torch

_REPS = json.loads(os.environ["STANDIN_REPS"])
_SIZE = json.loads(os.environ["STANDIN_SIZE"])
_BUFFERS = {}
for _phase, _n in _SIZE.items():
    _a = torch.randn(_n, _n, device="cuda", dtype=torch.bfloat16)
    _BUFFERS[_phase] = (_a, torch.randn_like(_a), torch.empty_like(_a))
_TINY = torch.zeros(64, device="cuda")
# Ground-truth events are made and recorded once up front, so that creating them costs nothing
# inside the measured bodies.
_EVENTS = [torch.cuda.Event(enable_timing=True) for _ in range(int(os.environ["STANDIN_EVENTS"]))]
for _event in _EVENTS:
    _event.record()
torch.cuda.synchronize()
_NEXT_EVENT = iter(_EVENTS)
TRUTH = []  # (phase, start event, end event), recorded inside the method bodies
LIGHT = [False]


def _work(phase):
    start, end = next(_NEXT_EVENT), next(_NEXT_EVENT)
    start.record()
    if LIGHT[0]:
        _TINY.add_(1.0)
    else:
        a, b, c = _BUFFERS[phase]
        for _ in range(_REPS[phase]):
            torch.mm(a, b, out=c)
    end.record()
    TRUTH.append((phase, start, end))


class VerifyOutput:
    def __init__(self, accepted):
        self.accept_length_per_req_cpu = accepted


# Request i accepts i % 4 draft tokens in every verify (the records are checked against this).
_ACCEPTED = torch.arange(64, device="cuda", dtype=torch.int32) % 4


class EAGLEWorker:
    def __init__(self, speculative_num_draft_tokens):
        self.speculative_num_draft_tokens = speculative_num_draft_tokens

    def forward_batch_generation(self, batch):
        start, end = next(_NEXT_EVENT), next(_NEXT_EVENT)
        start.record()
        spec_info = self.draft(batch)
        _logits, verify_output, _mwb, _graph = self.verify(batch, spec_info)
        self.forward_draft_extend_after_decode(batch)
        end.record()
        TRUTH.append(("cycle", start, end))
        return sum(verify_output.accept_length_per_req_cpu)

    def draft(self, batch):
        _work("draft")
        return None

    def verify(self, batch, spec_info):
        _work("verify")
        # v1 reads the accept lengths on the host: one sync per cycle, as in SGLang.
        accepted = _ACCEPTED[: len(batch.seq_lens)].tolist()
        return None, VerifyOutput(accepted), None, True

    def forward_draft_extend_after_decode(self, batch):
        _work("extend")
'''


STAND_IN_WORKER_V2 = (
    STAND_IN_WORKER.split("class VerifyOutput")[0]
    + """
# Request i accepts i % 4 draft tokens; v2's accept_lens count the bonus token too.
_ACCEPT_LENS = torch.arange(64, device="cuda", dtype=torch.int32) % 4 + 1


class GenerationBatchResult:
    def __init__(self, accept_lens):
        self.accept_lens = accept_lens


class EagleDraftWorker:
    def draft(self, batch):
        _work("draft")
        return None

    def _draft_extend_for_decode(self, batch, batch_output):
        _work("extend")


class EAGLEWorkerV2:
    def __init__(self, speculative_num_draft_tokens):
        self.speculative_num_draft_tokens = speculative_num_draft_tokens
        self.draft_worker = EagleDraftWorker()

    def forward_batch_generation(self, batch):
        start, end = next(_NEXT_EVENT), next(_NEXT_EVENT)
        start.record()
        self.draft_worker.draft(batch)
        batch_output = self.verify(batch)
        self.draft_worker._draft_extend_for_decode(batch, batch_output)
        end.record()
        TRUTH.append(("cycle", start, end))
        return batch_output

    def verify(self, batch):
        _work("verify")
        # v2 keeps the accept lengths on the GPU (a fresh tensor each verify): no host sync.
        return GenerationBatchResult(torch.add(_ACCEPT_LENS[: len(batch.seq_lens)], 0))
"""
)
WORKER_BY_FAMILY = {
    "v1": ("eagle_worker", "EAGLEWorker", STAND_IN_WORKER),
    "v2": ("eagle_worker_v2", "EAGLEWorkerV2", STAND_IN_WORKER_V2),
}


def write_stand_in(root: Path, family: str = "v1") -> None:
    package = root / "sglang" / "srt" / "speculative"
    package.mkdir(parents=True)
    for folder in (root / "sglang", root / "sglang" / "srt", package):
        (folder / "__init__.py").write_text(
            '__version__ = "stand-in"\n' if folder.name == "sglang" else ""
        )
    module, _, source = WORKER_BY_FAMILY[family]
    (package / f"{module}.py").write_text(source)


def write_probe(probe_dir: Path, backend: str = "sglang") -> None:
    """Copy what ``backend``'s ``probe_targets()`` ships (the runtime and its server table)."""
    from specmon.backends import get_backend

    targets = get_backend(backend).probe_targets()
    assert targets is not None, f"{backend} has no probe"
    for relative, content in targets.files.items():
        path = probe_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def calibrate(
    matrix_size: dict[str, int] = MATRIX_SIZE, target_ms: dict[str, float] = TARGET_MS
) -> dict[str, int]:
    """Matmul repetitions per phase (each phase's ``matrix_size`` square bf16 matmuls) so that
    each phase takes about its ``target_ms`` on this GPU."""
    import torch

    reps = {}
    for phase, size in matrix_size.items():
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b, c = torch.randn_like(a), torch.empty_like(a)
        for _ in range(10):
            torch.mm(a, b, out=c)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(50):
            torch.mm(a, b, out=c)
        end.record()
        end.synchronize()
        per_mm = start.elapsed_time(end) / 50
        reps[phase] = max(1, round(target_ms[phase] / per_mm))
        del a, b, c
    torch.cuda.empty_cache()
    return reps


# --- the child: drives the stand-in like SGLang's scheduler ---------------------------------


class _Batch:
    def __init__(self, size: int) -> None:
        import torch

        self.seq_lens = torch.full((size,), 100, device="cuda", dtype=torch.int64)


def child(result_path: Path) -> None:
    import importlib

    import torch

    module, class_name, _ = WORKER_BY_FAMILY[os.environ["STANDIN_FAMILY"]]
    stand_in = importlib.import_module(f"sglang.srt.speculative.{module}")
    worker_class = getattr(stand_in, class_name)
    worker = worker_class(DRAFT_TOKENS_PER_REQUEST)
    batch = _Batch(BATCH_SIZE)
    probed = hasattr(worker_class.verify, "__wrapped__")
    counts = json.loads(os.environ["STANDIN_CYCLES"])
    timings = {}
    for name, cycles, light in (
        ("warmup", WARMUP_CYCLES, False),
        ("light", counts["light"], True),
        ("heavy", counts["heavy"], False),
    ):
        stand_in.LIGHT[0] = light
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(cycles):
            worker.forward_batch_generation(batch)
        torch.cuda.synchronize()
        timings[name] = time.perf_counter() - started
    truth = [(phase, s.elapsed_time(e)) for phase, s, e in stand_in.TRUTH]
    report = {"probed": probed, "wall_s": timings, "truth": truth}
    hook = sys.modules.get("specmon_probe_hook")
    recorder = hook.recorder() if hook is not None else None
    if recorder is not None:
        recorder.close()  # write the rest now, so the writer's total time is known
        report["writer_seconds"] = recorder.flush_seconds
        report["writer_lines"] = recorder.written
    result_path.write_text(json.dumps(report))


# --- the orchestrator ---------------------------------------------------------------------------


def run_child(
    script: Path, work: Path, label: str, env_extra: dict[str, str], pythonpath: str
) -> dict:
    result_path = work / f"{label}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("SPECMON_PROBE_FILE", "PYTHONPATH")}
    env.update(env_extra)
    env["PYTHONPATH"] = pythonpath
    subprocess.run(
        [sys.executable, str(script), "--child", str(result_path)], env=env, check=True, timeout=300
    )
    return json.loads(result_path.read_text())


def truth_cycles(truth: list) -> list[dict[str, float]]:
    """Group the stand-in's events (draft, verify, extend, cycle, ...) into one dict per cycle."""
    cycles, current = [], {}
    for phase, ms in truth:
        current[phase] = ms
        if phase == "cycle":
            cycles.append(current)
            current = {}
    return cycles


def compare(records: list[dict], truth: list[dict[str, float]]) -> dict:
    """Relative differences probe vs truth per phase, over the heavy cycles."""
    fields = {
        "draft": "draft_ms",
        "verify": "verify_ms",
        "extend": "extend_ms",
        "cycle": "cycle_ms",
    }
    out = {}
    for phase, key in fields.items():
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
    parser.add_argument("--family", choices=sorted(WORKER_BY_FAMILY), default="v1")
    parser.add_argument("--light", type=int, default=LIGHT_CYCLES, help="light cycles per run")
    parser.add_argument("--heavy", type=int, default=HEAVY_CYCLES, help="heavy cycles per run")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0

    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).resolve()
    repo = script.parent.parent
    work = Path(tempfile.mkdtemp(prefix="specmon-probe-gpu-"))
    stand_in_root, probe_dir = work / "standin", work / "probe"
    write_stand_in(stand_in_root, args.family)
    sys.path.insert(0, str(repo))
    write_probe(probe_dir)
    from specmon.model.events import ProbeTiming
    from specmon.probe import launch_env
    from specmon.probe.records import parse_probe_line

    reps = calibrate()
    common = {
        "STANDIN_REPS": json.dumps(reps),
        "STANDIN_SIZE": json.dumps(MATRIX_SIZE),
        "STANDIN_EVENTS": str(8 * (WARMUP_CYCLES + args.light + args.heavy)),
        "STANDIN_FAMILY": args.family,
        "STANDIN_CYCLES": json.dumps({"light": args.light, "heavy": args.heavy}),
    }
    base_path = f"{stand_in_root}:{repo}"
    summary: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "reps": reps,
        "matrix_size": MATRIX_SIZE,
        "family": args.family,
        "cycles": {"warmup": WARMUP_CYCLES, "light": args.light, "heavy": args.heavy},
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
                warnings = [line for line in lines if '"warning"' in line]
                truth = truth_cycles(result["truth"])
                run["records"] = len(records)
                run["warnings"] = warnings
                run["clock"] = sorted({r.get("clock") for r in records})
                run["batch_size_ok"] = all(r["batch_size"] == BATCH_SIZE for r in records)
                run["draft_tokens_ok"] = all(
                    r["draft_tokens"] == BATCH_SIZE * DRAFT_TOKENS_PER_REQUEST for r in records
                )
                expected = [i % 4 for i in range(BATCH_SIZE)]
                run["accepted_per_request_ok"] = all(
                    r.get("accepted_per_request") == expected for r in records
                )
                heavy_from = WARMUP_CYCLES + args.light
                if len(records) == len(truth):
                    run["accuracy_heavy"] = compare(records[heavy_from:], truth[heavy_from:])
                    run["accuracy_light"] = compare(
                        records[WARMUP_CYCLES:heavy_from], truth[WARMUP_CYCLES:heavy_from]
                    )
                else:
                    run["accuracy_heavy"] = f"record count {len(records)} != cycles {len(truth)}"
            summary["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "warnings"}), flush=True)

    def mean_wall(kind: str, probed: bool) -> float:
        return statistics.fmean(r["wall_s"][kind] for r in summary["runs"] if r["probed"] == probed)

    heavy_off, heavy_on = mean_wall("heavy", False), mean_wall("heavy", True)
    light_off, light_on = mean_wall("light", False), mean_wall("light", True)
    summary["heavy_cycle_ms"] = {
        "without": heavy_off / args.heavy * 1e3,
        "with": heavy_on / args.heavy * 1e3,
    }
    summary["heavy_slowdown_pct"] = (heavy_on - heavy_off) / heavy_off * 100
    summary["light_cycle_us"] = {
        "without": light_off / args.light * 1e6,
        "with": light_on / args.light * 1e6,
    }
    summary["probe_cpu_cost_per_cycle_us"] = (light_on - light_off) / args.light * 1e6
    summary["probe_cost_pct_of_25ms_cycle"] = summary["probe_cpu_cost_per_cycle_us"] / 25000 * 100
    summary["writer_us_per_cycle"] = statistics.fmean(
        r["writer_us_per_cycle"] for r in summary["runs"] if "writer_us_per_cycle" in r
    )
    (args.out / f"probe_gpu_check_{args.family}.json").write_text(json.dumps(summary, indent=2))
    for key in (
        "gpu",
        "family",
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
