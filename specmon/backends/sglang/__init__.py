"""SGLang: log parser, launch flag rules and endpoints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specmon.backends import Backend, LogParser, LogSummary


class SGLangBackend(Backend):
    name = "sglang"
    launch_module = "sglang.launch_server"
    health_path = "/health"
    info_path = "/get_server_info"

    def new_log_parser(self) -> LogParser:
        from specmon.backends.sglang.parser import SGLangLogParser

        return SGLangLogParser()

    def new_log_summary(self) -> LogSummary:
        from specmon.backends.sglang.summary import SGLangLogSummary

        return SGLangLogSummary()

    def detect_log(self, sample: str) -> float:
        from specmon.backends.sglang.detect import sglang_log_confidence

        return sglang_log_confidence(sample)

    def validate_launch(self, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
        from specmon.backends.sglang.flags import validate_sglang_launch

        return validate_sglang_launch(args, env)
