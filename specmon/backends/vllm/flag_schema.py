"""vLLM's common ``vllm serve`` flags, by kind: which are bare switches and which take a value.

Read from ``vllm/engine/arg_utils.py`` and ``vllm/entrypoints/openai/cli_args.py`` of the
0.10 to 0.33 releases (docs/vllm.md). vLLM has hundreds of flags; these are the ones a
speculative-decoding launch commonly sets. A flag outside both sets is passed through
unchecked (vLLM's own argparse judges it), so the schema only decides how a value given
for a known flag is rendered: ``true`` for a switch becomes the bare flag.
"""

from __future__ import annotations

# Bare switches (``store_true``, or the positive/negative spellings of a BooleanOptionalAction).
BOOLEAN_FLAGS: frozenset[str] = frozenset(
    {
        "async-scheduling",
        "no-async-scheduling",
        "disable-custom-all-reduce",
        "disable-fastapi-docs",
        "disable-frontend-multiprocessing",
        "disable-log-requests",
        "disable-log-stats",
        "disable-sliding-window",
        "disable-uvicorn-access-log",
        "enable-auto-tool-choice",
        "enable-chunked-prefill",
        "no-enable-chunked-prefill",
        "enable-eplb",
        "enable-expert-parallel",
        "enable-log-requests",
        "enable-lora",
        "enable-prefix-caching",
        "no-enable-prefix-caching",
        "enable-prompt-tokens-details",
        "enable-server-load-tracking",
        "enable-sleep-mode",
        "enforce-eager",
        "headless",
        "skip-tokenizer-init",
        "trust-remote-code",
    }
)

# Flags that take one value (or, for a few, several words).
VALUED_FLAGS: frozenset[str] = frozenset(
    {
        "api-key",
        "api-server-count",
        "attention-backend",
        "block-size",
        "chat-template",
        "compilation-config",
        "cpu-offload-gb",
        "cuda-graph-sizes",
        "data-parallel-address",
        "data-parallel-rpc-port",
        "data-parallel-size",
        "data-parallel-size-local",
        "distributed-executor-backend",
        "download-dir",
        "dtype",
        "generation-config",
        "gpu-memory-utilization",
        "hf-overrides",
        "host",
        "kv-cache-dtype",
        "kv-transfer-config",
        "limit-mm-per-prompt",
        "load-format",
        "max-log-len",
        "max-logprobs",
        "max-model-len",
        "max-num-batched-tokens",
        "max-num-seqs",
        "model",
        "pipeline-parallel-size",
        "port",
        "quantization",
        "reasoning-parser",
        "revision",
        "root-path",
        "seed",
        "served-model-name",
        "spec-method",
        "spec-model",
        "spec-tokens",
        "speculative-config",
        "swap-space",
        "tensor-parallel-size",
        "tokenizer",
        "tokenizer-mode",
        "tool-call-parser",
        "uvicorn-log-level",
    }
)

# V0 speculative flags that vLLM removed, and what replaced each.
REMOVED_FLAGS: dict[str, str] = {
    "speculative-model": '"model" in --speculative-config (or --spec-model on 0.33+)',
    "num-speculative-tokens": (
        '"num_speculative_tokens" in --speculative-config (or --spec-tokens on 0.33+)'
    ),
    "speculative-draft-tensor-parallel-size": '"draft_tensor_parallel_size" in --speculative-config',
    "speculative-disable-by-batch-size": '"disable_by_batch_size" in --speculative-config',
    "ngram-prompt-lookup-max": '"prompt_lookup_max" in --speculative-config',
    "ngram-prompt-lookup-min": '"prompt_lookup_min" in --speculative-config',
    "speculative-max-model-len": '"max_model_len" in --speculative-config',
    "speculative-disable-mqa-scorer": "nothing (the V1 engine has no MQA scorer); leave it out",
    "spec-decoding-acceptance-method": "nothing (V1 always uses the rejection sampler); leave it out",
    "typical-acceptance-sampler-posterior-threshold": "nothing (removed with V0); leave it out",
    "typical-acceptance-sampler-posterior-alpha": "nothing (removed with V0); leave it out",
    "use-v2-block-manager": "nothing (removed with V0); leave it out",
}
