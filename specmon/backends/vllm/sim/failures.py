"""What vLLM 0.33 prints when it fails (vllm.md §7): the failing process's traceback, the
engine core's, and the API server's uncaught ``Engine core initialization failed`` last."""

from __future__ import annotations

_SITE = "/usr/local/lib/python3.12/dist-packages"

ENGINE_INIT_FAILED = (
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {'EngineCore': 1}"
)
WORKER_INIT_FAILED = (
    "Exception: WorkerProc initialization failed due to an exception in a background "
    "process. See stack trace for root cause."
)
ENGINE_DEAD = (
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
    "trace (above) for the root cause."
)
SHM_WAIT = (
    "No available shared memory broadcast block found in 60 seconds. This typically happens "
    "when some processes are hanging or doing some time-consuming work (e.g. compilation, "
    "weight/kv cache quantization)."
)
NCCL_ERROR = "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
ILLEGAL_ACCESS = (
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)


def _frames(*frames: tuple[str, int, str, str]) -> str:
    return "".join(
        f'  File "{_SITE}/vllm/{path}", line {line}, in {func}\n    {code}\n'
        for path, line, func, code in frames
    )


# EngineCore's start, the top of every start-up failure it reports.
_ENGINE_CORE_START: tuple[tuple[str, int, str, str], ...] = (
    ("v1/engine/core.py", 1575, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
    ("v1/engine/core.py", 833, "__init__", "super().__init__("),
)


def traceback(frames: str, last: str) -> str:
    return f"Traceback (most recent call last):\n{frames}{last}"


_WORKER_INIT = (
    (
        "v1/executor/multiproc_executor.py",
        981,
        "worker_main",
        "worker = WorkerProc(*args, **kwargs)",
    ),
    ("v1/executor/multiproc_executor.py", 742, "__init__", "self.worker.load_model()"),
    (
        "v1/worker/gpu_worker.py",
        353,
        "load_model",
        "self.model_runner.load_model(eep_scale_up=eep_scale_up)",
    ),
)


def load_oom(gpu: int, tried_gib: float, total_gib: float, free_mib: float) -> str:
    """The worker's traceback when the weights do not fit (`Failed to load model ...`)."""
    cuda = (
        f"CUDA out of memory. Tried to allocate {tried_gib:.2f} GiB. GPU {gpu} has a total "
        f"capacity of {total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Including "
        "non-PyTorch memory, this process has "
        f"{total_gib - free_mib / 1024:.2f} GiB memory in use."
    )
    frames = _frames(
        *_WORKER_INIT,
        ("v1/worker/gpu/model_runner.py", 412, "load_model", "raise ValueError("),
    )
    return traceback(
        frames,
        "ValueError: Failed to load model - not enough GPU memory. Try lowering "
        "--gpu-memory-utilization to free memory for weights, increasing "
        "--tensor-parallel-size, or using --quantization. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. "
        f"(original error: {cuda})",
    )


def worker_nccl() -> str:
    """The worker's traceback when an all-reduce fails during CUDA graph capture."""
    frames = _frames(
        (
            "v1/executor/multiproc_executor.py",
            1055,
            "_execute_worker_rpc",
            "output = func(*args, **kwargs)",
        ),
        (
            "v1/worker/gpu_worker.py",
            958,
            "compile_or_warm_up_model",
            "self.model_runner.capture_model()",
        ),
        ("v1/worker/gpu/model_runner.py", 1141, "capture_model", "self.cudagraph_manager.capture("),
        (
            "distributed/device_communicators/pynccl.py",
            233,
            "all_reduce",
            "self.nccl.ncclAllReduce(",
        ),
        (
            "distributed/device_communicators/pynccl_wrapper.py",
            412,
            "NCCL_CHECK",
            'raise RuntimeError(f"NCCL error: {error_str}")',
        ),
    )
    return traceback(frames, NCCL_ERROR)


def engine_init(root: str) -> str:
    """EngineCore's `EngineCore failed to start.` traceback, ending in ``root``."""
    frames = _frames(
        *_ENGINE_CORE_START,
        (
            "v1/engine/core.py",
            126,
            "__init__",
            "num_gpu_blocks, num_cpu_blocks, kv_cache_config = self._initialize_kv_caches(",
        ),
        (
            "v1/engine/core.py",
            247,
            "_initialize_kv_caches",
            "kv_cache_configs = get_kv_cache_configs(",
        ),
        (
            "v1/core/kv_cache_utils.py",
            1402,
            "get_kv_cache_configs",
            "check_enough_kv_cache_memory(",
        ),
    )
    return traceback(frames, root)


def engine_after_worker(worker_error: str) -> str:
    """EngineCore's traceback when a worker failed (it points at the worker's)."""
    frames = _frames(
        *_ENGINE_CORE_START,
        ("v1/engine/core.py", 112, "__init__", "self.model_executor = executor_class(vllm_config)"),
        (
            "v1/executor/multiproc_executor.py",
            178,
            "_init_executor",
            "self.workers = WorkerProc.wait_for_ready(unready_workers)",
        ),
    )
    if worker_error:
        return traceback(
            frames,
            f"RuntimeError: Worker failed with error '{worker_error}', please check the stack "
            "trace above for the root cause",
        )
    return traceback(frames, WORKER_INIT_FAILED)


def api_server_init() -> str:
    """The API server's uncaught exception (printed by Python, no vLLM prefix)."""
    return (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/vllm", line 10, in <module>\n'
        "    sys.exit(main())\n"
        + _frames(
            ("entrypoints/cli/main.py", 73, "main", "args.dispatch_function(args)"),
            ("entrypoints/cli/serve.py", 60, "cmd", "uvloop.run(run_server(args))"),
            (
                "entrypoints/openai/api_server.py",
                1898,
                "run_server",
                "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
            ),
            ("v1/engine/utils.py", 1003, "wait_for_engine_startup", "raise RuntimeError("),
        )
        + ENGINE_INIT_FAILED
        + "\n"
    )


def kv_too_small(max_len: int, needed_gib: float, available_gib: float, estimate: int) -> str:
    return (
        f"ValueError: To serve at least one request with the model's max seq len ({max_len}), "
        f"({needed_gib:.2f} GiB KV cache is needed, which is larger than the available KV "
        f"cache memory ({available_gib:.2f} GiB). Based on the available memory, the estimated "
        f"maximum model length is {estimate}. Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine."
    )


NO_CACHE_MEMORY = (
    "ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine."
)


def decode_crash() -> str:
    """A worker's exception during decode (illegal memory access in the proposer)."""
    frames = _frames(
        (
            "v1/executor/multiproc_executor.py",
            1055,
            "_execute_worker_rpc",
            "output = func(*args, **kwargs)",
        ),
        (
            "v1/worker/gpu_worker.py",
            1298,
            "sample_tokens",
            "return self.model_runner.sample_tokens(grammar_output)",
        ),
        (
            "v1/worker/gpu_model_runner.py",
            4365,
            "propose_draft_token_ids",
            "self._draft_token_ids = self.propose_draft_token_ids(",
        ),
        (
            "v1/spec_decode/llm_base_proposer.py",
            550,
            "propose",
            "target_hidden_states = self.model.combine_hidden_states(",
        ),
    )
    return traceback(frames, ILLEGAL_ACCESS)


def engine_fatal(worker_error: str) -> str:
    frames = _frames(
        ("v1/engine/core.py", 1589, "run_engine_core", "engine_core.run_busy_loop()"),
        ("v1/engine/core.py", 1003, "run_busy_loop", "self._process_engine_step()"),
        ("v1/executor/multiproc_executor.py", 381, "collective_rpc", "raise RuntimeError("),
    )
    return traceback(
        frames,
        f"RuntimeError: Worker failed with error '{worker_error}', please check the stack "
        "trace above for the root cause",
    )


def output_handler() -> str:
    frames = _frames(
        (
            "v1/engine/async_llm.py",
            849,
            "output_handler",
            "outputs = await engine_core.get_output_async()",
        ),
        (
            "v1/engine/core_client.py",
            1235,
            "get_output_async",
            "raise self._format_exception(outputs) from None",
        ),
    )
    return "AsyncLLM output_handler failed.\n" + traceback(frames, ENGINE_DEAD)


def launch_error(last: str) -> str:
    """The API server's traceback for a config vLLM refuses before starting the engine."""
    return (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/vllm", line 10, in <module>\n'
        "    sys.exit(main())\n"
        + _frames(
            ("entrypoints/cli/main.py", 73, "main", "args.dispatch_function(args)"),
            ("entrypoints/cli/serve.py", 60, "cmd", "uvloop.run(run_server(args))"),
            (
                "engine/arg_utils.py",
                1712,
                "create_engine_config",
                "speculative_config = self.create_speculative_config(",
            ),
        )
        + last
        + "\n"
    )
