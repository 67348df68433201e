"""SGLang: log parser, flag schema and launch rules, form fields, endpoints, metrics, probe."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmon.backends import (
    NCCL_FORM_FIELDS,
    Backend,
    DraftShape,
    FlagKind,
    FormField,
    HttpApi,
    LaunchRules,
    LogParser,
    LogSummary,
    MetricsReader,
    NodePlacement,
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
from specmon.backends.flag_grammar import parse_flags, render_flag
from specmon.backends.sglang.flags import DRAFT_MODEL_FLAGS, TP_FLAGS
from specmon.model.quantiles import DEFAULT_WINDOW_S

if TYPE_CHECKING:
    from specmon.backends.latency import LatencyReader

# /server_info fields the console shows (internal_states[0] flattened in).
INFO_KEYS = (
    "version",
    "model_path",
    "tp_size",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "mem_fraction_static",
    "max_total_num_tokens",
    "last_gen_throughput",
    "avg_spec_accept_length",
)

# Header keys -> the flags that set them (first one found wins).
_KEY_FLAG_NAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("steps", ("speculative-num-steps",)),
    ("topk", ("speculative-eagle-topk",)),
    ("draft_tokens", ("speculative-num-draft-tokens",)),
    ("tp", ("tp", "tp-size", "tensor-parallel-size")),
    ("mem_fraction", ("mem-fraction-static",)),
)

# Run-info label -> the flags that set it (first one set wins): SGLang's flags say each as
# the label means it (its num-draft-tokens counts the verified root with the drafts).
_RUN_INFO_FLAGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", ("model-path", "model")),
    ("draft_model", DRAFT_MODEL_FLAGS),
    ("spec_algorithm", ("speculative-algorithm",)),
    ("spec_steps", ("speculative-num-steps",)),
    ("spec_topk", ("speculative-eagle-topk",)),
    ("spec_draft_tokens", ("speculative-num-draft-tokens",)),
    ("tp", TP_FLAGS),
)

# Which profile key a launch problem's subject (flag) comes from.
_PROFILE_KEYS = {
    "--model-path": ("model_path",),
    "--speculative-draft-model-path": ("draft_model_path",),
    "--tp": ("tp",),
    "--port": ("port",),
    "--host": ("host_bind",),
    "--speculative-algorithm": ("speculative", "algorithm"),
    "--speculative-num-steps": ("speculative", "num_steps"),
    "--speculative-eagle-topk": ("speculative", "eagle_topk"),
    "--speculative-num-draft-tokens": ("speculative", "num_draft_tokens"),
    "--mem-fraction-static": ("mem_fraction_static",),
}

_LAUNCH_COMMAND = re.compile(r"(^|\s)-m\s+sglang\.launch_server(\s|$)|(^|/)sglang\.launch_server")


class SGLangLogs(ServerLogs):
    """How its log reads."""

    def new_log_parser(self) -> LogParser:
        from specmon.backends.sglang.parser import SGLangLogParser

        return SGLangLogParser()

    def new_log_summary(self) -> LogSummary:
        from specmon.backends.sglang.summary import SGLangLogSummary

        return SGLangLogSummary()

    def detect_log(self, sample: str) -> float:
        from specmon.backends.sglang.detect import sglang_log_confidence

        return sglang_log_confidence(sample)


class SGLangLaunch(LaunchRules):
    """How a profile becomes its command line, and what may run."""

    default_command = ("{python}", "-m", "sglang.launch_server")
    env_prefixes = ("SGLANG_",)
    default_speculative_algorithm = "EAGLE3"
    default_port = 30000
    process_words = ("sglang",)

    def command_matches(self, command: Sequence[str]) -> bool:
        return bool(_LAUNCH_COMMAND.search(" ".join(command)))

    def profile_args(self, profile: ProfileFields) -> tuple[str, ...]:
        args: list[str] = [*render_flag("model-path", profile.model_path)]
        if profile.tp is not None:
            args += render_flag("tp", str(profile.tp))
        if profile.host_bind is not None:
            args += render_flag("host", profile.host_bind)
        if profile.port is not None:
            args += render_flag("port", str(profile.port))
        spec = profile.speculative
        if spec is not None:
            args += render_flag("speculative-algorithm", spec.algorithm)
        if profile.draft_model_path is not None:
            args += render_flag("speculative-draft-model-path", profile.draft_model_path)
        if spec is not None:
            for name, value in (
                ("speculative-num-steps", spec.num_steps),
                ("speculative-eagle-topk", spec.eagle_topk),
                ("speculative-num-draft-tokens", spec.num_draft_tokens),
            ):
                if value is not None:
                    args += render_flag(name, str(value))
        if profile.mem_fraction_static is not None:
            args += render_flag("mem-fraction-static", repr(profile.mem_fraction_static))
        args += profile.extra_args
        return tuple(args)

    def profile_from_argv(self, argv: Sequence[str]) -> dict[str, Any]:
        """The flags ``profile_args`` renders, read back (each once, its value as the profile
        writes it); the speculative numbers only with the algorithm (the profile renders them
        only then). TP and the draft model count as one setting whatever their spelling."""
        from specmon.backends.profile_argv import (
            Field,
            as_float,
            as_int,
            as_text,
            nest,
            split_words,
            take_flags,
        )
        from specmon.backends.sglang.flags import flag_name_as_read
        from specmon.model.errors import UsageError

        command, tail = split_words(argv)
        algorithms = self.speculative_algorithms()
        fields = {
            "model-path": Field(("model_path",), as_text),
            "tp": Field(("tp",), as_int),
            "host": Field(("host_bind",), as_text),
            "port": Field(("port",), as_int),
            "speculative-algorithm": Field(
                ("speculative", "algorithm"), lambda v: v if v in algorithms else None
            ),
            "speculative-draft-model-path": Field(("draft_model_path",), as_text),
            "mem-fraction-static": Field(("mem_fraction_static",), as_float),
        }
        numbers = {
            "speculative-num-steps": Field(("speculative", "num_steps"), as_int),
            "speculative-eagle-topk": Field(("speculative", "eagle_topk"), as_int),
            "speculative-num-draft-tokens": Field(("speculative", "num_draft_tokens"), as_int),
        }

        def setting_of(name: str) -> str:
            if name in TP_FLAGS:
                return "tp"
            if name in DRAFT_MODEL_FLAGS:
                return "speculative-draft-model-path"
            return flag_name_as_read(name)

        taken, _ = take_flags(tail, fields, setting_of)
        if ("speculative", "algorithm") in taken:
            fields.update(numbers)
        taken, rest = take_flags(tail, fields, setting_of)
        if ("model_path",) not in taken:
            raise UsageError("its command line has no --model-path that specmon can read")
        return {"command": command, **nest(taken), "extra_args": rest}

    def profile_key_of(self, subject: str) -> tuple[str, ...] | None:
        return _PROFILE_KEYS.get(subject)

    def flag_kind(self, name: str) -> FlagKind | None:
        from specmon.backends.sglang.flags import flag_kind

        return flag_kind(name.lstrip("-"))

    def setting_flags(
        self, args: Sequence[str], changes: Mapping[str, str | bool | None]
    ) -> dict[str, str | bool | None]:
        """A change named by an argparse prefix (``--set mem-frac=0.8``) replaces the flag it
        stands for, as SGLang would read it, instead of adding a second spelling beside it."""
        from specmon.backends.sglang.flags import flag_name_as_read

        renamed: dict[str, str | bool | None] = {}
        for name, value in changes.items():
            bare = name.lstrip("-")
            as_read = flag_name_as_read(bare)
            renamed[as_read if as_read != bare else name] = value
        return renamed

    def launch_problems(self, args: Sequence[str], env: Mapping[str, str]) -> list[Problem]:
        from specmon.backends.sglang.flags import sglang_launch_problems

        return sglang_launch_problems(args, env)

    def env_value_problem(self, name: str, value: str) -> str | None:
        from specmon.backends.sglang.flags import env_value_problem

        return env_value_problem(name, value)

    def speculative_algorithms(self) -> tuple[str, ...]:
        from specmon.backends.sglang.flags import SPECULATIVE_ALGORITHM_VALUES

        return SPECULATIVE_ALGORITHM_VALUES

    def speculation_flags(self, args: Sequence[str]) -> frozenset[str]:
        return frozenset(
            item.name for item in parse_flags(args)[0] if item.name.startswith("speculative-")
        )

    def key_flags(self, args: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
        values: dict[str, str] = {}
        for item in parse_flags(args)[0]:
            values[item.name] = "" if item.value is None else item.value
        out: dict[str, str] = {"algorithm": values.get("speculative-algorithm") or "off"}
        for key, names in _KEY_FLAG_NAMES:
            for name in names:
                if values.get(name):
                    out[key] = values[name]
                    break
        out.update(nccl_key_flags(env))
        return out

    def run_info_labels(self, argv: Sequence[str]) -> dict[str, str]:
        values: dict[str, str] = {}
        for item in parse_flags(argv)[0]:
            values[item.name] = "" if item.value is None else item.value
        return {
            label: next((values[name] for name in names if values.get(name)), "")
            for label, names in _RUN_INFO_FLAGS
        }

    def multinode_args(self, node: NodePlacement) -> tuple[str, ...] | None:
        host = f"[{node.init_host}]" if ":" in node.init_host else node.init_host
        return (
            *render_flag("nnodes", str(node.nnodes)),
            *render_flag("node-rank", str(node.rank)),
            *render_flag("dist-init-addr", f"{host}:{node.init_port}"),
        )

    def multinode_flags(self) -> frozenset[str]:
        from specmon.backends.sglang.flags import MULTINODE_FLAGS

        return MULTINODE_FLAGS


class SGLangForm(RelaunchForm):
    """The relaunch form's fields."""

    def form_fields(self) -> tuple[FormField, ...]:
        return (
            FormField("speculative-num-steps", label="num steps"),
            FormField("speculative-eagle-topk", label="eagle topk"),
            FormField("speculative-num-draft-tokens", label="draft tokens"),
            FormField("mem-fraction-static", label="mem fraction"),
            *NCCL_FORM_FIELDS,
        )

    def form_context_args(self, base_args: Sequence[str] | None) -> list[str]:
        algorithm: str | None = self.default_speculative_algorithm
        if base_args is not None:
            given = [
                i.value for i in parse_flags(base_args)[0] if i.name == "speculative-algorithm"
            ]
            algorithm = given[-1] if given else None
        return [*render_flag("speculative-algorithm", algorithm)] if algorithm else []

    def form_fixed_subjects(self) -> frozenset[str]:
        return frozenset({"--speculative-algorithm", "--speculative-draft-model-path"})


