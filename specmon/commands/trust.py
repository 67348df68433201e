"""`specmon trust [PATH]`: trust a specmon.toml found in the working directory.

specmon uses a ./specmon.toml only once its exact content is trusted (it can name commands to
run); this records the file's sha256 in the user config dir. The file is checked first, so
what is trusted is a config that loads. ``--list`` shows the records, ``--revoke`` forgets one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """\
examples:
  specmon trust ./specmon.toml          use this checkout's config from now on
  specmon trust --list                  every trusted file and whether it changed since
  specmon trust --revoke ./specmon.toml
"""
"""The examples that end `specmon trust --help`."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="the file, or a directory holding specmon.toml (default: ./specmon.toml)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--list", action="store_true", help="list the trusted files")
    which.add_argument("--revoke", action="store_true", help="forget PATH's trust record")


def run(args: argparse.Namespace) -> int:
    from specmon.launch.config import CONFIG_FILE_NAME
    from specmon.model.errors import UsageError

    if args.list:
        if args.path is not None:
            raise UsageError("specmon trust --list takes no PATH")
        return _list()
    path = Path(args.path if args.path is not None else CONFIG_FILE_NAME).expanduser()
    if path.is_dir():
        path = path / CONFIG_FILE_NAME
    if args.revoke:
        return _revoke(path)
    return _trust(path)


def _trust(path: Path) -> int:
    from specmon.launch.config import parse_config_text
    from specmon.launch.trust import trust
    from specmon.model.errors import ConfigError
    from specmon.model.terminal_text import safe_text

    if not path.is_file():
        reason = "is a directory" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {reason}", path=safe_text(str(path)))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=safe_text(str(path))) from None
    try:
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason})", path=safe_text(str(path))) from None
    parse_config_text(text, path)  # a mistake is reported (file:line) and nothing is trusted
    record = trust(path, data)
    print(safe_text(f"trusted {record.path} (sha256 {record.sha256})"))
    return 0


def _revoke(path: Path) -> int:
    from specmon.launch.trust import record_key, revoke
    from specmon.model.errors import UsageError
    from specmon.model.terminal_text import safe_text

    if not revoke(path):
        raise UsageError(safe_text(f"{record_key(path)} was not trusted; nothing to revoke"))
    print(safe_text(f"no longer trusted: {record_key(path)}"))
    return 0


def _list() -> int:
    from specmon.launch.trust import content_hash, read_records, trust_file
    from specmon.model.terminal_text import safe_text

    records = read_records()
    if not records:
        print(safe_text(f"no trusted files (records: {trust_file()})"))
        return 0
    for name, sha256 in sorted(records.items()):
        try:
            state = "unchanged" if content_hash(Path(name).read_bytes()) == sha256 else "changed"
        except FileNotFoundError:
            state = "missing"
        except OSError as exc:
            state = f"unreadable: {exc.strerror}"
        print(safe_text(f"{name}  sha256 {sha256}  {state}"))
    return 0
