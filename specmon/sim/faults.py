"""Faults on demand (``SPECMON_SIM_FAULT``) and the text SGLang and PyTorch print for them."""

from __future__ import annotations

from dataclasses import dataclass

FAULT_ENV = "SPECMON_SIM_FAULT"

_KINDS: dict[str, tuple[str, ...]] = {
    "oom": ("kv", "load"),
    "nccl": ("graphs",),
    "hang": ("load", "graphs", "decode"),
    "crash": ("decode", "segv"),
}
_DEFAULT_WHERE = {"oom": "kv", "nccl": "graphs", "hang": "load", "crash": "decode"}


class FaultSpecError(ValueError):
    """An unknown ``SPECMON_SIM_FAULT`` value; the message lists the accepted ones."""


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str  # oom | nccl | hang | crash
    where: str  # phase, or "segv" for crash:segv

    def at(self, kind: str, where: str) -> bool:
        return self.kind == kind and self.where == where


def accepted_values() -> list[str]:
    values: list[str] = []
    for kind, places in _KINDS.items():
        values.append(kind)
        values.extend(f"{kind}:{where}" for where in places)
    return values


def parse_fault(value: str | None) -> Fault | None:
    """``oom`` -> Fault("oom", "kv"); empty or None -> no fault; anything else is an error."""
    if value is None or not value.strip():
        return None
    kind, _, where = value.strip().lower().partition(":")
    if kind not in _KINDS or (where and where not in _KINDS[kind]):
        raise FaultSpecError(
            f"{FAULT_ENV}={value!r} is not a fault I know; use one of: "
            + ", ".join(accepted_values())
        )
    return Fault(kind, where or _DEFAULT_WHERE[kind])


_SITE = "/usr/local/lib/python3.12/dist-packages"
_SCHED = f"{_SITE}/sglang/srt/managers/scheduler.py"


def _frames(*frames: tuple[str, int, str, str]) -> str:
    return "".join(
        f'  File "{_SITE}/{path}", line {line}, in {func}\n    {code}\n'
        for path, line, func, code in frames
    )


_SCHEDULER_INIT = (
    ("sglang/srt/managers/scheduler.py", 2960, "run_scheduler_process", "scheduler = Scheduler("),
    ("sglang/srt/managers/scheduler.py", 345, "__init__", "self.init_model_worker()"),
    ("sglang/srt/managers/scheduler.py", 512, "init_model_worker", "self.init_tp_model_worker()"),
    (
        "sglang/srt/managers/scheduler.py",
        478,
        "init_tp_model_worker",
        "self.tp_worker = TpModelWorker(",
    ),
    ("sglang/srt/managers/tp_worker.py", 247, "__init__", "self._init_model_runner()"),
    (
        "sglang/srt/managers/tp_worker.py",
        330,
        "_init_model_runner",
        "self._model_runner = ModelRunner(",
    ),
    (
        "sglang/srt/model_executor/model_runner.py",
        354,
        "__init__",
        "self.initialize(min_per_gpu_memory)",
    ),
)


def oom_traceback(
    where: str, gpu: int, tried_gib: float, total_gib: float, free_mib: float, in_use_gib: float
) -> str:
    """A scheduler rank's torch.OutOfMemoryError at weight load or KV cache allocation."""
    if where == "load":
        tail = (
            ("sglang/srt/model_executor/model_runner.py", 468, "initialize", "self.load_model()"),
            (
                "sglang/srt/model_loader/loader.py",
                612,
                "load_model",
                "model.load_weights(self._get_all_weights(model_config, model))",
            ),
            (
                "torch/utils/_device.py",
                104,
                "__torch_function__",
                "return func(*args, **kwargs)",
            ),
        )
    else:
        tail = (
            (
                "sglang/srt/model_executor/model_runner.py",
                497,
                "initialize",
                "self.init_memory_pool(",
            ),
            (
                "sglang/srt/model_executor/model_runner.py",
                1891,
                "init_memory_pool",
                "self.token_to_kv_pool = MLATokenToKVPool(",
            ),
            ("sglang/srt/mem_cache/memory_pool.py", 1078, "_create_buffers", "torch.zeros("),
        )
    allocated = in_use_gib * 0.98
    reserved = in_use_gib - allocated
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        + _frames(*_SCHEDULER_INIT, *tail)
        + f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried_gib:.2f} GiB. "
        f"GPU {gpu} has a total capacity of {total_gib:.2f} GiB of which {free_mib:.2f} MiB is "
        f"free. Including non-PyTorch memory, this process has {in_use_gib:.2f} GiB memory in "
        f"use. Of the allocated memory {allocated:.2f} GiB is allocated by PyTorch, and "
        f"{reserved * 1024:.2f} MiB is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
    )