class SGLangHttp(HttpApi):
    """Its HTTP endpoints."""

    health_path = "/health"
    info_paths = ("/get_server_info", "/server_info")
    metrics_path = "/metrics"
    metric_prefix = "sglang:"
    accept_length_metric = "sglang:spec_accept_length"
    generate_path = "/generate"
    probe_paths = ("/get_server_info", "/server_info", "/v1/models")
    metrics_hint = "SGLang serves it when launched with --enable-metrics"

    def http_likeness(self, answers: Mapping[str, Any]) -> float:
        """Its server info (the launch's server args: ``model_path`` with ``tp_size`` or
        ``internal_states``) is sure; an OpenAI model card ``owned_by`` sglang nearly so."""
        for path in ("/get_server_info", "/server_info"):
            info = answers.get(path)
            if (
                isinstance(info, dict)
                and "model_path" in info
                and ("tp_size" in info or "internal_states" in info)
            ):
                return 1.0
        models = answers.get("/v1/models")
        cards = models.get("data") if isinstance(models, dict) else None
        if isinstance(cards, list) and any(
            isinstance(card, dict) and card.get("owned_by") == "sglang" for card in cards[:8]
        ):
            return 0.9
        return 0.0

    def new_http_only_metrics_reader(self) -> MetricsReader | None:
        """The scheduler's gauges: a launched run's log says all, a URL's server nothing."""
        from specmon.backends.sglang.metrics import SGLangMetricsReader

        return SGLangMetricsReader()

    def new_latency_reader(
        self, argv: Sequence[str] = (), window_s: float = DEFAULT_WINDOW_S
    ) -> LatencyReader | None:
        from specmon.backends.sglang.metrics import new_latency_reader

        return new_latency_reader(argv, window_s)

    def server_info_values(self, data: Any) -> tuple[tuple[str, str], ...]:
        if not isinstance(data, dict):
            return ()
        flat = dict(data)
        states = data.get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], dict):
            flat.update(states[0])
        return tuple((k, str(flat[k])) for k in INFO_KEYS if flat.get(k) is not None)

    def generate_body(self, text: str, max_tokens: int, stream: bool) -> dict[str, Any]:
        return {
            "text": text,
            "sampling_params": {
                "max_new_tokens": max_tokens,
                "temperature": 0.0,
                "ignore_eos": True,
            },
            "stream": stream,
        }

    def generate_meta(self, reply: Any) -> dict[str, Any] | None:
        meta = reply.get("meta_info") if isinstance(reply, dict) else None
        return meta if isinstance(meta, dict) else None

    def generate_text(self, reply: Any) -> str:
        text = reply.get("text") if isinstance(reply, dict) else None
        return text if isinstance(text, str) else ""


