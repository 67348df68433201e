"""SGLang: log parser, launch flag rules and endpoints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specmon.backends import Backend, LogParser


class SGLangBackend(Backend):
    name = "sglang"
    launch_module = "sglang.launch_server"
    health_path = "/health"
    info_path = "/get_server_info"

    def new_log_parser(self) -> LogParser:
        from specmon.backends.sglang.parser import SGLangLogParser

        return SGLangLogParser()

    def validate_launch(self, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
        from specmon.backends.sglang.flags import validate_sglang_launch

        return validate_sglang_launch(args, env)
