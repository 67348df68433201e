"""Server backends behind one interface: everything specmon knows about one kind of server.

A backend is one folder, ``specmon/backends/<name>/``, implementing the facets of
``facets.py`` and registered by one line in ``registry.BACKENDS``; code outside
``specmon/backends/`` asks the backend (``get_backend(name)``) and never names a server
(tests/backends/test_server_boundary.py checks it). docs/backends.md describes every member
and walks through adding a server.

This module only hands on the names callers use: the types live in ``base.py``, the facets in
``facets.py``, the registry in ``registry.py``.
"""

from specmon.backends.base import (
    NCCL_FORM_FIELDS,
    RUN_INFO_LABELS,
    DraftShape,
    FlagKind,
    FormField,
    LogParser,
    LogReading,
    LogSummary,
    MetricsReader,
    NodePlacement,
    ProbeTargets,
    Problem,
    ProfileFields,
    SpeculativeFields,
    nccl_key_flags,
)
from specmon.backends.facets import (
    Backend,
    HttpApi,
    LaunchRules,
    ProbeHook,
    RelaunchForm,
    ServerLogs,
    Simulator,
    Tuning,
)
from specmon.backends.registry import (
    BACKENDS,
    DEFAULT_BACKEND,
    KNOWN_SERVER_COMMANDS,
    NEUTRAL_LOG_READING,
    all_backends,
    backend_for_command,
    detect_backend,
    env_prefixes,
    get_backend,
    neutral_log_reading,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "KNOWN_SERVER_COMMANDS",
    "NCCL_FORM_FIELDS",
    "NEUTRAL_LOG_READING",
    "RUN_INFO_LABELS",
    "Backend",
    "DraftShape",
    "FlagKind",
    "FormField",
    "HttpApi",
    "LaunchRules",
    "LogParser",
    "LogReading",
    "LogSummary",
    "MetricsReader",
    "NodePlacement",
    "ProbeHook",
    "ProbeTargets",
    "Problem",
    "ProfileFields",
    "RelaunchForm",
    "ServerLogs",
    "Simulator",
    "SpeculativeFields",
    "Tuning",
    "all_backends",
    "backend_for_command",
    "detect_backend",
    "env_prefixes",
    "get_backend",
    "nccl_key_flags",
    "neutral_log_reading",
]
