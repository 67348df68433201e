"""The host session: specmon's UI-free connection to a GPU host (see docs/host-session.md).

``open_session(host, config)`` turns what a person types (``[user@]host[:port]``, an ssh config
alias, a host from specmon.toml, or ``local``) into a ``HostSession`` over the right transport.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from specmon.model.errors import HostKeyError, TransportError, UsageError
from specmon.model.hostname import parse_host
from specmon.session.transport import Transport

if TYPE_CHECKING:
    from specmon.launch.config import Config, HostConfig, Profile
    from specmon.session.host import HostSession, SessionOptions

_LAZY = {
    "HostSession",
    "LockBusyError",
    "RemoteCallError",
    "RunConflictError",
    "RunStatus",
    "SessionOptions",
    "StopReport",
}


def __getattr__(name: str) -> Any:
    """The session classes load on first use, so `specmon --help` stays fast."""
    if name in _LAZY:
        from specmon.session import host

        return getattr(host, name)
    raise AttributeError(name)


__all__ = [
    "HostKeyError",
    "HostSession",
    "LockBusyError",
    "RemoteCallError",
    "RunConflictError",
    "RunStatus",
    "SessionOptions",
    "StopReport",
    "TransportError",
    "open_session",
    "parse_host",
    "with_ui_rates",
]


def open_session(
    host: str,
    config: Config | None = None,
    *,
    options: SessionOptions | None = None,
    known_hosts: str | None = None,
    ssh_config: tuple[str, ...] | None = None,
    identity_files: tuple[str, ...] = (),
    stop_server_on_close: bool = False,
    attach_profile: Profile | None = None,
) -> HostSession:
    """A HostSession for HOST (not yet started: ``await session.start()``). ``options.attach``
    is the command line's ``--attach``; ``attach_profile``, the profile whose ``attach`` key
    `connect`/`watch -p` follow (launch.config.attach_for orders them with the host's key)."""
    from specmon.launch.config import attach_for
    from specmon.session.host import HostSession, SessionOptions

    hosts = dict(config.hosts) if config is not None else {}
    profiles = dict(config.profiles) if config is not None else {}
    options = with_ui_rates(options or SessionOptions(), config)
    transport: Transport
    host_config = hosts.get(host)
    options = replace(options, attach=attach_for(options.attach, attach_profile, host_config))
    if host == "local" or (host_config is not None and host_config.transport == "local"):
        from specmon.session.local import LocalTransport

        transport = LocalTransport(label=host)
        if host_config is not None:
            options = replace(options, state_dir=_state_dir(options, host_config))
    else:
        from specmon.session.ssh import SshTarget, SshTransport

        if host_config is not None:
            target = SshTarget(
                host=host_config.address,
                port=host_config.port,
                username=host_config.user,
                identity_files=(host_config.identity_file,) if host_config.identity_file else (),
                known_hosts=host_config.known_hosts,
                options=dict(host_config.ssh_options),
            )
            options = replace(
                options,
                python=host_config.python,
                state_dir=_state_dir(options, host_config),
            )
        else:
            user, address, port = parse_host(host)
            target = SshTarget(host=address, port=port, username=user)
            if config is not None:
                target.not_configured = f"{host!r} is not a host of {config.searched_text()}"
        if known_hosts is not None:
            target.known_hosts = known_hosts
        if identity_files:
            target.identity_files = identity_files
        target.config_files = _config_files(target.options, ssh_config)
        transport = SshTransport(target)
    return HostSession(
        transport,
        profiles=profiles,
        options=options,
        stop_server_on_close=stop_server_on_close,
    )


def with_ui_rates(options: SessionOptions, config: Config | None) -> SessionOptions:
    """``[ui] gpu_sample_hz``, ``http_poll_s`` and ``latency_window_s`` from the config, where the caller left the
    session's own defaults (a caller's explicit choice, e.g. a test's, wins)."""
    from specmon.session.options import SessionOptions

    if config is None:
        return options
    ui = config.ui
    defaults = SessionOptions()
    if options.gpu_rate_hz == defaults.gpu_rate_hz:
        options = replace(options, gpu_rate_hz=float(ui.gpu_sample_hz))
    if options.health_interval_s == defaults.health_interval_s:
        options = replace(options, health_interval_s=float(ui.http_poll_s))
    if options.latency_window_s == defaults.latency_window_s:
        options = replace(options, latency_window_s=float(ui.latency_window_s))
    return options


def _state_dir(options: SessionOptions, host_config: HostConfig) -> str:
    """A state dir the caller chose (`--state-dir`, a test's private dir) wins over the host's
    configured one, which wins over the built-in default."""
    from specmon.session.host import SessionOptions

    if options.state_dir != SessionOptions().state_dir:
        return options.state_dir
    return str(host_config.state_dir)


def _config_files(extra: dict[str, str], given: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """ssh config files: the host's ``ssh_options`` from specmon.toml first (ssh takes the
    first value it reads), then the given files or ~/.ssh/config."""
    import atexit
    import shutil
    from pathlib import Path

    from specmon.session.tempdirs import owned_tempdir

    if not extra:
        return given
    bad = [k for k, v in extra.items() if not re.fullmatch(r"[A-Za-z]+", k) or "\n" in v]
    if bad:
        raise UsageError(f"ssh_options: bad option name or value for {', '.join(bad)}")
    directory = owned_tempdir("specmon-ssh-")  # stale ones (kill -9) removed first
    # Reconnects read it again, so it lives as long as this process, and no longer.
    atexit.register(shutil.rmtree, directory, True)
    path = directory / "config"
    path.write_text("".join(f"{k} {v}\n" for k, v in extra.items()))
    default = Path("~/.ssh/config").expanduser()
    rest = given if given is not None else ((str(default),) if default.exists() else ())
    return (str(path), *rest)