NCCL_ERROR = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled "
    "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
    "device error. \n"
    "Last error:\n"
    "Cuda failure 'peer access is not supported between these two devices'"
)

_CAPTURE_FAILED_HELP = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)


def nccl_traceback() -> str:
    """DistBackendError inside CUDA graph capture, re-raised as SGLang's capture failure."""
    capture = (
        (
            "sglang/srt/model_executor/model_runner.py",
            512,
            "initialize",
            "self.init_device_graphs()",
        ),
        (
            "sglang/srt/model_executor/model_runner.py",
            2156,
            "init_device_graphs",
            "self.graph_runner = graph_runners[self.device](self)",
        ),
    )
    inner = (
        ("sglang/srt/model_executor/cuda_graph_runner.py", 380, "__init__", "self.capture()"),
        (
            "sglang/srt/model_executor/cuda_graph_runner.py",
            497,
            "capture",
            ") = self.capture_one_batch_size(bs, forward)",
        ),
        (
            "sglang/srt/distributed/parallel_state.py",
            519,
            "all_reduce",
            "torch.distributed.all_reduce(input_, group=self.device_group)",
        ),
        (
            "torch/distributed/distributed_c10d.py",
            2806,
            "all_reduce",
            "work = group.allreduce([tensor], opts)",
        ),
    )
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        + _frames(*inner)
        + f"torch.distributed.DistBackendError: {NCCL_ERROR}\n"
        "\nDuring handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        + _frames(*_SCHEDULER_INIT, *capture)
        + _frames(
            (
                "sglang/srt/model_executor/cuda_graph_runner.py",
                382,
                "__init__",
                "raise Exception(",
            )
        )
        + f"Exception: Capture cuda graph failed: {NCCL_ERROR}\n"
        + _CAPTURE_FAILED_HELP
    )


def context_length_traceback(target_len: int, draft_len: int) -> str:
    """The draft ModelConfig refusing the target's longer context (no env override)."""
    message = (
        f"Warning: Target model's context_length ({target_len}) is greater than the derived "
        f"context_length ({draft_len}). This may lead to incorrect model outputs or CUDA errors. "
        "Note that the derived context_length may differ from max_position_embeddings in the "
        "model's config. To allow overriding this maximum, set the env var "
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    )
    frames = (
        *_SCHEDULER_INIT[:2],  # the scheduler starting up, as for the target's faults
        (
            "sglang/srt/managers/scheduler.py",
            530,
            "init_model_worker",
            "self.draft_worker = DraftWorkerClass(",
        ),
        ("sglang/srt/speculative/eagle_worker.py", 136, "__init__", "super().__init__("),
        (
            "sglang/srt/managers/tp_worker.py",
            238,
            "__init__",
            "self.model_config = ModelConfig.from_server_args(",
        ),
        ("sglang/srt/configs/model_config.py", 250, "from_server_args", "return ModelConfig("),
        (
            "sglang/srt/configs/model_config.py",
            178,
            "__init__",
            "self._derive_context_length(context_length)",
        ),
        ("sglang/srt/configs/model_config.py", 315, "_derive_context_length", "raise ValueError("),
    )
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        + _frames(*frames)
        + f"ValueError: {message}\n"
    )


def not_enough_memory_traceback(mem_fraction_static: float) -> str:
    frames = (
        *_SCHEDULER_INIT,
        ("sglang/srt/model_executor/model_runner.py", 497, "initialize", "self.init_memory_pool("),
        (
            "sglang/srt/model_executor/model_runner.py",
            1802,
            "init_memory_pool",
            "raise RuntimeError(",
        ),
    )
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        + _frames(*frames)
        + "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: self.server_args.mem_fraction_static={mem_fraction_static}\n"
    )


def decode_crash_traceback() -> str:
    """A scheduler dying mid-decode (an illegal memory access, the usual kind)."""
    frames = (
        (
            "sglang/srt/managers/scheduler.py",
            2979,
            "run_scheduler_process",
            "scheduler.event_loop_normal()",
        ),
        ("torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
        (
            "sglang/srt/managers/scheduler.py",
            1014,
            "event_loop_normal",
            "result = self.run_batch(batch)",
        ),
        (
            "sglang/srt/managers/scheduler.py",
            2048,
            "run_batch",
            "batch_result = self.model_worker.forward_batch_generation(",
        ),
        (
            "sglang/srt/speculative/eagle_worker.py",
            301,
            "forward_batch_generation",
            "logits_output, verify_output, model_worker_batch, can_run_cuda_graph = self.verify(",
        ),
        (
            "sglang/srt/speculative/eagle_worker.py",
            702,
            "verify",
            "res: EagleVerifyOutput = spec_info.verify(",
        ),
    )
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        + _frames(*frames)
        + "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    )


SIGQUIT_LAUNCH = "Received sigquit from a child process. It usually means the child failed."
