"""Where specmon keeps the user's own files (config, trust records, local state), and the
one way it makes a missing directory there: 0700, leaving those that exist as they are.

Kept apart from ``config`` so that the trust records (``trust``) and the local transport can
find and make these directories without importing the config reader.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

CONFIG_FILE_NAME = "specmon.toml"
CONFIG_DIR_ENV = "SPECMON_CONFIG_DIR"  # overrides the user config dir (tests, packaging)
STATE_DIR_ENV = "SPECMON_STATE_DIR"  # overrides the local state dir


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where specmon keeps local state (ledger, load times): $SPECMON_STATE_DIR or the
    platform's user state dir."""
    environ = os.environ if environ is None else environ
    if environ.get(STATE_DIR_ENV):
        return Path(environ[STATE_DIR_ENV]).expanduser()
    import platformdirs

    return Path(platformdirs.user_state_dir("specmon"))


def user_config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """$SPECMON_CONFIG_DIR, else the platform's user config dir (XDG_CONFIG_HOME on Linux)."""
    environ = os.environ if environ is None else environ
    if environ.get(CONFIG_DIR_ENV):
        return Path(environ[CONFIG_DIR_ENV]).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("specmon"))


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The user's own specmon.toml (it may not exist yet): where a profile saved without a
    config file in use goes."""
    return user_config_dir(environ) / CONFIG_FILE_NAME


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents 0700 (as ``umask 077; mkdir -p`` does);
    those that exist keep their mode."""
    missing: list[Path] = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for entry in reversed(missing):
        with contextlib.suppress(FileExistsError):
            entry.mkdir(mode=0o700)