class SGLangTuning(Tuning):
    """The draft's shape and what a step count decides."""

    steps_setting = "speculative-num-steps"

    def draft_shape(
        self, args: Sequence[str], env: Mapping[str, str], server_info: Mapping[str, str]
    ) -> DraftShape:
        """``/get_server_info``'s speculative fields over the launch's flags."""
        flags = self.key_flags(args, env)

        def read(info_key: str, flag_key: str) -> int | None:
            for value in (server_info.get(info_key), flags.get(flag_key)):
                if value is not None and str(value).strip().isdigit():
                    return int(str(value).strip())
            return None

        return DraftShape(
            steps=read("speculative_num_steps", "steps"),
            topk=read("speculative_eagle_topk", "topk"),
            verify_tokens=read("speculative_num_draft_tokens", "draft_tokens"),
        )

    def steps_follow_ups(
        self, args: Sequence[str], given: Iterable[str]
    ) -> dict[str, tuple[str, str]]:
        """A chain (topk 1) verifies steps + 1 tokens: the draft tokens follow the steps."""
        if "speculative-num-draft-tokens" in set(given):
            return {}
        values = {item.name: item.value for item in parse_flags(args)[0]}
        steps = values.get("speculative-num-steps") or ""
        if values.get("speculative-eagle-topk") != "1" or not steps.isdigit():
            return {}
        tokens = str(int(steps) + 1)
        if values.get("speculative-num-draft-tokens") == tokens:
            return {}
        return {"speculative-num-draft-tokens": (tokens, "steps + 1, topk 1")}


class SGLangProbe(ProbeHook):
    """The in-server timing probe."""

    def probe_targets(self) -> ProbeTargets | None:
        from specmon.backends.sglang.probe import injection_files

        return ProbeTargets(files=injection_files())

    def probe_source_report(self, path: Path) -> tuple[str, bool] | None:
        from specmon.backends.sglang.check_source import check_source, format_report

        report = check_source(path)  # a UsageError when path holds no sglang package
        return format_report(report), report.fully_works


class SGLangSim(Simulator):
    """The simulator personality that stands in for it."""

    sim_module = "specmon.sim"


class SGLangBackend(
    SGLangLogs, SGLangLaunch, SGLangForm, SGLangHttp, SGLangTuning, SGLangProbe, SGLangSim, Backend
):
    """SGLang's facets together: the registry's entry for this server."""

    name = "sglang"
    display_name = "SGLang"
