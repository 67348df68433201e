"""The knobs of a host session: every timeout and retry bound lives here."""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass, field
from typing import Literal

GpuAgentKind = Literal["nvml", "sim", "none"]


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """Knobs of a host session; every timeout and retry bound lives here."""

    state_dir: str = "~/.local/state/specmon"
    python: str = "python3"
    gpu_agent: GpuAgentKind = "nvml"
    gpu_rate_hz: float = 4.0
    health_interval_s: float = 2.0  # SGLang's /health runs a 1-token generation: keep it calm
    latency_window_s: float = 60.0  # the rolling window of the ``latency`` events
    http_timeout_s: float = 5.0
    call_timeout_s: float = 20.0
    stop_grace_s: float = 30.0
    kill_wait_s: float = 10.0
    hang_after_s: float = 300.0  # CUDA-graph capture can be quiet for minutes
    gpu_idle_mb: float = 2048.0
    gpu_release_timeout_s: float = 60.0
    reconnect_max_attempts: int = 100
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    follow_interval_s: float = 0.05
    replay_log_bytes: int = 16 << 20
    agent_max_failures: int = 5
    # A server specmon did not launch to follow instead of this state dir's runs
    # (model/attach_target.py's text: "auto", a pid, "unit:NAME", "container:NAME").
    attach: str | None = None
    owner: str = field(
        default_factory=lambda: f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"
    )
