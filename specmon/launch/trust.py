"""Trust for a specmon.toml found in the working directory, as direnv and mise do.

A config can make specmon run programs: a profile's ``command``, and through a host's
``ssh_options`` OpenSSH's ``ProxyCommand`` (or ``LocalCommand`` and ``KnownHostsCommand``).
A file that merely sits in the directory someone runs specmon from (an untrusted checkout, a
shared directory) must not get to do that. So ``./specmon.toml`` is used only once its exact
content has been trusted with ``specmon trust``; a file given with ``--config`` or found in
the user config dir is the user's own choice and needs no trust step.

The records live in ``trusted.json`` in the user config dir (``$SPECMON_CONFIG_DIR`` or the
platform's, e.g. ``~/.config/specmon/``): each file's resolved absolute path and the sha256 of
its bytes. The file is created 0600 (its directory 0700 when specmon creates it), and records
in a file that is not the user's, or that others can write, are never used.

Imports stay light (hashlib and json only when a record is read or written).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specmon.model.errors import ConfigError

TRUST_FILE_NAME = "trusted.json"
TRUST_FORMAT_VERSION = 1

TrustState = Literal["trusted", "untrusted", "changed"]


class UntrustedConfigError(ConfigError):
    """A specmon.toml found in the working directory whose content is not trusted (never
    trusted, or changed since): refused in one line that gives the command to trust it."""

    def __init__(self, shown: str, state: TrustState) -> None:
        import shlex

        self.shown = shown  # how the file is named to the user, e.g. ./specmon.toml
        self.state = state
        self.reason = "has changed since it was trusted" if state == "changed" else "is not trusted"
        self.trust_command = f"specmon trust {shlex.quote(shown)}"
        super().__init__(
            f"{shown} {self.reason} (found in the working directory): "
            f"review it, then run: {self.trust_command}"
        )


@dataclass(frozen=True)
class TrustRecord:
    """One trusted file: its resolved absolute path and the sha256 of its bytes."""

    path: str
    sha256: str


def content_hash(data: bytes) -> str:
    """The hex sha256 of a config file's bytes (what a trust record pins)."""
    import hashlib

    return hashlib.sha256(data).hexdigest()


def trust_file(environ: Mapping[str, str] | None = None) -> Path:
    """Where the trust records live: ``trusted.json`` in the user config dir."""
    from specmon.model.user_dirs import user_config_dir

    return user_config_dir(environ) / TRUST_FILE_NAME


def record_key(path: Path) -> str:
    """A config file's key in the records: its resolved absolute path (symlinks followed, so
    two names of one file share one record)."""
    return str(Path(path).expanduser().resolve())


def read_records(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The trusted files (resolved path -> sha256); empty when there is no trust file.

    A trust file that is not the user's own or that others may write is refused (someone
    else could have planted a record in it), and so is one that is not what specmon writes.
    """
    import json

    path = trust_file(environ)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read trust records: {exc.strerror}", path=str(path)) from None
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(handle.fileno())
        if status.st_uid != os.geteuid() or status.st_mode & 0o022:
            raise ConfigError(
                f"trust records not used: owned by uid {status.st_uid} with mode "
                f"{status.st_mode & 0o777:o}; they must be yours and writable by you alone "
                f"(e.g. chmod 600 the file)",
                path=str(path),
            )
        raw = handle.read()
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ConfigError("trust records are not valid JSON", path=str(path)) from None
    trusted = document.get("trusted") if isinstance(document, dict) else None
    if not isinstance(trusted, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in trusted.items()
    ):
        raise ConfigError(
            'trust records must be {"trusted": {"PATH": "SHA256", ...}}', path=str(path)
        )
    return dict(trusted)


def trust_state(path: Path, data: bytes, environ: Mapping[str, str] | None = None) -> TrustState:
    """Whether these bytes of ``path`` are trusted, were never trusted, or changed since."""
    recorded = read_records(environ).get(record_key(path))
    if recorded is None:
        return "untrusted"
    return "trusted" if recorded == content_hash(data) else "changed"


def _write_records(records: Mapping[str, str], environ: Mapping[str, str] | None) -> Path:
    """Replace the trust file atomically, created 0600; its directory is made 0700 when
    missing (one that exists keeps its mode)."""
    import json

    from specmon.model.user_dirs import make_private_dirs

    path = trust_file(environ)
    try:
        make_private_dirs(path.parent)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        text = json.dumps(
            {"version": TRUST_FORMAT_VERSION, "trusted": dict(sorted(records.items()))},
            indent=2,
        )
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                os.fchmod(handle.fileno(), 0o600)
                handle.write(text + "\n")
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ConfigError(f"cannot write trust records: {exc.strerror}", path=str(path)) from None
    return path


def trust(path: Path, data: bytes, environ: Mapping[str, str] | None = None) -> TrustRecord:
    """Record these bytes of ``path`` as trusted (replacing an older record of it)."""
    records = read_records(environ)
    record = TrustRecord(record_key(path), content_hash(data))
    records[record.path] = record.sha256
    _write_records(records, environ)
    return record


def revoke(path: Path, environ: Mapping[str, str] | None = None) -> bool:
    """Forget ``path``'s record; False when it had none."""
    records = read_records(environ)
    if records.pop(record_key(path), None) is None:
        return False
    _write_records(records, environ)
    return True
