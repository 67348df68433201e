"""vLLM: its server log (parser, summary, detection), its Prometheus ``/metrics``, its launch
rules and ``--speculative-config``, the relaunch form's fields, endpoints and the probe."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmon.backends import (
    NCCL_FORM_FIELDS,
    RUN_INFO_LABELS,
    Backend,
    DraftShape,
    FlagKind,
    FormField,
    HttpApi,
    LaunchRules,
    LogParser,
    LogSummary,
    MetricsReader,
    ProbeHook,
    ProbeTargets,
    Problem,
    ProfileFields,
    RelaunchForm,
    ServerLogs,
    Simulator,
    Tuning,
    nccl_key_flags,
)
from specmon.backends.flag_grammar import FlagValue, parse_flags, render_flag
from specmon.backends.vllm import flags as vflags
from specmon.model.quantiles import DEFAULT_WINDOW_S

if TYPE_CHECKING:
    from specmon.backends.latency import LatencyReader

# Which profile key a launch problem's subject (a flag, or a setting of the JSON) comes from.
_PROFILE_KEYS: dict[str, tuple[str, ...]] = {
    "--model": ("model_path",),
    "--tensor-parallel-size": ("tp",),
    "--port": ("port",),
    "--host": ("host_bind",),
    "--gpu-memory-utilization": ("mem_fraction_static",),
    "--speculative-config": ("speculative",),
    "method": ("speculative", "algorithm"),
    "draft_model": ("draft_model_path",),
    "num_speculative_tokens": ("speculative", "num_speculative_tokens"),
    "draft_tensor_parallel_size": ("speculative", "draft_tensor_parallel_size"),
}

# The built-in demo: the simulator's vLLM personality with the probe on (as `demo` for SGLang).
# Kept equal to the `demo-vllm` profile of the shipped specmon.toml (a test checks it).
DEMO_PROFILE_TOML = """\
[profiles.demo-vllm]
description = "The built-in simulator as vLLM: EAGLE-3, TP8, 8 simulated GPUs"
backend = "vllm"
command = ["{python}", "-m", "specmon.sim.vllm", "serve"]
model_path = "meta-llama/Llama-3.3-70B-Instruct"
draft_model_path = "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
tp = 8
host_bind = "127.0.0.1"
port = "auto"
mem_fraction_static = 0.9
probe = true
gpu_agent = "sim"
stop_grace_s = 10.0

[profiles.demo-vllm.speculative]
method = "eagle3"
num_speculative_tokens = 3

