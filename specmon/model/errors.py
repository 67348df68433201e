"""Errors specmon reports to people: one clear line, never a traceback."""

from __future__ import annotations


class SpecmonError(Exception):
    """An error whose message is fit to show as-is. ``exit_code`` is what the CLI returns."""

    exit_code = 1


class UsageError(SpecmonError):
    """Bad command-line input or configuration (exit code 2, like argparse)."""

    exit_code = 2


class ConfigError(UsageError):
    """A problem in specmon.toml; the message names the file, the key and the line."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        if key is not None:
            where += f"{key}: "
        super().__init__(where + message)
        self.path, self.key, self.line = path, key, line


class LaunchSpecError(UsageError):
    """A launch spec that must not run; each problem names the flag or variable at fault."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class TransportError(SpecmonError):
    """The host could not be reached or a remote call failed (connection, timeout)."""


class ConnectionLost(TransportError):
    """The connection dropped; the session reconnects and resumes its streams."""


class HostKeyError(TransportError):
    """The host's key is unknown or changed: refused, never silently trusted, never retried.
    ``accept_command`` adds the presented key to the known_hosts file ssh uses for the host;
    ``remove_command`` removes a recorded (changed) one first."""

    def __init__(
        self,
        message: str,
        *,
        changed: bool = False,
        accept_command: str | None = None,
        remove_command: str | None = None,
    ) -> None:
        super().__init__(message)
        self.changed = changed
        self.accept_command = accept_command
        self.remove_command = remove_command
