"""The walk-through's third server (docs/backends.md, "Adding a server"): every facet filled
with the least that works, for toyserve (``server.py`` beside this file).

Written as a real backend folder would be, so that the test that registers it by one line
(tests/backends/test_third_backend.py) shows that adding a server needs nothing else."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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
    Problem,
    ProfileFields,
    RelaunchForm,
    ServerLogs,
    Tuning,
)
from specmon.backends.flag_grammar import parse_flags, render_flag
from specmon.backends.log_totals import ServingTotals
from specmon.backends.neutral import NeutralLogParser
from specmon.model.events import Event, HttpUp, Ready

SERVER = Path(__file__).with_name("server.py")
_FLAGS: dict[str, FlagKind] = {
    "model-dir": "value",
    "host": "value",
    "port": "value",
    "fail-after-load": "switch",
}
_LISTENING = re.compile(r"toyserve: listening on http://[^:\s]+:(\d{1,5})")


# --- logs: the parser reads toyserve's own lines; errors are the neutral reader's -----------


class ToyLogParser(LogParser):
    def __init__(self) -> None:
        self._errors = NeutralLogParser()  # tracebacks, OOM, NCCL: the same for every server
        self._pending = ""

    def feed(self, chunk: str | bytes) -> list[Event]:
        text = chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else chunk
        *lines, self._pending = (self._pending + text).split("\n")
        return [*self._errors.feed(chunk), *(e for line in lines for e in self._line(line))]

    def flush(self) -> list[Event]:
        line, self._pending = self._pending, ""
        return [*self._errors.flush(), *self._line(line)]

    @staticmethod
    def _line(line: str) -> list[Event]:
        if found := _LISTENING.search(line):
            return [HttpUp(port=int(found.group(1)))]
        if line.strip() == "toyserve: ready":
            return [Ready()]
        return []


class ToyLogSummary(ServingTotals):
    """The totals every server shares (errors, the first one's message), plus readiness."""

    def add(self, event: Event) -> None:
        self.add_shared(event)
        if event.kind == "ready":
            self.ready = True

    def merge(self, later: LogSummary) -> None:
        assert isinstance(later, ToyLogSummary)
        self.merge_shared(later)
        self.ready = self.ready or later.ready

    def finish(self, parser: LogParser) -> dict[str, Any]:
        return {
            "backend": "toy",
            "ready": self.ready,
            "errors": self.errors,
            "first_error": self.first_error,
        }


class ToyLogs(ServerLogs):
    loading_phases = ("HTTP server", "ready")

    def new_log_parser(self) -> LogParser:
        return ToyLogParser()

    def new_log_summary(self) -> LogSummary:
        return ToyLogSummary()

    def detect_log(self, sample: str) -> float:
        return 0.9 if "toyserve: " in sample else 0.0


# --- launch ----------------------------------------------------------------------------------


class ToyLaunch(LaunchRules):
    default_command = ("{python}", str(SERVER))
    env_prefixes = ("TOYSERVE_",)
    default_port = 9100

    def command_matches(self, command: Sequence[str]) -> bool:
        return any(word.endswith("toy_backend/server.py") for word in command)

    def profile_args(self, profile: ProfileFields) -> tuple[str, ...]:
        args = [*render_flag("model-dir", profile.model_path)]
        if profile.host_bind is not None:
            args += render_flag("host", profile.host_bind)
        if profile.port is not None:
            args += render_flag("port", str(profile.port))
        return (*args, *profile.extra_args)

    def profile_key_of(self, subject: str) -> tuple[str, ...] | None:
        keys = {"--model-dir": ("model_path",), "--port": ("port",), "--host": ("host_bind",)}
        return keys.get(subject)

    def flag_kind(self, name: str) -> FlagKind | None:
        return _FLAGS.get(name)

    def launch_problems(self, args: Sequence[str], env: Mapping[str, str]) -> list[Problem]:
        items, grammar = parse_flags(args)
        problems = [Problem("argv", message) for message in grammar]
        for item in items:
            if item.name not in _FLAGS:
                problems.append(Problem(f"--{item.name}", "toyserve has no such flag"))
            elif item.name == "port" and not (item.value or "").isdigit():
                problems.append(Problem("--port", f"not a port number: {item.value!r}"))
        return problems

    def env_value_problem(self, name: str, value: str) -> str | None:
        return None

    def speculative_algorithms(self) -> tuple[str, ...]:
        return ()

    def speculation_flags(self, args: Sequence[str]) -> frozenset[str]:
        return frozenset()

    def key_flags(self, args: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
        return {}

    def run_info_labels(self, argv: Sequence[str]) -> dict[str, str]:
        items, _ = parse_flags(argv[2:])  # past "{python} server.py"
        model = next((item.value for item in items if item.name == "model-dir"), None)
        return {label: "" for label in RUN_INFO_LABELS} | {"model": model or ""}


class ToyForm(RelaunchForm):
    def form_fields(self) -> tuple[FormField, ...]:
        return (FormField("model-dir", label="model directory"), *NCCL_FORM_FIELDS)

    def form_context_args(self, base_args: Sequence[str] | None) -> list[str]:
        return []

    def form_fixed_subjects(self) -> frozenset[str]:
        return frozenset({"--port"})


class ToyHttp(HttpApi):
    health_path = "/health"
    info_paths = ("/info",)
    generate_path = "/generate"

    def server_info_values(self, data: Any) -> tuple[tuple[str, str], ...]:
        if not isinstance(data, dict):
            return ()
        return tuple((key, str(data[key])) for key in ("version", "model") if key in data)

    def generate_body(self, text: str, max_tokens: int, stream: bool) -> dict[str, Any]:
        return {"prompt": text, "max_tokens": max_tokens}

    def generate_meta(self, reply: Any) -> dict[str, Any] | None:
        if not isinstance(reply, dict) or "completion_tokens" not in reply:
            return None
        return {"completion_tokens": reply["completion_tokens"]}

    def generate_text(self, reply: Any) -> str:
        return str(reply.get("text", "")) if isinstance(reply, dict) else ""


class ToyTuning(Tuning):
    def draft_shape(
        self, args: Sequence[str], env: Mapping[str, str], server_info: Mapping[str, str]
    ) -> DraftShape:
        return DraftShape(steps=0, topk=None, verify_tokens=None)  # toyserve never speculates


class ToyBackend(ToyLogs, ToyLaunch, ToyForm, ToyHttp, ToyTuning, Backend):
    """No probe and no simulator: ``Backend`` brings the ProbeHook and Simulator facets'
    defaults (None), which say so."""

    name = "toy"
    display_name = "toyserve"