[profiles.demo-vllm.env]
SPECMON_SIM_TIME_SCALE = "0.02"
SPECMON_SIM_SHARDS = "30"
SPECMON_SIM_GPUS = "8"
"""

# vLLM's entry points: the ``vllm`` CLI's serve command and the API server modules.
_SERVE_WORDS = ("vllm", "serve")
_ENTRY_MODULE_PREFIX = "vllm.entrypoints."


class VLLMLogs(ServerLogs):
    """How its log reads."""

    loading_phases = (
        "weights",
        "draft weights",
        "torch.compile",
        "KV cache",
        "CUDA graphs",
        "HTTP server",
        "ready",
    )

    def new_log_parser(self) -> LogParser:
        from specmon.backends.vllm.parser import VLLMLogParser

        return VLLMLogParser()

    def new_log_summary(self) -> LogSummary:
        from specmon.backends.vllm.summary import VLLMLogSummary

        return VLLMLogSummary()

    def detect_log(self, sample: str) -> float:
        from specmon.backends.vllm.detect import vllm_log_score

        score = vllm_log_score(sample)
        return score if score > 0.5 else 0.0  # 0.5: no line voted either way


def _profile_spec_config(text: str) -> dict[str, Any] | None:
    """A ``--speculative-config`` value as a profile's keys (method, model and its numbers), or
    None when a profile cannot say it: another key, a method it may not name, a number that
    is not a positive whole number, numbers without a method."""
    config, problem = vflags.read_spec_config(text)
    numbers = ("num_speculative_tokens", "draft_tensor_parallel_size")
    if problem or not config or set(config) - {"method", "model", *numbers}:
        return None
    method = config.get("method")
    if method is not None and method not in vflags.METHODS:
        return None
    if "model" in config and not (isinstance(config["model"], str) and config["model"]):
        return None
    for key in numbers:
        if key in config and not (type(config[key]) is int and config[key] > 0):
            return None
    if method is None and any(key in config for key in numbers):
        return None
    return config


class VLLMLaunch(LaunchRules):
    """How a profile becomes its command line, and what may run."""

    default_command = _SERVE_WORDS
    env_prefixes = ("VLLM_",)
    default_speculative_algorithm = "eagle3"
    speculative_keys = (
        ("method", "algorithm"),
        ("num_speculative_tokens", "num_speculative_tokens"),
        ("draft_tensor_parallel_size", "draft_tensor_parallel_size"),
    )
    default_port = 8000
    process_words = ("vllm",)

    def command_matches(self, command: Sequence[str]) -> bool:
        words = list(command)
        for i, word in enumerate(words):
            if word.rsplit("/", 1)[-1] == "vllm" and words[i + 1 : i + 2] == ["serve"]:
                return True
            if word.startswith(_ENTRY_MODULE_PREFIX):
                return True
        return False

    def profile_command(self, command: Sequence[str], profile: ProfileFields) -> tuple[str, ...]:
        """``vllm serve`` takes the model as its positional argument; module entry points
        take ``--model`` (profile_args adds it)."""
        if command and command[-1] == "serve":
            return (*command, profile.model_path)
        return tuple(command)

    def profile_args(self, profile: ProfileFields) -> tuple[str, ...]:
        args: list[str] = []
        if not (profile.command and profile.command[-1] == "serve"):
            args += render_flag("model", profile.model_path)
        if profile.tp is not None:
            args += render_flag("tensor-parallel-size", str(profile.tp))
        if profile.host_bind is not None:
            args += render_flag("host", profile.host_bind)
        if profile.port is not None:
            args += render_flag("port", str(profile.port))
        if profile.mem_fraction_static is not None:
            args += render_flag("gpu-memory-utilization", repr(profile.mem_fraction_static))
        config: dict[str, Any] = {}
        spec = profile.speculative
        if spec is not None:
            config["method"] = spec.algorithm
        if profile.draft_model_path is not None:
            config["model"] = profile.draft_model_path
        if spec is not None:
            if spec.num_speculative_tokens is not None:
                config["num_speculative_tokens"] = spec.num_speculative_tokens
            if spec.draft_tensor_parallel_size is not None:
                config["draft_tensor_parallel_size"] = spec.draft_tensor_parallel_size
        if config:
            args += render_flag(vflags.SPEC_CONFIG_FLAG, vflags.spec_config_json(config))
        args += profile.extra_args
        return tuple(args)

    def profile_from_argv(self, argv: Sequence[str]) -> dict[str, Any]:
        """``vllm serve MODEL`` (or an entry module's ``--model``) and the flags
        ``profile_args`` renders, read back; ``--speculative-config`` when its JSON holds only
        the keys a profile sets (method, model, num_speculative_tokens,
        draft_tensor_parallel_size), with a method a profile may name. ``serve --model M``
        becomes ``serve M`` (the profile's form; vLLM reads both alike)."""
        from specmon.backends.profile_argv import (
            Field,
            as_float,
            as_int,
            as_text,
            nest,
            split_words,
            take_flags,
        )
        from specmon.model.errors import UsageError

        command, tail = split_words(argv)
        model: str | None = None
        if "serve" in command:
            at = command.index("serve")
            after = command[at + 1 :]
            if len(after) > 1:
                raise UsageError(f"its command line has words after the model: {after[1]!r:.60}")
            command, model = command[: at + 1], (after[0] if after else None)
        fields = {
            "tensor-parallel-size": Field(("tp",), as_int),
            "host": Field(("host_bind",), as_text),
            "port": Field(("port",), as_int),
            "gpu-memory-utilization": Field(("mem_fraction_static",), as_float),
            vflags.SPEC_CONFIG_FLAG: Field(("speculative-config",), _profile_spec_config),
        }
        if model is None:
            fields["model"] = Field(("model_path",), as_text)

        def setting_of(name: str) -> str:
            normal = vflags.normal_name(name)
            return vflags.SPEC_CONFIG_FLAG if normal in vflags.SHORTCUTS else normal

        taken, rest = take_flags(tail, fields, setting_of)
        if model is not None:
            taken[("model_path",)] = model
        if ("model_path",) not in taken:
            raise UsageError("its command line names no model (serve MODEL, or --model)")
        config = taken.pop(("speculative-config",), None)
        if isinstance(config, dict):
            for key, value in config.items():
                path = ("draft_model_path",) if key == "model" else ("speculative", key)
                taken[path] = value
        return {"command": command, **nest(taken), "extra_args": rest}

    def profile_key_of(self, subject: str) -> tuple[str, ...] | None:
        return _PROFILE_KEYS.get(subject) or _PROFILE_KEYS.get(subject.lstrip("-"))

    def flag_kind(self, name: str) -> FlagKind | None:
        return vflags.flag_kind(name)

    def setting_flags(
        self, args: Sequence[str], changes: Mapping[str, FlagValue]
    ) -> dict[str, FlagValue]:
        return vflags.setting_flags(args, changes)

    def setting_value(self, args: Sequence[str], name: str) -> str | None:
        return vflags.setting_value(args, name)

    def launch_problems(self, args: Sequence[str], env: Mapping[str, str]) -> list[Problem]:
        return vflags.vllm_launch_problems(args, env)

    def env_value_problem(self, name: str, value: str) -> str | None:
        return vflags.env_value_problem(name, value)

    def speculative_algorithms(self) -> tuple[str, ...]:
        return vflags.METHODS

    def speculation_flags(self, args: Sequence[str]) -> frozenset[str]:
        wanted = {vflags.SPEC_CONFIG_FLAG, *vflags.SHORTCUTS}
        return frozenset(
            item.name for item in parse_flags(args)[0] if vflags.normal_name(item.name) in wanted
        )

    def key_flags(self, args: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
        values: dict[str, str] = {}
        for item in parse_flags(args)[0]:
            values[vflags.normal_name(item.name)] = "" if item.value is None else item.value
        config, _ = vflags.read_spec_config(values.get(vflags.SPEC_CONFIG_FLAG))
        for flag, key in vflags.SHORTCUTS.items():
            if values.get(flag):
                config.setdefault(key, values[flag])
        method = config.get("method") or ("draft model" if config.get("model") else None)
        out: dict[str, str] = {"algorithm": str(method) if method else "off"}
        out["spec"] = out["algorithm"]
        if config.get("num_speculative_tokens") is not None:
            out["k"] = str(config["num_speculative_tokens"])
        if values.get("tensor-parallel-size"):
            out["tp"] = values["tensor-parallel-size"]
        if config.get("draft_tensor_parallel_size") is not None:
            out["draft_tp"] = str(config["draft_tensor_parallel_size"])
        if values.get("gpu-memory-utilization"):
            out["mem_fraction"] = values["gpu-memory-utilization"]
        out.update(nccl_key_flags(env))
        return out

    def run_info_labels(self, argv: Sequence[str]) -> dict[str, str]:
        """The model is ``--model`` or ``serve``'s positional argument; the speculative labels
        come from ``--speculative-config`` (and its shortcut flags): the method, its draft
        model, k = num_speculative_tokens draft steps of one candidate each (a token tree: its
        widest branching), and k + 1 tokens verified (the drafts and the bonus token)."""
        words = list(argv)
        values: dict[str, str] = {}
        for item in parse_flags(words)[0]:
            values[vflags.normal_name(item.name)] = "" if item.value is None else item.value
        model = values.get("model", "")
        for i, word in enumerate(words[:-1]):
            if word == "serve" and not words[i + 1].startswith("-"):
                model = model or words[i + 1]
                break
        config, _ = vflags.read_spec_config(values.get(vflags.SPEC_CONFIG_FLAG))
        for flag, key in vflags.SHORTCUTS.items():
            if values.get(flag):
                config.setdefault(key, values[flag])
        labels = dict.fromkeys(RUN_INFO_LABELS, "")
        labels["model"] = model
        labels["tp"] = values.get("tensor-parallel-size", "")
        method = config.get("method") or ("draft_model" if config.get("model") else "")
        if not method:
            return labels
        shape = self.draft_shape(words, {}, {})
        labels["spec_algorithm"] = str(method)
        labels["draft_model"] = str(config.get("model") or "")
        for label, value in (
            ("spec_steps", shape.steps),
            ("spec_topk", shape.topk),
            ("spec_draft_tokens", shape.verify_tokens),
        ):
            labels[label] = "" if value is None else str(value)
        return labels


class VLLMForm(RelaunchForm):
    """The relaunch form's fields."""

    def form_fields(self) -> tuple[FormField, ...]:
        return (
            FormField("method", choices=vflags.METHODS, label="method"),
            FormField("draft_model", label="draft model"),
            FormField("num_speculative_tokens", label="num speculative tokens"),
            FormField("draft_tensor_parallel_size", label="draft TP"),
            FormField("gpu-memory-utilization", label="GPU memory utilisation"),
            *NCCL_FORM_FIELDS,
        )

    def form_context_args(self, base_args: Sequence[str] | None) -> list[str]:
        if base_args is None:
            return []
        keep = {"tensor-parallel-size", vflags.SPEC_CONFIG_FLAG, *vflags.SHORTCUTS}
        args: list[str] = []
        for item in parse_flags(base_args)[0]:
            if vflags.normal_name(item.name) in keep and item.value is not None:
                args += render_flag(item.name, item.value)
        return args

    def form_fixed_subjects(self) -> frozenset[str]:
        return frozenset({"--model", "--tensor-parallel-size"})


class VLLMHttp(HttpApi):
    """Its HTTP endpoints."""

    health_path = "/health"
    info_paths = ("/v1/models", "/version")
    info_merged = True  # the served model from one, the version from the other
    metrics_path = "/metrics"
    metric_prefix = "vllm:"
    accept_length_metric = None  # vLLM exports counters; the length is their rate ratio
    generate_path = "/v1/completions"
    probe_paths = ("/version", "/v1/models")

    def http_likeness(self, answers: Mapping[str, Any]) -> float:
        """A model card ``owned_by`` vllm is sure; a bare ``/version`` beside an OpenAI model
        list (and no SGLang server info) is likely."""
        models = answers.get("/v1/models")
        cards = models.get("data") if isinstance(models, dict) else None
        if isinstance(cards, list) and any(
            isinstance(card, dict) and card.get("owned_by") == "vllm" for card in cards[:8]
        ):
            return 1.0
        version = answers.get("/version")
        if isinstance(version, dict) and isinstance(version.get("version"), str):
            return 0.5 if isinstance(cards, list) else 0.3
        return 0.0

    def ready_on_health(self, status: int | None) -> bool:
        return status == 200  # 503: the engine died (vLLM refuses connections while loading)

    def bench_info(self, data: Any) -> dict[str, Any]:
        """``/version`` gives the version; ``/v1/models`` the served model (its ``root``, the
        path it was loaded from, else its name) and max_model_len."""
        if not isinstance(data, dict):
            return {}
        info: dict[str, Any] = {}
        if isinstance(data.get("version"), str):
            info["version"] = data["version"]
        models = data.get("data")
        if isinstance(models, list) and models and isinstance(models[0], dict):
            model = models[0]
            name = model.get("root") or model.get("id")
            if name is not None:
                info["model_path"] = str(name)
            if model.get("max_model_len") is not None:
                info["max_model_len"] = model["max_model_len"]
        return info

    def server_info_values(self, data: Any) -> tuple[tuple[str, str], ...]:
        if not isinstance(data, dict):
            return ()
        values: list[tuple[str, str]] = []
        if isinstance(data.get("version"), str):
            values.append(("version", data["version"]))
        models = data.get("data")
        if isinstance(models, list):
            for model in models[:4]:
                if isinstance(model, dict) and model.get("id") is not None:
                    values.append(("model", str(model["id"])))
                    root = model.get("root")
                    if root is not None and str(root) != str(model["id"]):
                        # where it was loaded from: the model the benchmarks record
                        values.append(("model_path", str(root)))
                    if model.get("max_model_len") is not None:
                        values.append(("max_model_len", str(model["max_model_len"])))
        return tuple(values)

    def generate_body(self, text: str, max_tokens: int, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": text,
            "max_tokens": max_tokens,
            "min_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def generate_meta(self, reply: Any) -> dict[str, Any] | None:
        if not isinstance(reply, dict):
            return None
        meta: dict[str, Any] = {}
        usage = reply.get("usage")
        if isinstance(usage, dict):
            for key in ("completion_tokens", "prompt_tokens"):
                if isinstance(usage.get(key), int):
                    meta[key] = usage[key]
        choice = _first_choice(reply)
        reason = choice.get("finish_reason") if choice else None
        if isinstance(reason, str):
            meta["finish_reason"] = {"type": reason}
        error = reply.get("error")
        if isinstance(error, dict):
            meta["finish_reason"] = {"type": "abort", "message": str(error.get("message", ""))}
        return meta or None

    def generate_text(self, reply: Any) -> str:
        choice = _first_choice(reply)
        text = choice.get("text") if choice else None
        return text if isinstance(text, str) else ""

    def metric_sample_kept(self, name: str) -> bool:
        return name.startswith(self.metric_prefix) and not name.endswith(("_bucket", "_created"))

    def new_metrics_reader(self) -> MetricsReader | None:
        from specmon.backends.vllm.metrics import VLLMMetricsReader

        return VLLMMetricsReader()

    def new_latency_reader(
        self, argv: Sequence[str] = (), window_s: float = DEFAULT_WINDOW_S
    ) -> LatencyReader | None:
        from specmon.backends.vllm.metrics import new_latency_reader

        return new_latency_reader(argv, window_s)

    def accept_length_between(self, before: str, after: str) -> float | None:
        """1 + accepted / drafts over the interval, as vLLM's docs define it."""
        from specmon.backends.vllm.metrics import (
            MetricsTextError,
            parse_metrics,
            spec_decode_rates,
        )

        try:
            rates = spec_decode_rates(parse_metrics(before, 0.0), parse_metrics(after, 1.0))
        except MetricsTextError:
            return None
        return None if rates is None else rates.mean_accept_len

    def speculation_in_metrics(self, text: str) -> bool | None:
        """vLLM exports its spec_decode counters only when a speculative config is set."""
        from specmon.backends.vllm.metrics import MetricsTextError, parse_metrics

        try:
            snapshot = parse_metrics(text, 0.0)
        except MetricsTextError:
            return None
        return snapshot.spec_decode if snapshot.engines else None


class VLLMTuning(Tuning):
    """The draft's shape and what a step count decides."""

    steps_setting = "num_speculative_tokens"  # a key of --speculative-config (setting_flags)
    has_extend_phase = False  # draft, then verify: no draft-extend pass as SGLang's

    def draft_shape(
        self, args: Sequence[str], env: Mapping[str, str], server_info: Mapping[str, str]
    ) -> DraftShape:
        """A chain of ``num_speculative_tokens`` (k) drafts: topk 1, and the verify checks the
        k drafts plus the bonus token, k + 1. vLLM's info endpoints do not report the draft,
        so the launch says. A ``speculative_token_tree`` drafts a tree: its widest branching
        is the topk (the advisor refuses trees)."""
        flags = self.key_flags(args, env)
        if flags.get("algorithm") == "off":
            return DraftShape(steps=0, topk=1, verify_tokens=1)
        k_text = flags.get("k", "")
        k = int(k_text) if k_text.isdigit() else None
        tree = vflags.token_tree(args)
        if tree is not None:
            return DraftShape(steps=k, topk=tree[0], verify_tokens=tree[1] + 1)
        return DraftShape(steps=k, topk=1, verify_tokens=None if k is None else k + 1)


class VLLMProbe(ProbeHook):
    """The in-server timing probe."""

    def probe_draft_positions(self, draft_tokens: int, batch_size: int) -> int:
        """vLLM's probe counts the scheduled draft tokens, k per request, without a root."""
        return draft_tokens // batch_size

    def probe_targets(self) -> ProbeTargets | None:
        from specmon.probe import injection_files

        # probe_hook.py is vLLM's table; the runtime started by sitecustomize.py loads it.
        tables = {"specmon_probe_vllm": "specmon.backends.vllm.probe_hook"}
        return ProbeTargets(files=injection_files(tables))

    def probe_source_report(self, path: Path) -> tuple[str, bool] | None:
        from specmon.backends.vllm.check_source import (
            check_vllm_source,
            format_vllm_report,
            is_vllm_tree,
        )

        if not is_vllm_tree(path):
            return None
        report = check_vllm_source(path)
        return format_vllm_report(report), report.fully_works


class VLLMSim(Simulator):
    """The simulator personality that stands in for it."""

    sim_module = "specmon.sim.vllm"
    builtin_profiles_toml = DEMO_PROFILE_TOML


class VLLMBackend(
    VLLMLogs, VLLMLaunch, VLLMForm, VLLMHttp, VLLMTuning, VLLMProbe, VLLMSim, Backend
):
    """VLLM's facets together: the registry's entry for this server."""

    name = "vllm"
    display_name = "vLLM"


def _first_choice(reply: Any) -> dict[str, Any] | None:
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None
